"""The VM devices' QEMU arguments, derived from the same parameter dataclasses as the device models (the full
command line of a VM: :mod:`testbed.vm.cmdline`).

Each emulated device is one class in ``VM_DEVICES`` (conv, fdp, zns, cxl) that
names its parameter groups and turns validated parameters into ``-device``
arguments: ``fdp.runs`` comes from ``FdpParams.ru_bytes``, ``zoned.zone_size``
from ``ZnsParams.zone_bytes``, the namespace size and logical block size from
``FlashParams``, the CXL memory size from ``CxlParams.cxl_bytes``. Nothing here
starts a process, so it is unit-tested without QEMU.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from devicemodels.params import CxlParams, FdpParams, FlashParams, GiB, KiB, MiB, ZnsParams
from kvbed.core.errors import KvbedError
from kvbed.core.params import check_fields, from_dict, param, split_overrides, to_dict, with_overrides
from kvbed.core.registry import Registry

QEMU_BIN = "qemu-system-x86_64"
QBOOT = "/usr/share/qemu/qboot.rom"


@dataclass(frozen=True)
class VmParams:
    """The guest machine itself (not the device under test)."""

    mem_bytes: int = param(1 * GiB, "guest memory")
    cpus: int = param(2, "guest CPUs")
    mdts_bytes: int = param(512 * KiB, "NVMe maximum data transfer size (QEMU mdts = log2(mdts_bytes / 4 KiB))")
    zasl_bytes: int = param(0, "ZNS zone append size limit; 0 = same as mdts_bytes")
    backing: str = param("file", "NVMe namespace storage: file = a sparse raw file in the VM's state directory "
                                 "(data kept; host disk grows with the data written and shrinks on deallocate); "
                                 "null = QEMU's null-co with read-zeroes (nothing stored, reads return zeros)",
                         choices=("file", "null"))

    def validate(self) -> "VmParams":
        if self.mem_bytes < 256 * MiB or self.mem_bytes % MiB:
            raise KvbedError(f"mem_bytes must be a whole number of MiB >= 256 MiB, got {self.mem_bytes}")
        if not 1 <= self.cpus <= 64:
            raise KvbedError(f"cpus must be in 1..64, got {self.cpus}")
        for f in ("mdts_bytes", "zasl_bytes"):
            v = getattr(self, f)
            if f == "zasl_bytes" and v == 0:
                continue
            if v < 4 * KiB or v & (v - 1) or v > 256 * MiB:
                raise KvbedError(f"{f} must be a power of two between 4 KiB and 256 MiB, got {v}")
        if self.zasl_bytes > self.mdts_bytes:
            raise KvbedError(f"zasl_bytes ({self.zasl_bytes}) exceeds mdts_bytes ({self.mdts_bytes})")
        return check_fields(self)


@dataclass(frozen=True)
class VmPaths:
    """Files of one VM (all inside its state directory except the image)."""

    kernel: Path
    initrd: Path
    overlay: Path
    disk: Path | None  # NVMe backing file (raw, sparse); None for cxl
    console: Path
    qmp: Path


def _log2_pages(nbytes: int) -> int:
    return (nbytes // (4 * KiB)).bit_length() - 1


def _bytes_arg(nbytes: int) -> str:
    return str(int(nbytes))


class VmDevice:
    """One emulated device kind: its parameter groups and its QEMU arguments."""

    name: ClassVar[str]
    param_classes: ClassVar[dict[str, type]]
    needs_seabios: ClassVar[bool] = False
    machine_opts: ClassVar[str] = ""

    def validate(self, p: dict[str, Any]) -> None:
        for v in p.values():
            v.validate()

    def disk_bytes(self, p: dict[str, Any]) -> int:
        return 0

    def device_args(self, p: dict[str, Any], paths: VmPaths) -> list[str]:
        raise NotImplementedError

    def kernel_args(self, p: dict[str, Any]) -> list[str]:
        return []

    def cpu_flags(self) -> str:
        return ""

    def mem_args(self, p: dict[str, Any]) -> str:
        return f"{p['vm'].mem_bytes // MiB}M"


VM_DEVICES: Registry[type[VmDevice]] = Registry("VM device")


class _NvmeDevice(VmDevice):
    def validate(self, p):
        super().validate(p)
        fl: FlashParams = p["flash"]
        pb = fl.page_bytes
        if not ((pb in (512, 1024, 2048, 4096)) or pb % 4096 == 0):
            raise KvbedError(f"page_bytes must be 512, 1024, 2048, 4096 or a multiple of 4096 for the VM "
                             f"(larger pages span several 4 KiB NVMe blocks), got {pb}")

    def disk_bytes(self, p):
        return p["flash"].logical_bytes if p["vm"].backing == "file" else 0

    def _drive(self, p, paths: VmPaths, drive_id: str) -> list[str]:
        if p["vm"].backing == "null":
            return ["-drive", f"driver=null-co,size={p['flash'].logical_bytes},read-zeroes=on,if=none,id={drive_id}"]
        if paths.disk is None:
            raise KvbedError("backing=file needs the namespace's backing file")
        return ["-drive", f"file={paths.disk},if=none,id={drive_id},format=raw,cache=unsafe,discard=unmap"]

    @staticmethod
    def lba_bytes(p) -> int:
        """NVMe logical block size: the page if it is at most 4 KiB (the guest's page size), else 4 KiB."""
        return min(p["flash"].page_bytes, 4096)

    def _lbs(self, p) -> str:
        b = self.lba_bytes(p)
        return f"logical_block_size={b},physical_block_size={b}"


@VM_DEVICES.register("conv")
class ConvDevice(_NvmeDevice):
    """A conventional NVMe namespace (no placement): the baseline."""

    param_classes = {"flash": FlashParams, "vm": VmParams}

    def device_args(self, p, paths):
        return self._drive(p, paths, "nvm0") + [
            "-device", f"nvme,id=nvme0,serial=kvbedconv0,mdts={_log2_pages(p['vm'].mdts_bytes)},bus=pcie.0",
            "-device", f"nvme-ns,drive=nvm0,bus=nvme0,nsid=1,{self._lbs(p)}",
        ]


@VM_DEVICES.register("fdp")
class FdpDevice(_NvmeDevice):
    """NVMe Flexible Data Placement: one endurance group, nruh handles, all on namespace 1."""

    param_classes = {"flash": FlashParams, "fdp": FdpParams, "vm": VmParams}

    def validate(self, p):
        super().validate(p)
        fl, fd = p["flash"], p["fdp"]
        if fd.ru_bytes % fl.page_bytes:
            raise KvbedError(f"ru_bytes ({fd.ru_bytes}) must be a multiple of page_bytes ({fl.page_bytes})")
        if fd.nrg != 1:
            # QEMU encodes the reclaim group in the placement id's upper bits; the op contract's pid is a
            # plain handle index, so only one reclaim group maps onto it without ambiguity.
            raise KvbedError(f"nrg must be 1 for the VM (placement ids are handle indexes), got {fd.nrg}")
        if fd.ru_bytes > fl.logical_bytes:
            raise KvbedError(f"ru_bytes ({fd.ru_bytes}) exceeds logical_bytes ({fl.logical_bytes})")

    def device_args(self, p, paths):
        fd = p["fdp"]
        return self._drive(p, paths, "nvm0") + [
            "-device", f"nvme-subsys,id=subsys0,fdp=on,fdp.runs={_bytes_arg(fd.ru_bytes)},fdp.nrg={fd.nrg},fdp.nruh={fd.nruh}",
            "-device", f"nvme,id=nvme0,serial=kvbedfdp0,subsys=subsys0,mdts={_log2_pages(p['vm'].mdts_bytes)},bus=pcie.0",
            "-device", f"nvme-ns,drive=nvm0,bus=nvme0,nsid=1,{self._lbs(p)},fdp.ruhs=0-{fd.nruh - 1}",
        ]


@VM_DEVICES.register("zns")
class ZnsDevice(_NvmeDevice):
    """NVMe Zoned Namespace: zone size, writable capacity, open/active limits."""

    param_classes = {"flash": FlashParams, "zns": ZnsParams, "vm": VmParams}

    def validate(self, p):
        super().validate(p)
        fl, z = p["flash"], p["zns"]
        for f in ("zone_bytes", "zone_cap_bytes"):
            if getattr(z, f) % fl.page_bytes:
                raise KvbedError(f"{f} ({getattr(z, f)}) must be a multiple of page_bytes ({fl.page_bytes})")
        if fl.logical_bytes % z.zone_bytes:
            raise KvbedError(f"logical_bytes ({fl.logical_bytes}) must be a whole number of zones of {z.zone_bytes} bytes")
        if z.zone_bytes & (z.zone_bytes - 1):
            raise KvbedError(f"zone_bytes must be a power of two for the guest kernel's zoned block layer, got {z.zone_bytes}")
        nzones = fl.logical_bytes // z.zone_bytes
        if z.max_active_zones > nzones:
            raise KvbedError(f"max_active_zones ({z.max_active_zones}) exceeds the number of zones ({nzones})")

    def device_args(self, p, paths):
        z, vm = p["zns"], p["vm"]
        zasl = _log2_pages(vm.zasl_bytes) if vm.zasl_bytes else 0
        return self._drive(p, paths, "nvm0") + [
            "-device", f"nvme,id=nvme0,serial=kvbedzns0,mdts={_log2_pages(vm.mdts_bytes)},zoned.zasl={zasl},bus=pcie.0",
            "-device", (f"nvme-ns,drive=nvm0,bus=nvme0,nsid=1,{self._lbs(p)},zoned=true,"
                        f"zoned.zone_size={_bytes_arg(z.zone_bytes)},zoned.zone_capacity={_bytes_arg(z.zone_cap_bytes)},"
                        f"zoned.max_open={z.max_open_zones},zoned.max_active={z.max_active_zones}"),
        ]


@VM_DEVICES.register("cxl")
class CxlDevice(VmDevice):
    """A CXL type-3 volatile memory expander behind one root port (SeaBIOS: qboot leaves CXL windows unassigned)."""

    param_classes = {"cxl": CxlParams, "vm": VmParams}
    needs_seabios = True
    machine_opts = ",cxl=on"
    GRANULE = 256 * MiB  # CXL region and fixed-window granularity

    def validate(self, p):
        super().validate(p)
        c = p["cxl"]
        if c.cxl_bytes % self.GRANULE:
            raise KvbedError(f"cxl_bytes must be a multiple of 256 MiB (CXL region granularity), got {c.cxl_bytes}")

    def window_bytes(self, p) -> int:
        return max(4 * GiB, p["cxl"].cxl_bytes)

    def mem_args(self, p):
        vm = p["vm"]
        maxmem = vm.mem_bytes + self.window_bytes(p)
        return f"{vm.mem_bytes // MiB}M,maxmem={maxmem // MiB}M,slots=8"

    def cpu_flags(self):
        # -hypervisor: else region commit fails ("Failed to synchronize CPU cache state").
        # -erms,-fsrm: glibc's memcpy then copies with vector moves instead of `rep movsb`, which TCG
        # turns into one emulated MMIO access per byte on the CXL window (64 KiB copies ~6x faster).
        return ",-hypervisor,-erms,-fsrm"

    def device_args(self, p, paths):
        c = p["cxl"]
        return [
            "-object", f"memory-backend-ram,id=vmem0,share=on,size={_bytes_arg(c.cxl_bytes)}",
            "-device", "pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1",
            "-device", "cxl-rp,port=0,bus=cxl.1,id=rp13,chassis=0,slot=2",
            "-device", "cxl-type3,bus=rp13,volatile-memdev=vmem0,id=cxl-vmem0",
            "-M", f"cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size={self.window_bytes(p) // MiB}M",
        ]

    def kernel_args(self, p):
        return ["memhp_default_state=offline"]  # never online CXL memory as system RAM


def device(name: str) -> VmDevice:
    return VM_DEVICES.get(name)()


def resolve_params(device_name: str, overrides=(), base: dict[str, dict] | None = None, *,
                   validate: bool = True) -> dict[str, Any]:
    """``k=v`` overrides (and an optional saved config) -> dataclasses by group, validated as a device
    (``validate=False``: each dataclass's own checks only, for a caller that completes them first)."""
    dev = device(device_name)
    labels = {g: "VM" if g == "vm" else f"device {device_name}" for g in dev.param_classes}
    groups = split_overrides(list(overrides), dev.param_classes, what="--param", labels=labels)
    out = {}
    for g, cls in dev.param_classes.items():
        obj = from_dict(cls, base[g], where=f"params.{g}") if base and g in base else cls()
        out[g] = with_overrides(obj, groups[g], what="--param", label=labels[g])
    if validate:
        dev.validate(out)
    return out


def params_to_dict(p: dict[str, Any]) -> dict[str, dict]:
    return {g: to_dict(v) for g, v in p.items()}


def with_vm_fields(p: dict[str, Any], **changes) -> dict[str, Any]:
    out = dict(p)
    out["vm"] = dataclasses.replace(p["vm"], **changes)
    return out
