"""Memory devices (``dram``, ``cxl``, and the DRAM side of ``cxl-ssd``): bandwidth resources and one transfer rule.

Resources. Each is a bandwidth with a next-free time in integer ns (FEMU's model, no event queue):

* the *media* of a device (its DRAM behind the controller), one queue shared by reads and writes;
* a device's own *link* (a CXL port), full duplex: one queue per direction;
* the *GPU link* of the host (PCIe or NVLink-C2C to the GPU the KV tier feeds), full duplex.

``dram`` is one media plus the GPU link; ``cxl`` is ``interleave_ways`` devices, each a media and a link,
plus the GPU link they all share. A link of bandwidth 0 is left out. Reads move data from the memory to
the consumer, writes the other way; TRIM moves nothing and completes at arrival.

Address map (CXL HDM interleaving). Byte ``a`` of the device's space lives on device ``(a // granule) % ways``;
a transfer of ``b`` bytes at ``a`` puts ``b_d`` of them on device ``d`` (whole granule rounds plus the
partial head and tail). With one way every byte is on device 0.

The transfer rule, chosen to be computable by hand:

    s      = max(arrival, next-free of every resource the transfer crosses)     one start, first come first served
    x_r    = ceil(b_r * 1e9 / bandwidth_r)     for each resource r it crosses (b_r: its bytes on r)
    next-free(r) = s + x_r                     r is held for its own share only
    end    = s + max_r x_r                     pipelined through the resources: the slowest sets the pace
    done   = end + load_ns (read) or store_ns (write)      the access latency, once per op

So overlapping transfers share each resource's bandwidth in arrival order; a resource faster than the
transfer's bottleneck is free again early (it is busy for the bytes it moved, not for the whole
transfer), and a transfer that finds one of its resources busy waits for it before starting on any (the
wait is counted in ``queue_wait_ns``). Example: 64 KiB read from 2-way interleaved CXL at 256 B granules,
links 32 GB/s, media 36 GB/s, GPU link 64 GB/s, all idle: each device gets 32 KiB; x = 1024 ns on each
link, 911 ns on each media, 1024 ns on the GPU link; done = 1024 + load_ns. One way with link and media of
equal bandwidth is a single link queue: ``done = max(arrival, free) + ceil(b / bw) + latency``.

The byte counts times 1e9 must fit int64: ops up to ``MAX_OP_BYTES`` (8 GiB), checked per batch.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from devicemodels import histogram
from devicemodels.base import OP_NAMES, OP_READ, OP_TRIM, OP_WRITE, Completion, DeviceModel
from devicemodels.ftl_device import checked_batch
from devicemodels.histogram import clear_rows, hist_record
from devicemodels.jit import kernel
from devicemodels.summary import latency_by_op
from kvbed.core.errors import KvbedError
from kvbed.core.params import format_size

MAX_OP_BYTES = 8 << 30  # b * 1e9 < 2**63

# next-free / busy slots: the GPU link's two directions, then per device d at 2 + 3d: link read, link write, media
GPU_READ, GPU_WRITE = 0, 1
DEV_BASE, DEV_SLOTS, LINK_READ, LINK_WRITE, MEDIA = 2, 3, 0, 1, 2


class MemGeo(NamedTuple):
    page_bytes: int
    ways: int
    granule_bytes: int
    media_bytes_per_s: int
    link_bytes_per_s: int  # each device's link; 0 = none
    gpu_bytes_per_s: int  # the shared GPU link; 0 = none
    load_ns: int
    store_ns: int


def new_slots(ways: int) -> np.ndarray:
    """Next-free (or busy) times of every resource of ``ways`` devices, zero."""
    return np.zeros(DEV_BASE + DEV_SLOTS * ways, np.int64)


@kernel(inline="always")
def _bytes_below(x, d, g, rnd):
    """Bytes of [0, x) that live on device d (granule g, a round of rnd = g * ways bytes)."""
    r = x % rnd - d * g
    if r < 0:
        r = 0
    elif r > g:
        r = g
    return (x // rnd) * g + r


@kernel(inline="always")
def xfer_ns(b, bytes_per_s):
    """Time to move b bytes at bytes_per_s, rounded up to whole ns."""
    return (b * 1_000_000_000 + bytes_per_s - 1) // bytes_per_s


@kernel
def transfer(mg, free, busy, dev_bytes, dirn, a, b, t):
    """Move ``b`` bytes at byte address ``a`` in direction ``dirn`` (0 read, 1 write), arriving at ``t``, by the
    module's rule. Updates next-free times ``free``, busy times ``busy`` (same layout) and the bytes per device and
    direction ``dev_bytes[2 d + dirn]``; returns (start, end) of the transfer (no access latency)."""
    g = mg.granule_bytes
    rnd = g * mg.ways
    s = t
    if mg.gpu_bytes_per_s > 0 and free[dirn] > s:
        s = free[dirn]
    for d in range(mg.ways):
        bd = _bytes_below(a + b, d, g, rnd) - _bytes_below(a, d, g, rnd)
        if bd > 0:
            base = DEV_BASE + DEV_SLOTS * d
            if mg.link_bytes_per_s > 0 and free[base + dirn] > s:
                s = free[base + dirn]
            if free[base + MEDIA] > s:
                s = free[base + MEDIA]
    end = s
    if mg.gpu_bytes_per_s > 0:
        x = xfer_ns(b, mg.gpu_bytes_per_s)
        free[dirn] = s + x
        busy[dirn] += x
        if s + x > end:
            end = s + x
    for d in range(mg.ways):
        bd = _bytes_below(a + b, d, g, rnd) - _bytes_below(a, d, g, rnd)
        if bd > 0:
            base = DEV_BASE + DEV_SLOTS * d
            dev_bytes[2 * d + dirn] += bd
            if mg.link_bytes_per_s > 0:
                x = xfer_ns(bd, mg.link_bytes_per_s)
                free[base + dirn] = s + x
                busy[base + dirn] += x
                if s + x > end:
                    end = s + x
            x = xfer_ns(bd, mg.media_bytes_per_s)
            free[base + MEDIA] = s + x
            busy[base + MEDIA] += x
            if s + x > end:
                end = s + x
    return s, end


MEM_CTR_NAMES = ("host_pages_written", "host_pages_read", "host_pages_trimmed", "ops_read", "ops_write",
                 "ops_trim", "queue_wait_ns")
_W, _R, _T, _OR, _OW, _OT, _WAIT = range(7)


@kernel
def mem_submit(mg, free, busy, dev_bytes, ctr, hist, op, lba, npages, arrival, done):
    for i in range(op.shape[0]):
        t = arrival[i]
        o = op[i]
        n = npages[i]
        d = t
        if o == OP_TRIM:
            ctr[_T] += n
            ctr[_OT] += 1
        else:
            dirn = 1 if o == OP_WRITE else 0
            s, end = transfer(mg, free, busy, dev_bytes, dirn, lba[i] * mg.page_bytes, n * mg.page_bytes, t)
            ctr[_WAIT] += s - t
            if o == OP_WRITE:
                d = end + mg.store_ns
                ctr[_W] += n
                ctr[_OW] += 1
            else:
                d = end + mg.load_ns
                ctr[_R] += n
                ctr[_OR] += 1
        done[i] = d
        hist_record(hist[o], d - t)


def check_op_bytes(dev: DeviceModel, npages: np.ndarray) -> None:
    """Refuse an op too large for the int64 transfer arithmetic (before anything runs)."""
    if len(npages) and int(npages.max()) * dev.page_bytes > MAX_OP_BYTES:
        i = int(np.argmax(npages))
        raise KvbedError(f"an op of {int(npages[i])} pages ({format_size(int(npages[i]) * dev.page_bytes)}) is "
                         f"larger than the {format_size(MAX_OP_BYTES)} a memory model moves in one op",
                         where=f"{dev.name} op {i}")


def resource_stats(mg: MemGeo, busy: np.ndarray, dev_bytes: np.ndarray) -> dict[str, Any]:
    """Busy time of every resource and bytes per device: where the bandwidth went."""
    out: dict[str, Any] = {}
    if mg.gpu_bytes_per_s:
        out["gpu_link"] = {"bytes_per_s": mg.gpu_bytes_per_s,
                           "busy_ns": {"read": int(busy[GPU_READ]), "write": int(busy[GPU_WRITE])}}
    devs = []
    for d in range(mg.ways):
        base = DEV_BASE + DEV_SLOTS * d
        e: dict[str, Any] = {"bytes_read": int(dev_bytes[2 * d]), "bytes_written": int(dev_bytes[2 * d + 1]),
                             "media_busy_ns": int(busy[base + MEDIA])}
        if mg.link_bytes_per_s:
            e["link_busy_ns"] = {"read": int(busy[base + LINK_READ]), "write": int(busy[base + LINK_WRITE])}
        devs.append(e)
    out["devices"] = devs
    return out


def busy_totals(busy: np.ndarray, ways: int) -> dict[str, int]:
    """Summed busy ns of the device links, the media and the GPU link (cheap: for counters())."""
    dev = busy[DEV_BASE:DEV_BASE + DEV_SLOTS * ways].reshape(ways, DEV_SLOTS)
    return {"link_busy_ns": int(dev[:, LINK_READ].sum() + dev[:, LINK_WRITE].sum()),
            "media_busy_ns": int(dev[:, MEDIA].sum()),
            "gpu_link_busy_ns": int(busy[GPU_READ] + busy[GPU_WRITE])}


class MemoryDevice(DeviceModel):
    """A volatile memory device: no flash, no GC, WAF 1; subclasses set ``mg`` (MemGeo) and the capacity."""

    supported_ops = (OP_READ, OP_WRITE, OP_TRIM)
    #: the field of the parameter group that holds the capacity (``dram_bytes``, ``cxl_bytes``)
    capacity_field: str
    mg: MemGeo
    _capacity_bytes: int

    def _init_state(self) -> None:
        self.free = new_slots(self.mg.ways)
        self.busy = new_slots(self.mg.ways)
        self.dev_bytes = np.zeros(2 * self.mg.ways, np.int64)
        self.ctr = np.zeros(len(MEM_CTR_NAMES), np.int64)
        self.hist = histogram.new_rows(len(OP_NAMES))

    @property
    def page_bytes(self) -> int:
        return self.mg.page_bytes

    @property
    def logical_pages(self) -> int:
        return self._capacity_bytes // self.mg.page_bytes

    def submit(self, ops: dict[str, np.ndarray]) -> Completion:
        op, lba, npages, pid, arrival = checked_batch(self, ops)
        check_op_bytes(self, npages)
        done = np.empty(len(op), np.int64)
        if len(op):
            mem_submit(self.mg, self.free, self.busy, self.dev_bytes, self.ctr, self.hist, op, lba, npages, arrival,
                       done)
        return Completion(done_ns=done, lba=np.full(len(op), -1, np.int64))

    def counters(self) -> dict[str, int]:
        c = dict(zip(MEM_CTR_NAMES, self.ctr.tolist()))
        out = {"host_pages_written": c["host_pages_written"], "media_pages_written": c["host_pages_written"],
               "host_pages_read": c["host_pages_read"], "host_pages_trimmed": c["host_pages_trimmed"],
               "gc_pages_moved": 0, "gc_runs": 0, "gc_fg_stall_ns": 0, "block_erases": 0}
        out.update(busy_totals(self.busy, self.mg.ways))
        out.update({k: c[k] for k in ("ops_read", "ops_write", "ops_trim", "queue_wait_ns")})
        return out

    def reset_counters(self) -> None:
        """Zero counters, histograms and resource clocks (memory keeps no other state)."""
        for a in (self.ctr, self.free, self.busy, self.dev_bytes):
            a[:] = 0
        clear_rows(self.hist)

    def precondition(self, fill_ratio: float, *, overwrite_x: float = 0.0, seed: int = 0) -> dict[str, Any]:
        """Memory has no state that preconditioning changes; accepted for a uniform interface."""
        return {"fill_ratio": fill_ratio, "overwrite_x": overwrite_x, "note": f"no effect on {self.name} memory"}

    def geometry(self) -> dict[str, Any]:
        return {"logical_pages": self.logical_pages, "page_bytes": self.page_bytes,
                self.capacity_field: self._capacity_bytes}

    def stats(self) -> dict[str, Any]:
        c = self.counters()
        pb = self.page_bytes
        return {
            "device": self.name,
            "config": self.config(),
            "geometry": self.geometry(),
            "waf": 1.0 if c["host_pages_written"] else 0.0,
            "host_bytes_written": c["host_pages_written"] * pb,
            "media_bytes_written": c["media_pages_written"] * pb,
            "counters": c,
            "latency": latency_by_op(self.hist, pb, {"read": c["host_pages_read"], "write": c["host_pages_written"],
                                                      "trim": c["host_pages_trimmed"]}),
            "link_busy_ns": c["link_busy_ns"],
            "queue_wait_ns": c["queue_wait_ns"],
            "resources": resource_stats(self.mg, self.busy, self.dev_bytes),
            "timing": True,
        }
