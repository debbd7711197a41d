"""``cxl-ssd``: a CXL memory-semantic SSD, i.e. a DRAM cache in front of a conventional FTL.

Three phases per batch, because the cache never waits for flash state (only for its timing):
(1) a numba kernel runs the set-associative write-back cache (policy: :mod:`devicemodels.cache_policies`)
and the CXL side's timing (:mod:`devicemodels.memory`: the device's link, its DRAM and the GPU link, one
device), and emits the flash work with the arrival time of the op that caused it; (2) the backing ``conv``
model runs that work (so it queues on dies and triggers GC); (3) an op completes when its transfer plus
load_ns/store_ns is done and its slowest fill has been read from flash (+ load_ns or store_ns).

Cache units (``cache_unit_bytes``, whole flash pages; a unit goes to set ``unit % sets``):

* a read touching a unit that is not cached *fills* it: a flash read of the whole unit, which the read waits
  for; a write covering a whole missing unit needs no fill, a write covering part of one fills it first (and
  waits for it), then the unit is dirty;
* a full set evicts one unit by its policy, passing over the units the op itself touched so far (an op
  longer than the set count does not evict its own units while others could go); a dirty one is written
  back whole (a flash write of the unit, in the background: nobody waits, but it loads the dies);
* TRIM drops the units wholly inside its range (dirty or not, no write-back) and passes the range to the
  flash; units it covers only in part stay cached.

Hits and misses are counted per unit touched; a read op is a *hit* when every unit it touches hits, and its
latency goes to the hit or the miss histogram (``stats()["cache"]["read_hit_latency"]`` /
``["read_miss_latency"]``). Fills and write-backs do not take the cache DRAM's bandwidth. Addresses are in
flash pages; ``CxlParams.cxl_bytes`` and its ``page_bytes`` are not used (capacity is ``logical_bytes``),
and one SSD is one device (``interleave_ways`` must be 1).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from devicemodels import cache_policies as P
from devicemodels import histogram
from devicemodels.base import DEVICES, OP_NAMES, OP_READ, OP_TRIM, OP_WRITE, Completion, DeviceModel
from devicemodels.conv import ConvDevice
from devicemodels.cxl import cxl_geo
from devicemodels.ftl_device import checked_batch
from devicemodels.histogram import LatencyHistogram, clear_rows, hist_record
from devicemodels.jit import kernel
from devicemodels.memory import busy_totals, check_op_bytes, new_slots, resource_stats, transfer
from devicemodels.params import CxlParams, CxlSsdParams, FlashParams
from devicemodels.summary import latency_by_op
from kvbed.core.errors import KvbedError

CS_COUNTER_NAMES = ("host_pages_written", "host_pages_read", "host_pages_trimmed", "cache_read_hits",
                    "cache_read_misses", "cache_write_hits", "cache_write_misses", "cache_writebacks",
                    "cache_fills", "queue_wait_ns")
_W, _R, _T, _RH, _RM, _WH, _WM, _WB, _FILL, _WAIT = range(10)
# histogram rows after the per-op-type ones: reads whose every unit hit, and the other reads
H_READ_HIT, H_READ_MISS = len(OP_NAMES), len(OP_NAMES) + 1


class CxlSsdState(NamedTuple):
    """The CXL side's clocks, counters and latency histograms; they persist across batches (``reset_counters``
    zeroes them). The cache's own state is :mod:`devicemodels.cache_policies`' (``CxlSsdDevice.cs``)."""

    free: np.ndarray  # int64[memory.DEV_BASE + memory.DEV_SLOTS]  next-free time (ns) of each link/media resource
    busy: np.ndarray  # int64[memory.DEV_BASE + memory.DEV_SLOTS]  busy ns of each resource (same layout)
    dev_bytes: np.ndarray  # int64[2]  bytes moved to and from the device: read, write
    ctr: np.ndarray  # int64[len(CS_COUNTER_NAMES)]  counters (columns _W ... _WAIT)
    hist: np.ndarray  # int64[len(OP_NAMES) + 2, histogram.NSLOTS]  latency per op type, then H_READ_HIT/_MISS


class HostOps(NamedTuple):
    """One batch of n host ops: the contract's columns (read-only) and what the two kernels find for each."""

    op: np.ndarray  # int8[n]      op code (OP_READ, OP_WRITE, OP_TRIM)
    lba: np.ndarray  # int64[n]    first flash page
    npages: np.ndarray  # int32[n] pages
    arrival: np.ndarray  # int64[n] arrival time (ns)
    link_done: np.ndarray  # int64[n] cache_pass: transfer done + load_ns/store_ns (TRIM: its arrival)
    all_hit: np.ndarray  # uint8[n]   cache_pass: 1 if every unit the op touched hit the cache
    done: np.ndarray  # int64[n]      finish_pass: completion time (ns)


