"""VM backends: which emulator runs the guest and how the device under test is given to it.

A backend is one registry entry (``qemu``: stock QEMU 10 with its NVMe/CXL devices; ``femu``: FEMU's
QEMU with its flash SSD), each with its binary, its acceleration, its checks before start and its
device-args builder. The VM device classes (:data:`testbed.vm.qemu.VM_DEVICES`, one per device) keep
the parameter groups and the validation both backends share; the lifecycle (testbed.vm.vm), the
agent and the replay are the same for every backend.

``flash_stats``: whether the device's FDP statistics count flash (FEMU: GC copies and erases are
real) or only the protocol (QEMU: media bytes follow host bytes), so the replay knows whose WAF to
report as the device's. ``smart_flash_pages``: the SMART log fields (vendor area) in which the device counts
the pages the host programmed and the pages its GC relocated (FEMU's conventional SSD, which has no FDP
statistics), or None.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from kvbed.core.errors import KvbedError
from kvbed.core.params import format_size
from kvbed.core.registry import Registry
from testbed.vm import qemu


class VmBackend:
    name: ClassVar[str]
    flash_stats: ClassVar[bool] = False
    smart_flash_pages: ClassVar[tuple[str, str] | None] = None
    label: ClassVar[str] = ""
    #: emulator log lines that say nothing about why a VM ended (left out of one-line errors)
    log_noise: ClassVar[tuple[str, ...]] = ()

    def devices(self) -> list[str]:
        raise NotImplementedError

    def binary(self) -> str:
        raise NotImplementedError

    def forced_accel(self) -> tuple[str, str] | None:
        """(accel, reason) when the backend can only run one way."""
        return None

    def resolve_params(self, device: str, overrides=()) -> dict[str, Any]:
        """The device's parameters from the user's ``k=v`` overrides, with this backend's defaults."""
        return qemu.resolve_params(device, overrides)

    def check(self, device: str, p: dict[str, Any]) -> None:
        """Refuse, in one line, a device or parameters this backend cannot run (before anything starts)."""
        if device not in self.devices():
            raise KvbedError(f"the {self.name} backend has no {device} device ({', '.join(self.devices())})")
        qemu.device(device).validate(p)

    def disk_bytes(self, device: str, p: dict[str, Any]) -> int:
        return 0

    def device_args(self, device: str, p: dict[str, Any], paths: qemu.VmPaths) -> list[str]:
        raise NotImplementedError

    def firmware(self) -> tuple[str, list[str]]:
        """(qboot path, extra QEMU arguments such as ``-L``)."""
        return qemu.QBOOT, []


BACKENDS: Registry[type[VmBackend]] = Registry("VM backend")


@BACKENDS.register("qemu")
class QemuBackend(VmBackend):
    """Stock QEMU (bookworm-backports): NVMe conv/FDP/ZNS as a protocol model, CXL type-3 memory."""

    label = "QEMU"

    def devices(self):
        return qemu.VM_DEVICES.names()

    def binary(self):
        return qemu.QEMU_BIN

    def disk_bytes(self, device, p):
        return qemu.device(device).disk_bytes(p)

    def device_args(self, device, p, paths):
        return qemu.device(device).device_args(p, paths)


@BACKENDS.register("femu")
class FemuBackend(VmBackend):
    """FEMU's flash SSD (black-box conv, FDP, ZNS), built by ``kvbed femu build``; TCG only (built
    without KVM); the device lives in host RAM, which is checked before start."""

    label = "FEMU"
    flash_stats = True
    # hw/femu/nvme-admin.c nvme_smart_info: reserved2[8] = host_write_pages, reserved2[16] = gc_write_pages
    # (bbssd/ftl-datapath.c, ftl-line-gc.c; the FDP path does not count them)
    smart_flash_pages = ("vendor_u64_200", "vendor_u64_208")
    log_noise = ("Route MSIX vector to KVM failed", "add kvm msix virq failed")  # no KVM: harmless

    def devices(self):
        from testbed.femu.devices import FEMU_DEVICES

        return FEMU_DEVICES.names()

    def _build(self):
        from testbed.femu import build

        return build.binary()

    def binary(self):
        return str(self._build().binary)

    def forced_accel(self):
        return "tcg", "FEMU is built without KVM"

    def resolve_params(self, device, overrides=()):
        if device not in self.devices():
            return super().resolve_params(device, overrides)  # check() refuses it in one line
        from testbed.femu.defaults import femu_params

        return femu_params(device, overrides)[0]

    def check(self, device, p):
        super().check(device, p)
        from testbed.femu.devices import femu_mapping

        m = femu_mapping(device, p)
        avail = host_available_bytes()
        if avail is not None and m.host_bytes > avail:
            raise KvbedError(f"FEMU keeps the {format_size(p['flash'].logical_bytes)} device in host RAM: this VM "
                             f"needs about {format_size(m.host_bytes)} (device + guest mem_bytes + QEMU), the host "
                             f"has {format_size(avail)} available; lower logical_bytes or mem_bytes")

    def device_args(self, device, p, paths):
        from testbed.femu.devices import femu_mapping

        return femu_mapping(device, p).args()

    def firmware(self):
        share = self._build().share
        if not (share / "qboot.rom").is_file():  # KVBED_FEMU_BIN outside the cache: the host's firmware
            return qemu.QBOOT, []
        return str(share / "qboot.rom"), ["-L", str(share)]


def backend(name: str) -> VmBackend:
    return BACKENDS.get(name)()


def host_available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
