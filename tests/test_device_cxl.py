"""CXL type-3 memory: fixed access latency plus a bandwidth-limited link queue."""

import numpy as np
import pytest

from devicemodels import DEVICES
from devicemodels.base import OP_READ, OP_TRIM, OP_WRITE, OP_ZONE_RESET
from testbed.core.errors import KvbedError

from device_helpers import ops


def test_latency_and_bandwidth_queue():
    # 4 KiB pages over 32 GB/s: 128 ns per page on the link
    d = DEVICES.get("cxl").from_params(["cxl_bytes=64MiB", "load_ns=250", "store_ns=300"])
    c = d.submit(ops((OP_READ, 0, 1, 0, 0), (OP_WRITE, 10, 8, 0, 0), (OP_READ, 0, 1, 0, 10_000), (OP_TRIM, 0, 4, 0, 10_000)))
    assert c.done_ns[0] == 128 + 250
    assert c.done_ns[1] == 128 + 8 * 128 + 300  # queued behind the first transfer
    assert c.done_ns[2] == 10_000 + 128 + 250  # the link is idle again
    assert c.done_ns[3] == 10_000
    cnt = d.counters()
    assert (cnt["host_pages_read"], cnt["host_pages_written"], cnt["host_pages_trimmed"]) == (2, 8, 4)
    s = d.stats()
    assert s["waf"] == 1.0 and s["latency"]["read"]["lat_ns"]["min"] == 378


def test_cxl_refuses_flash_ops_and_out_of_range():
    d = DEVICES.get("cxl").from_params(["cxl_bytes=1MiB"])
    with pytest.raises(KvbedError, match="not supported"):
        d.submit(ops((OP_ZONE_RESET, 0, 1)))
    with pytest.raises(KvbedError, match="beyond the device's 256 logical pages"):
        d.submit(ops((OP_WRITE, 255, 2)))


def _cxl_ssd(*extra):
    return DEVICES.get("cxl-ssd").from_params(["logical_bytes=16MiB", "pages_per_block=16", "channels=2",
                                               "dies_per_channel=2", "cache_bytes=64KiB", "cache_ways=4",
                                               "load_ns=250", "store_ns=300", *extra])


def test_cxl_ssd_hits_misses_and_writebacks():
    d = _cxl_ssd()
    link = 128  # one 4 KiB page over 32 GB/s
    # write 16 pages (cache holds 16: 4 sets x 4 ways), then read one back: a DRAM hit
    c = d.submit(ops(*[(OP_WRITE, x, 1, 0, 0) for x in range(16)], (OP_READ, 5, 1, 0, 10**6)))
    assert c.done_ns[-1] == 10**6 + link + 250
    cnt = d.counters()
    assert cnt["cache_write_misses"] == 16 and cnt["cache_read_hits"] == 1 and cnt["flash_pages_written"] == 0
    # page 100 evicts page 0 (LRU of set 0, dirty: written back); reading page 0 again misses, waits
    # for its NAND read and evicts page 4 (another write-back)
    c = d.submit(ops((OP_WRITE, 100, 1, 0, 2 * 10**6), (OP_READ, 0, 1, 0, 3 * 10**6)))
    cnt = d.counters()
    assert cnt["cache_read_misses"] == 1 and cnt["cache_writebacks"] == 2
    assert cnt["flash_pages_written"] == 2 and cnt["flash_pages_read"] == 1
    assert c.done_ns[1] - 3 * 10**6 == 40_000 + 5120 + 250  # NAND read + channel + load (link overlaps)
    # overwrites absorbed by the cache: media writes per host write well below 1
    d.submit(ops(*[(OP_WRITE, x % 8, 1, 0, 4 * 10**6 + x) for x in range(1000)]))
    assert d.stats()["waf"] < 0.1


def test_cxl_ssd_trim_drops_cached_pages():
    d = _cxl_ssd()
    d.submit(ops((OP_WRITE, 3, 1), (OP_TRIM, 0, 8), (OP_READ, 3, 1, 0, 10)))
    cnt = d.counters()
    assert cnt["cache_read_misses"] == 1 and cnt["cache_writebacks"] == 0
    assert d.backend.counters()["host_pages_trimmed"] == 8


def test_cxl_ssd_reports_its_nand_gc_and_wear_like_every_flash_device():
    d = _cxl_ssd()
    # 40x the 4096 logical pages of random overwrites through a 16-page cache: the NAND behind it must GC
    rng = np.random.default_rng(1)
    n = 40 * d.logical_pages
    d.submit(ops(*[(OP_WRITE, int(x), 1, 0, i * 50_000) for i, x in enumerate(rng.integers(0, d.logical_pages, n))]))
    s = d.stats()
    assert s["gc"]["runs"] > 0 and s["gc"]["pages_moved"] > 0
    assert s["gc"]["runs"] == d.counters()["gc_runs"]
    assert s["wear"]["erase_count_max"] >= 1