class FlashWork(NamedTuple):
    """The flash ops the cache emits for the backing ``conv`` device, in emission order; ``cap`` is a bound on
    their number (a fill and a write-back per unit touched, one op per TRIM), the first ``nf`` are used."""

    op: np.ndarray  # int8[cap]     OP_READ (fill), OP_WRITE (write-back) or OP_TRIM
    lba: np.ndarray  # int64[cap]   first flash page
    npages: np.ndarray  # int32[cap] pages
    arrival: np.ndarray  # int64[cap] arrival time: that of the host op that caused it (ns)
    parent: np.ndarray  # int64[cap]  host op that caused it (-1: a write-back); its op waits for it if a fill
    done: np.ndarray  # int64[cap]    completion time from the flash (set between the two kernels)


@kernel(inline="always")
def _emit(fw, nf, o, x, n, t, parent):
    fw.op[nf] = o
    fw.lba[nf] = x
    fw.npages[nf] = n
    fw.arrival[nf] = t
    fw.parent[nf] = parent
    return nf + 1


@kernel
def cache_pass(cg, cs, mg, st, host, fw):
    """Phase 1: cache and CXL timing for every op; returns the number of flash ops emitted, or -1 - i when op i
    met a cache policy code the kernel does not dispatch."""
    free, busy, dev_bytes, ctr = st.free, st.busy, st.dev_bytes, st.ctr
    op, lba, npages, arrival = host.op, host.lba, host.npages, host.arrival
    link_done, all_hit = host.link_done, host.all_hit
    nf = 0
    k = cg.unit_pages
    for i in range(op.shape[0]):
        t = arrival[i]
        o = op[i]
        n = npages[i]
        x0 = lba[i]
        all_hit[i] = 1
        if o == OP_TRIM:
            for u in range((x0 + k - 1) // k, (x0 + n) // k):  # units wholly inside the range
                base = (u % cg.sets) * cg.ways
                for w in range(base, base + cg.ways):
                    if cs.tags[w] == u:
                        cs.tags[w] = -1
                        cs.dirty[w] = 0
            nf = _emit(fw, nf, OP_TRIM, x0, n, t, i)
            ctr[_T] += n
            link_done[i] = t
            continue
        wr = o == OP_WRITE
        s, end = transfer(mg, free, busy, dev_bytes, 1 if wr else 0, x0 * mg.page_bytes, n * mg.page_bytes, t)
        ctr[_WAIT] += s - t
        link_done[i] = end + (mg.store_ns if wr else mg.load_ns)
        u0 = x0 // k
        for u in range(u0, (x0 + n - 1) // k + 1):
            st = u % cg.sets
            base = st * cg.ways
            hit = -1
            free_way = -1
            oldest = base
            for w in range(base, base + cg.ways):
                tag = cs.tags[w]
                if tag == u:
                    hit = w
                    break
                if tag < 0:
                    if free_way < 0:
                        free_way = w
                elif cs.stamp[w] < cs.stamp[oldest]:
                    oldest = w
            # the units this op touched so far (u0 .. u-1) are pinned; one of them shares this set only when
            # the op has passed the set count
            lo = u0 if u - u0 >= cg.sets else u
            if hit >= 0:
                P.on_hit(cs, cg, hit)
                if wr:
                    cs.dirty[hit] = 1
                    ctr[_WH] += 1
                else:
                    ctr[_RH] += 1
                continue
            all_hit[i] = 0
            w = free_way
            if w < 0:
                if lo <= cs.tags[oldest] < u:  # the set is full: oldest is its smallest stamp, unless pinned
                    oldest = P.oldest_way(cs, base, cg.ways, -1, lo, u)
                w = P.victim(cs, cg, st, oldest, lo, u)
                if w < 0:
                    return -1 - i
                if cs.dirty[w]:
                    nf = _emit(fw, nf, OP_WRITE, cs.tags[w] * k, k, t, -1)
                    ctr[_WB] += 1
            if not wr or x0 > u * k or x0 + n < (u + 1) * k:  # a read, or a write of part of the unit
                nf = _emit(fw, nf, OP_READ, u * k, k, t, i)
                ctr[_FILL] += 1
            cs.tags[w] = u
            cs.dirty[w] = 1 if wr else 0
            P.on_insert(cs, cg, st, w, u)
            if wr:
                ctr[_WM] += 1
            else:
                ctr[_RM] += 1
        if wr:
            ctr[_W] += n
        else:
            ctr[_R] += n
    return nf


@kernel
def finish_pass(mg, st, host, fw, nf):
    """Phase 3: an op is done when its transfer and its slowest fill (of the ``nf`` flash ops) are; latencies
    into the histograms."""
    op, arrival, link_done, all_hit, done = host.op, host.arrival, host.link_done, host.all_hit, host.done
    f_op, f_parent, f_done, hist = fw.op, fw.parent, fw.done, st.hist
    for i in range(op.shape[0]):
        done[i] = link_done[i]
    for j in range(nf):
        p = f_parent[j]
        if p >= 0 and f_op[j] == OP_READ:
            e = f_done[j] + (mg.store_ns if op[p] == OP_WRITE else mg.load_ns)
            if e > done[p]:
                done[p] = e
    for i in range(op.shape[0]):
        lat = done[i] - arrival[i]
        hist_record(hist[op[i]], lat)
        if op[i] == OP_READ:
            hist_record(hist[H_READ_HIT if all_hit[i] else H_READ_MISS], lat)


@DEVICES.register("cxl-ssd")
class CxlSsdDevice(DeviceModel):
    param_classes = {"flash": FlashParams, "cxl": CxlParams, "cache": CxlSsdParams}
    supported_ops = (OP_READ, OP_WRITE, OP_TRIM)

    def __init__(self, flash: FlashParams | None = None, cxl: CxlParams | None = None,
                 cache: CxlSsdParams | None = None):
        self.backend = ConvDevice(flash)
        self.flash = self.backend.flash
        self.cxl = (cxl or CxlParams()).validate()
        if self.cxl.interleave_ways != 1:
            raise KvbedError(f"cxl-ssd is one device: interleave_ways must be 1, got {self.cxl.interleave_ways}")
        self.cache = (cache or CxlSsdParams()).validate_with(self.flash)
        self.params = {"flash": self.flash, "cxl": self.cxl, "cache": self.cache}
        pb = self.flash.page_bytes
        self.unit_bytes = self.cache.unit_bytes(self.flash)
        self.cache_bytes = self.cache.resolved_cache_bytes(self.flash)
        units = self.cache_bytes // self.unit_bytes
        self.cg, self.cs = P.build(self.cache.cache_policy, units // self.cache.cache_ways, self.cache.cache_ways,
                                   self.unit_bytes // pb)
        self.mg = cxl_geo(self.cxl)._replace(page_bytes=pb)
        self.state = CxlSsdState(free=new_slots(1), busy=new_slots(1), dev_bytes=np.zeros(2, np.int64),
                                 ctr=np.zeros(len(CS_COUNTER_NAMES), np.int64),
                                 hist=histogram.new_rows(len(OP_NAMES) + 2))

    @property
    def page_bytes(self) -> int:
        return self.flash.page_bytes

    @property
    def logical_pages(self) -> int:
        return self.backend.logical_pages

    def submit(self, ops: dict[str, np.ndarray]) -> Completion:
        op, lba, npages, pid, arrival = checked_batch(self, ops)
        check_op_bytes(self, npages)
        n = len(op)
        done = np.empty(n, np.int64)
        if n == 0:
            return Completion(done_ns=done, lba=np.full(0, -1, np.int64))
        k = self.cg.unit_pages
        data = op != OP_TRIM
        units = (lba[data] + npages[data] - 1) // k - lba[data] // k + 1
        cap = int(2 * units.sum()) + int(n - data.sum())  # a fill and a write-back per unit, one op per TRIM
        fw = FlashWork(op=np.empty(cap, np.int8), lba=np.empty(cap, np.int64), npages=np.empty(cap, np.int32),
                       arrival=np.empty(cap, np.int64), parent=np.empty(cap, np.int64), done=np.empty(cap, np.int64))
        host = HostOps(op, lba, npages, arrival, link_done=np.empty(n, np.int64), all_hit=np.empty(n, np.uint8),
                       done=done)
        nf = cache_pass(self.cg, self.cs, self.mg, self.state, host, fw)
        if nf < 0:
            known = ", ".join(f"{m}={P.CACHE_POLICIES.get(m).code}" for m in P.CACHE_POLICIES.names())
            raise KvbedError(f"cache policy code {self.cg.policy} is not one the cache kernel dispatches "
                             f"(registered: {known})", where=f"{self.name} op {-1 - nf}")
        if nf:
            fw.done[:nf] = self.backend.submit({"op": fw.op[:nf], "lba": fw.lba[:nf], "npages": fw.npages[:nf],
                                                "pid": np.zeros(nf, np.int16), "arrival_ns": fw.arrival[:nf]}).done_ns
        finish_pass(self.mg, self.state, host, fw, nf)
        return Completion(done_ns=done, lba=np.full(n, -1, np.int64))

    def counters(self) -> dict[str, int]:
        out = dict(zip(CS_COUNTER_NAMES, self.state.ctr.tolist()))
        out.update(busy_totals(self.state.busy, 1))
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
        """Zero counters, histograms and clocks (the cache's contents and the flash's state stay)."""
        st = self.state
        for a in (st.ctr, st.free, st.busy, st.dev_bytes):
            a[:] = 0
        clear_rows(st.hist)
        self.backend.reset_counters()

    def precondition(self, fill_ratio: float, *, overwrite_x: float = 0.0, seed: int = 0) -> dict[str, Any]:
        """Precondition the flash behind the cache (the cache starts cold)."""
        return self.backend.precondition(fill_ratio, overwrite_x=overwrite_x, seed=seed)

    def _hist_entry(self, row: int) -> dict[str, Any]:
        h = LatencyHistogram(self.state.hist[row])
        return {"ios": h.n, "lat_ns": h.to_dict()}

    def cache_stats(self, c: dict[str, int]) -> dict[str, Any]:
        reads = c["cache_read_hits"] + c["cache_read_misses"]
        wr = c["cache_write_hits"] + c["cache_write_misses"]
        hits = c["cache_read_hits"] + c["cache_write_hits"]
        return {
            "policy": self.cache.cache_policy, "cache_bytes": self.cache_bytes, "unit_bytes": self.unit_bytes,
            "sets": self.cg.sets, "ways": self.cg.ways,
            "hit_ratio": hits / (reads + wr) if reads + wr else 0.0,
            "read_hit_ratio": c["cache_read_hits"] / reads if reads else 0.0,
            "write_hit_ratio": c["cache_write_hits"] / wr if wr else 0.0,
            "fills": c["cache_fills"], "fill_bytes": c["cache_fills"] * self.unit_bytes,
            "writebacks": c["cache_writebacks"], "writeback_bytes": c["cache_writebacks"] * self.unit_bytes,
            "read_hit_latency": self._hist_entry(H_READ_HIT),
            "read_miss_latency": self._hist_entry(H_READ_MISS),
        }

    def stats(self) -> dict[str, Any]:
        c = self.counters()
        pb = self.page_bytes
        flash = self.backend.stats()
        return {
            "device": self.name,
            "config": self.config(),
            "geometry": {"logical_pages": self.logical_pages, "page_bytes": pb, "cache_bytes": self.cache_bytes,
                         "cache_ways": self.cg.ways, "cache_sets": self.cg.sets, "cache_unit_bytes": self.unit_bytes},
            # media writes per host (CXL store) page: the cache absorbs overwrites, so this can be < 1
            "waf": c["media_pages_written"] / c["host_pages_written"] if c["host_pages_written"] else 0.0,
            "host_bytes_written": c["host_pages_written"] * pb,
            "media_bytes_written": c["media_pages_written"] * pb,
            "cache": self.cache_stats(c),
            "counters": c,
            "latency": latency_by_op(self.state.hist, pb, {"read": c["host_pages_read"],
                                                            "write": c["host_pages_written"],
                                                            "trim": c["host_pages_trimmed"]}),
            "resources": resource_stats(self.mg, self.state.busy, self.state.dev_bytes),
            # GC and wear are the NAND backend's, at top level as on every flash device
            "gc": flash["gc"],
            "wear": flash["wear"],
            "flash": {k: flash[k] for k in ("waf", "latency")},
            "timing": True,
        }
