"""``cxl``: a CXL type-3 memory expander (volatile DRAM behind a CXL link).

No flash physics: a load or store of ``n`` pages costs the device's fixed access
latency plus its transfer on a single link queue (``bandwidth_bytes_per_s``,
next-free time like the flash channels). There is no GC and no WAF (media
writes = host writes); TRIM is accepted and does nothing. Defaults follow
reference-figures.md (CXL-attached DRAM about 2-3x local DRAM latency).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from devicemodels.jit import njit

from devicemodels import histogram
from devicemodels.base import DEVICES, OP_NAMES, OP_READ, OP_TRIM, OP_WRITE, Completion, DeviceModel
from devicemodels.ftl_device import checked_batch
from devicemodels.histogram import clear_rows, hist_record
from devicemodels.params import CxlParams
from devicemodels.summary import latency_by_op

CXL_COUNTER_NAMES = ("host_pages_written", "media_pages_written", "host_pages_read", "host_pages_trimmed",
                     "gc_pages_moved", "gc_runs", "gc_fg_stall_ns", "block_erases", "link_busy_ns",
                     "ops_read", "ops_write", "ops_trim")
_W, _M, _R, _T, _GCP, _GCR, _ST, _ER, _BUSY, _OPS = range(10)


class CxlGeo(NamedTuple):
    load_ns: int
    store_ns: int
    page_bytes: int
    bytes_per_s: int


@njit
def cxl_submit(cg, link, ctr, hist, op, npages, arrival, done):
    for i in range(op.shape[0]):
        t = arrival[i]
        o = op[i]
        n = npages[i]
        d = t
        if o == OP_TRIM:
            ctr[_T] += n
            ctr[_OPS + 2] += 1
        else:
            xfer = (n * cg.page_bytes * 1_000_000_000 + cg.bytes_per_s - 1) // cg.bytes_per_s
            s = link[0]
            if s < t:
                s = t
            link[0] = s + xfer
            ctr[_BUSY] += xfer
            if o == OP_WRITE:
                d = s + xfer + cg.store_ns
                ctr[_W] += n
                ctr[_M] += n
                ctr[_OPS + 1] += 1
            else:
                d = s + xfer + cg.load_ns
                ctr[_R] += n
                ctr[_OPS] += 1
        done[i] = d
        hist_record(hist[o], d - t)


@DEVICES.register("cxl")
class CxlDevice(DeviceModel):
    param_classes = {"cxl": CxlParams}
    supported_ops = (OP_READ, OP_WRITE, OP_TRIM)

    def __init__(self, cxl: CxlParams | None = None):
        self.cxl = (cxl or CxlParams()).validate()
        self.params = {"cxl": self.cxl}
        c = self.cxl
        self.cg = CxlGeo(load_ns=c.load_ns, store_ns=c.store_ns, page_bytes=c.page_bytes,
                         bytes_per_s=c.bandwidth_bytes_per_s)
        self.link = np.zeros(1, np.int64)
        self.ctr = np.zeros(len(CXL_COUNTER_NAMES), np.int64)
        self.hist = histogram.new_rows(len(OP_NAMES))

    @property
    def page_bytes(self) -> int:
        return self.cxl.page_bytes

    @property
    def logical_pages(self) -> int:
        return self.cxl.cxl_bytes // self.cxl.page_bytes

    def submit(self, ops: dict[str, np.ndarray]) -> Completion:
        op, lba, npages, pid, arrival = checked_batch(self, ops)
        done = np.empty(len(op), np.int64)
        if len(op):
            cxl_submit(self.cg, self.link, self.ctr, self.hist, op, npages, arrival, done)
        return Completion(done_ns=done, lba=np.full(len(op), -1, np.int64))

    def counters(self) -> dict[str, int]:
        return dict(zip(CXL_COUNTER_NAMES, self.ctr.tolist()))

    def reset_counters(self) -> None:
        self.ctr[:] = 0
        self.link[:] = 0
        clear_rows(self.hist)

    def precondition(self, fill_ratio: float, *, overwrite_x: float = 0.0, seed: int = 0) -> dict[str, Any]:
        """Memory has no state that preconditioning changes; accepted for a uniform interface."""
        return {"fill_ratio": fill_ratio, "overwrite_x": overwrite_x, "note": "no effect on cxl memory"}

    def stats(self) -> dict[str, Any]:
        c = self.counters()
        pb = self.page_bytes
        return {
            "device": self.name,
            "config": self.config(),
            "geometry": {"logical_pages": self.logical_pages, "page_bytes": pb, "cxl_bytes": self.cxl.cxl_bytes},
            "waf": 1.0 if c["host_pages_written"] else 0.0,
            "host_bytes_written": c["host_pages_written"] * pb,
            "media_bytes_written": c["media_pages_written"] * pb,
            "counters": c,
            "latency": latency_by_op(self.hist, pb, {"read": c["host_pages_read"], "write": c["host_pages_written"],
                                                      "trim": c["host_pages_trimmed"]}),
            "link_busy_ns": c["link_busy_ns"],
            "timing": True,
        }
