"""``cxl-ssd``: a CXL memory-semantic SSD, i.e. a DRAM page cache in front of a conventional FTL.

Three phases per batch, because the cache never waits for flash state (only for its
timing): (1) a numba kernel runs the set-associative LRU write-back cache and the
CXL link queue, and emits the flash work (a read per read miss, a write per dirty
eviction, a TRIM per trimmed range) with the arrival time of the op that caused
it; (2) the backing ``conv`` model runs those ops (so they queue on dies and
trigger GC); (3) a read op completes when its link transfer and its slowest
miss are done. Write-backs are asynchronous but load the dies. Addresses and the
cache unit are the flash ``page_bytes``; ``CxlParams.cxl_bytes`` and its
``page_bytes`` are not used (capacity is ``logical_bytes``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from devicemodels.jit import njit

from devicemodels import histogram
from devicemodels.base import DEVICES, OP_NAMES, OP_READ, OP_TRIM, OP_WRITE, Completion, DeviceModel
from devicemodels.conv import ConvDevice
from devicemodels.ftl_device import checked_batch
from devicemodels.histogram import clear_rows, hist_record
from devicemodels.params import CxlParams, CxlSsdParams, FlashParams
from devicemodels.summary import latency_by_op

CS_COUNTER_NAMES = ("host_pages_written", "host_pages_read", "host_pages_trimmed", "cache_read_hits",
                    "cache_read_misses", "cache_write_hits", "cache_write_misses", "cache_writebacks",
                    "link_busy_ns")
_W, _R, _T, _RH, _RM, _WH, _WM, _WB, _BUSY = range(9)


class CsGeo(NamedTuple):
    sets: int
    ways: int
    load_ns: int
    store_ns: int
    xfer_ns: int  # one page over the CXL link


@njit
def cache_pass(cg, tags, dirty, stamp, link, ctr, op, lba, npages, arrival, link_done,
               f_op, f_lba, f_arr, f_parent):
    """Phase 1: cache and link for every op; returns the number of flash ops emitted."""
    nf = 0
    tick = link[1]
    for i in range(op.shape[0]):
        t = arrival[i]
        o = op[i]
        n = npages[i]
        x0 = lba[i]
        if o == OP_TRIM:
            for k in range(n):
                x = x0 + k
                base = (x % cg.sets) * cg.ways
                for w in range(cg.ways):
                    if tags[base + w] == x:
                        tags[base + w] = -1
                        dirty[base + w] = 0
            f_op[nf] = OP_TRIM
            f_lba[nf] = x0
            f_arr[nf] = n  # npages travels in the arrival slot for TRIM; fixed up by the caller
            f_parent[nf] = i
            nf += 1
            ctr[_T] += n
            link_done[i] = t
            continue
        s = link[0]
        if s < t:
            s = t
        xfer = n * cg.xfer_ns
        link[0] = s + xfer
        ctr[_BUSY] += xfer
        link_done[i] = s + xfer + (cg.store_ns if o == OP_WRITE else cg.load_ns)
        for k in range(n):
            x = x0 + k
            base = (x % cg.sets) * cg.ways
            hit = -1
            lru = base
            for w in range(cg.ways):
                if tags[base + w] == x:
                    hit = base + w
                    break
                if stamp[base + w] < stamp[lru]:
                    lru = base + w
            tick += 1
            if hit >= 0:
                stamp[hit] = tick
                if o == OP_WRITE:
                    dirty[hit] = 1
                    ctr[_WH] += 1
                else:
                    ctr[_RH] += 1
                continue
            if tags[lru] >= 0 and dirty[lru]:
                f_op[nf] = OP_WRITE
                f_lba[nf] = tags[lru]
                f_arr[nf] = t
                f_parent[nf] = -1  # background write-back
                nf += 1
                ctr[_WB] += 1
            tags[lru] = x
            stamp[lru] = tick
            if o == OP_WRITE:
                dirty[lru] = 1
                ctr[_WM] += 1
            else:
                dirty[lru] = 0
                ctr[_RM] += 1
                f_op[nf] = OP_READ
                f_lba[nf] = x
                f_arr[nf] = t
                f_parent[nf] = i
                nf += 1
        if o == OP_WRITE:
            ctr[_W] += n
        else:
            ctr[_R] += n
    link[1] = tick
    return nf


@njit
def finish_pass(cg, op, arrival, link_done, f_op, f_parent, f_done, nf, done, hist):
    """Phase 3: an op is done when its link transfer and its slowest flash read are."""
    for i in range(op.shape[0]):
        done[i] = link_done[i]
    for j in range(nf):
        p = f_parent[j]
        if p >= 0 and f_op[j] == OP_READ:
            e = f_done[j] + cg.load_ns
            if e > done[p]:
                done[p] = e
    for i in range(op.shape[0]):
        hist_record(hist[op[i]], done[i] - arrival[i])


@DEVICES.register("cxl-ssd")
class CxlSsdDevice(DeviceModel):
    param_classes = {"flash": FlashParams, "cxl": CxlParams, "cache": CxlSsdParams}
    supported_ops = (OP_READ, OP_WRITE, OP_TRIM)

    def __init__(self, flash: FlashParams | None = None, cxl: CxlParams | None = None,
                 cache: CxlSsdParams | None = None):
        self.backend = ConvDevice(flash)
        self.flash = self.backend.flash
        self.cxl = (cxl or CxlParams()).validate()
        self.cache = (cache or CxlSsdParams()).validate_with(self.flash)
        self.params = {"flash": self.flash, "cxl": self.cxl, "cache": self.cache}
        pages = self.cache.cache_bytes // self.flash.page_bytes
        pb = self.flash.page_bytes
        self.cg = CsGeo(sets=pages // self.cache.cache_ways, ways=self.cache.cache_ways, load_ns=self.cxl.load_ns,
                        store_ns=self.cxl.store_ns,
                        xfer_ns=-(-pb * 1_000_000_000 // self.cxl.bandwidth_bytes_per_s))
        self.tags = np.full(pages, -1, np.int64)
        self.dirty = np.zeros(pages, np.uint8)
        self.stamp = np.zeros(pages, np.int64)
        self.link = np.zeros(2, np.int64)  # link next-free time, LRU clock
        self.ctr = np.zeros(len(CS_COUNTER_NAMES), np.int64)
        self.hist = histogram.new_rows(len(OP_NAMES))

    @property
    def page_bytes(self) -> int:
        return self.flash.page_bytes

    @property
    def logical_pages(self) -> int:
        return self.backend.logical_pages

    def submit(self, ops: dict[str, np.ndarray]) -> Completion:
        op, lba, npages, pid, arrival = checked_batch(self, ops)
        n = len(op)
        done = np.empty(n, np.int64)
        if n == 0:
            return Completion(done_ns=done, lba=np.full(0, -1, np.int64))
        cap = int(2 * npages[op != OP_TRIM].sum()) + int((op == OP_TRIM).sum())
        f_op = np.empty(cap, np.int8)
        f_lba = np.empty(cap, np.int64)
        f_arr = np.empty(cap, np.int64)
        f_parent = np.empty(cap, np.int64)
        link_done = np.empty(n, np.int64)
        nf = cache_pass(self.cg, self.tags, self.dirty, self.stamp, self.link, self.ctr, op, lba, npages, arrival,
                        link_done, f_op, f_lba, f_arr, f_parent)
        f_op, f_lba, f_arr, f_parent = f_op[:nf], f_lba[:nf], f_arr[:nf], f_parent[:nf]
        f_np = np.ones(nf, np.int32)
        trim = f_op == OP_TRIM
        f_np[trim] = f_arr[trim]
        f_arr[trim] = arrival[f_parent[trim]]
        f_done = np.zeros(nf, np.int64)
        if nf:
            f_done = self.backend.submit({"op": f_op, "lba": f_lba, "npages": f_np,
                                          "pid": np.zeros(nf, np.int16), "arrival_ns": f_arr}).done_ns
        finish_pass(self.cg, op, arrival, link_done, f_op, f_parent, f_done, nf, done, self.hist)
        return Completion(done_ns=done, lba=np.full(n, -1, np.int64))

    def counters(self) -> dict[str, int]:
        out = dict(zip(CS_COUNTER_NAMES, self.ctr.tolist()))
        b = self.backend.counters()
        out["media_pages_written"] = b["media_pages_written"]
        out["flash_pages_written"] = b["host_pages_written"]
        for k in ("gc_runs", "gc_pages_moved", "gc_fg_stall_ns", "block_erases", "host_pages_read"):
            out[("flash_pages_read" if k == "host_pages_read" else k)] = b[k]
        return out

    def untimed(self):
        """The flash behind the cache runs without timing (the cache and link keep theirs)."""
        return self.backend.untimed()

    def reset_counters(self) -> None:
        self.ctr[:] = 0
        self.link[0] = 0
        clear_rows(self.hist)
        self.backend.reset_counters()

    def precondition(self, fill_ratio: float, *, overwrite_x: float = 0.0, seed: int = 0) -> dict[str, Any]:
        """Precondition the flash behind the cache (the cache starts cold)."""
        return self.backend.precondition(fill_ratio, overwrite_x=overwrite_x, seed=seed)

    def stats(self) -> dict[str, Any]:
        c = self.counters()
        pb = self.page_bytes
        reads = c["cache_read_hits"] + c["cache_read_misses"]
        wr = c["cache_write_hits"] + c["cache_write_misses"]
        flash = self.backend.stats()
        return {
            "device": self.name,
            "config": self.config(),
            "geometry": {"logical_pages": self.logical_pages, "page_bytes": pb,
                         "cache_bytes": self.cache.cache_bytes, "cache_ways": self.cache.cache_ways},
            # media writes per host (CXL store) page: the cache absorbs overwrites, so this can be < 1
            "waf": c["media_pages_written"] / c["host_pages_written"] if c["host_pages_written"] else 0.0,
            "host_bytes_written": c["host_pages_written"] * pb,
            "media_bytes_written": c["media_pages_written"] * pb,
            "cache": {"read_hit_ratio": c["cache_read_hits"] / reads if reads else 0.0,
                      "write_hit_ratio": c["cache_write_hits"] / wr if wr else 0.0,
                      "writeback_bytes": c["cache_writebacks"] * pb},
            "counters": c,
            "latency": latency_by_op(self.hist, pb, {"read": c["host_pages_read"], "write": c["host_pages_written"],
                                                      "trim": c["host_pages_trimmed"]}),
            # GC and wear are the NAND backend's, at top level as on every flash device
            "gc": flash["gc"],
            "wear": flash["wear"],
            "flash": {k: flash[k] for k in ("waf", "latency")},
            "timing": True,
        }
