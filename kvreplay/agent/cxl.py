"""CXL type-3 volatile memory as a devdax object store inside the guest.

ndctl 76's ``cxl create-region -t ram`` is not supported, so the region is made
through sysfs (root decoder -> region -> ways/granularity/size -> endpoint
decoder -> commit -> bind). The kmem driver is never loaded and the dax device
is bound to device_dax, so the memory stays /dev/dax0.0 and never becomes a
NUMA node the kernel would put page cache or virtio buffers into (DMA into the
emulated CXL window hangs the guest). Objects are stored and loaded through an
mmap of the whole device; every access is emulated MMIO, so keep sizes small.
"""

from __future__ import annotations

import errno
import glob
import mmap
import os
import subprocess
import time
import zlib

from .executor import BaseExecutor, OpRefused, _clock
from .wire import FILLER, OP_READ, OP_TRIM, OP_WRITE, STAMP

CXL = "/sys/bus/cxl/devices"
DAX = "/sys/bus/dax/devices"
MODULES = ("cxl_acpi", "cxl_pci", "cxl_mem", "dax_cxl", "device_dax")


def _w(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _r(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def _wait(pred, timeout_s: float, what: str):
    end = time.monotonic() + timeout_s
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)


def setup_region(log=print) -> str:
    """Create one RAM region over the first memdev's volatile capacity; returns the dax device path."""
    bound = [os.path.basename(p) for p in sorted(glob.glob(f"{DAX}/dax*")) if os.path.exists(f"{p}/driver")]
    if bound:
        return f"/dev/{bound[0]}"
    for m in MODULES:
        subprocess.run(["modprobe", m], check=True)
    root = _wait(lambda: next((d for d in sorted(glob.glob(f"{CXL}/decoder*"))
                               if _r(f"{d}/devtype") == "cxl_decoder_root" and os.path.exists(f"{d}/create_ram_region")), None),
                 10, "a CXL root decoder with create_ram_region")
    ep = _wait(lambda: next((d for d in sorted(glob.glob(f"{CXL}/decoder*"))
                             if _r(f"{d}/devtype") == "cxl_decoder_endpoint"), None), 10, "a CXL endpoint decoder")
    mem = _wait(lambda: sorted(glob.glob(f"{CXL}/mem*")), 10, "a CXL memdev")[0]
    size = int(_r(f"{mem}/ram/size"), 0)
    if size <= 0:
        raise RuntimeError(f"{os.path.basename(mem)} has no volatile capacity")
    region = _r(f"{root}/create_ram_region")
    _w(f"{root}/create_ram_region", region)
    rp = f"{CXL}/{region}"
    _w(f"{rp}/interleave_granularity", _r(f"{root}/interleave_granularity"))
    _w(f"{rp}/interleave_ways", "1")
    _w(f"{ep}/mode", "ram")
    _w(f"{ep}/dpa_size", hex(size))
    _w(f"{rp}/size", hex(size))
    _w(f"{rp}/target0", os.path.basename(ep))
    _w(f"{rp}/commit", "1")
    if not os.path.exists(f"{rp}/driver"):
        _w("/sys/bus/cxl/drivers/cxl_region/bind", region)
    dax = _wait(lambda: sorted(os.path.basename(p) for p in glob.glob(f"{DAX}/dax*")), 10, "the region's dax device")[0]
    if not os.path.exists(f"{DAX}/{dax}/driver"):
        # dax_cxl marks the region for kmem; kmem is never loaded, so bind device_dax by id instead
        _w("/sys/bus/dax/drivers/device_dax/new_id", dax)
    _wait(lambda: os.path.exists(f"{DAX}/{dax}/driver") and os.path.exists(f"/dev/{dax}"), 10, f"/dev/{dax} bound to device_dax")
    log(f"cxl: {region} ({size >> 20} MiB) -> /dev/{dax}")
    return f"/dev/{dax}"


class CxlExecutor(BaseExecutor):
    """Objects as page ranges of the devdax mapping: write = store, read = load, trim = forget."""

    kind = "cxl"

    def __init__(self, dax_path: str, page_bytes: int = 4096):
        super().__init__()
        name = os.path.basename(dax_path)
        self.dax_path = dax_path
        self.size = int(_r(f"{DAX}/{name}/size"))
        self.align = int(_r(f"{DAX}/{name}/align")) if os.path.exists(f"{DAX}/{name}/align") else 4096
        self.node = _r(f"{DAX}/{name}/target_node") if os.path.exists(f"{DAX}/{name}/target_node") else "?"
        self.fd = os.open(dax_path, os.O_RDWR)
        self.mem = mmap.mmap(self.fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.set_page_bytes(page_bytes)

    def set_page_bytes(self, page_bytes: int) -> None:
        if page_bytes < 64 or page_bytes & (page_bytes - 1):
            raise OpRefused(-errno.EINVAL, f"page_bytes must be a power of two >= 64, got {page_bytes}")
        self.page_bytes = page_bytes
        self.capacity_pages = self.size // page_bytes

    def info(self) -> dict:
        return {"kind": "cxl", "page_bytes": self.page_bytes, "capacity_pages": self.capacity_pages,
                "dax_path": self.dax_path, "dax_bytes": self.size, "dax_align_bytes": self.align,
                "target_node": self.node}

    def one(self, op, lba, npages, pid, tag, stamp, crc, payload=None):
        if payload is not None:  # CXL memory is volatile: nothing of it outlives a power loss to scan
            raise OpRefused(-errno.EOPNOTSUPP, "object payloads are for NVMe namespaces (power-loss scans)")
        pb = self.page_bytes
        mem = self.mem
        if op == OP_WRITE:
            self._check_range(lba, npages)
            off = lba * pb
            n = npages * pb
            if stamp:
                filler = FILLER(pb)
                chunk = bytearray(n)
                for j in range(npages):
                    STAMP.pack_into(chunk, j * pb, lba + j, tag)
                    chunk[j * pb + STAMP.size: (j + 1) * pb] = filler
            else:
                chunk = bytes([0x5A]) * n
            t0 = _clock()
            mem[off: off + n] = chunk
            t = _clock() - t0
            self.counters.bytes_written += n
            bp = self.counters.bytes_written_by_pid
            bp[pid] = bp.get(pid, 0) + n
            return t, 1, -1, 0
        if op == OP_READ:
            self._check_range(lba, npages)
            off = lba * pb
            t0 = _clock()
            data = mem[off: off + npages * pb]
            t = _clock() - t0
            self.counters.bytes_read += len(data)
            return t, 1, -1, zlib.crc32(data) if crc else 0
        if op == OP_TRIM:
            self._check_range(lba, npages)
            self.counters.bytes_trimmed += npages * pb
            return 0, 0, -1, 0
        raise OpRefused(-errno.EOPNOTSUPP, "CXL memory takes only read, write and trim")

    def log(self, name: str):
        if name == "cxl_info":
            return self.info()
        raise OpRefused(-errno.EINVAL, f"unknown log {name!r} (CXL memory has only cxl_info)")

    def log_names(self) -> list[str]:
        return ["cxl_info"]
