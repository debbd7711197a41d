"""``cxl``: CXL type-3 memory expanders (volatile DRAM behind CXL links), optionally interleaved.

``interleave_ways`` devices form one interleave set: bytes go to devices round-robin by
``interleave_granule_bytes`` (the HDM decoder's granularity). Each device has its media and its
CXL link; all transfers cross the host's GPU link. Timing follows :mod:`devicemodels.memory`: a transfer
holds each resource for its share of the bytes, overlapping transfers share bandwidth first come first
served, and load_ns/store_ns are added once per op. There is no GC and no WAF (media writes = host
writes); TRIM is accepted and does nothing. Defaults and their sources: :class:`~devicemodels.params.CxlParams`.

With one device (the default) and reads or writes alone this is the earlier single-link model
(``max(arrival, link free) + ceil(bytes / 32 GB/s) + 250 ns``); with both, reads and writes use the two
directions of the link at once and meet only in the media (36 GB/s).
"""

from __future__ import annotations

from typing import Any

from devicemodels.base import DEVICES
from devicemodels.memory import MemGeo, MemoryDevice
from devicemodels.params import CxlParams


def cxl_geo(c: CxlParams, ways: int | None = None) -> MemGeo:
    """The memory geometry of a CXL parameter group (``ways`` overrides the interleave set's size)."""
    return MemGeo(page_bytes=c.page_bytes, ways=ways or c.interleave_ways, granule_bytes=c.interleave_granule_bytes,
                  media_bytes_per_s=c.media_bytes_per_s, link_bytes_per_s=c.bandwidth_bytes_per_s,
                  gpu_bytes_per_s=c.gpu_link_bytes_per_s, load_ns=c.load_ns, store_ns=c.store_ns)


@DEVICES.register("cxl")
class CxlDevice(MemoryDevice):
    param_classes = {"cxl": CxlParams}
    capacity_field = "cxl_bytes"

    def __init__(self, cxl: CxlParams | None = None):
        self.cxl = (cxl or CxlParams()).validate()
        self.params = {"cxl": self.cxl}
        self.mg = cxl_geo(self.cxl)
        self._capacity_bytes = self.cxl.cxl_bytes
        self._init_state()

    def geometry(self) -> dict[str, Any]:
        return {**super().geometry(), "interleave_ways": self.cxl.interleave_ways,
                "interleave_granule_bytes": self.cxl.interleave_granule_bytes}
