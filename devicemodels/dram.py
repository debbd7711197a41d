"""``dram``: host DRAM as a KV tier: the DRAM media and the PCIe or NVLink-C2C link to the GPU.

The same physics as ``cxl`` (:mod:`devicemodels.memory`) with one device, no CXL hop and no device link:
a transfer holds the DRAM media (both directions share it) and its direction of the GPU link for its
bytes at their bandwidths; load_ns/store_ns are added once per op. With the defaults the GPU link
(PCIe 5.0 x16, ~64 GB/s per direction) is the bottleneck, as it is for a GPU reading host memory; a
GH200's NVLink-C2C (450 GB/s per direction) is ``link_bytes_per_s=450e9``. No GC, WAF 1; TRIM does nothing.
Defaults and their sources: :class:`~devicemodels.params.DramParams`.
"""

from __future__ import annotations

from devicemodels.base import DEVICES
from devicemodels.memory import MemGeo, MemoryDevice
from devicemodels.params import DramParams


@DEVICES.register("dram")
class DramDevice(MemoryDevice):
    param_classes = {"dram": DramParams}
    capacity_field = "dram_bytes"

    def __init__(self, dram: DramParams | None = None):
        self.dram = (dram or DramParams()).validate()
        self.params = {"dram": self.dram}
        d = self.dram
        self.mg = MemGeo(page_bytes=d.page_bytes, ways=1, granule_bytes=d.page_bytes,
                         media_bytes_per_s=d.media_bytes_per_s, link_bytes_per_s=0,
                         gpu_bytes_per_s=d.link_bytes_per_s, load_ns=d.load_ns, store_ns=d.store_ns)
        self._capacity_bytes = d.dram_bytes
        self._init_state()
