"""Device models: the physics of the testbed (flash FTL with GC, FDP, ZNS, host DRAM, CXL memory, CXL-SSD).

Importing the package registers every device in ``DEVICES`` (``conv``, ``fdp``, ``zns``, ``dram``, ``cxl``,
``cxl-ssd``), every GC victim policy in ``GC_POLICIES`` and every CXL-SSD cache policy in
``CACHE_POLICIES``. Memory devices (``dram``, ``cxl``, the DRAM side of ``cxl-ssd``) share one transfer
rule over bandwidth resources with next-free times (:mod:`devicemodels.memory`).

Building a device (the same for all):
    ``DEVICES.get(name)(**groups)`` with one frozen params instance per group of
    ``cls.param_classes`` (missing groups take defaults), e.g.
    ``FdpDevice(flash=FlashParams(...), fdp=FdpParams(...))``; or
    ``DEVICES.get(name).from_params(["op_ratio=7%", "fdp.nruh=4"])`` (k=v or a dict, routed by
    field name); ``dev.config()`` / ``cls.from_config(cfg)`` round-trip a saved config.

Running ops: ``dev.submit(op_batch(...))`` -> ``Completion(done_ns, lba)`` (see base.py). A
batch the device would refuse raises a one-line ``KvbedError`` before anything runs; a
state-dependent refusal (ZNS write-pointer/limit errors, a reclaim group GC cannot free) raises
at the failing op with the earlier ops applied, as a real device would have completed them.

Per batch: ``dev.counters()`` is a dict of cumulative ints (cheap: one array to list);
``dev.stats()`` the fio-shaped summary (WAF, GC, wear, latency percentiles per op type, FDP
log pages and per-RUH usage, per-zone summary); ``dev.reset_counters()`` zeroes counters,
histograms and device clocks (state and wear stay); ``with dev.untimed(): ...`` runs fast
without the latency model; ``dev.precondition(fill, overwrite_x=..., seed=...)`` is counted apart.

Mapping unit: ``FlashParams.page_bytes`` may be a multiple of ``nand_page_bytes`` (e.g. 1 MiB
units for MB-sized KV objects). A unit of k NAND pages costs k page reads/programs on its die and
its channel transfer takes page_bytes / channel rate; a block of ``pages_per_block`` units holds
k x pages_per_block NAND pages, so its erase costs ``block_erase_ns`` per ``nand_pages_per_block``
of them (FEMU: 1 MiB units with pages_per_block=1 erase in one 2 ms block erase).

Kernels come from :mod:`devicemodels.jit` (``njit``, ``kernel``): numba's on-disk cache, stamped with
a fingerprint of every kernel source (editing a module a kernel inlines from recompiles it) and set up
at the first compile, not on import.
"""

from devicemodels.base import DEVICES, GC_POLICIES, PRESETS  # noqa: F401
from devicemodels import gc_policies, presets  # noqa: F401  (registers GC policies, parameter presets)
from devicemodels.cache_policies import CACHE_POLICIES  # noqa: F401
from devicemodels import conv, cxl, cxl_ssd, dram, fdp, zns  # noqa: F401  (register devices)
