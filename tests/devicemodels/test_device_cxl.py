"""CXL memory refusals, and the CXL-SSD: a DRAM cache (units, fills, write-backs, hit/miss latency) over a conv FTL.

The memory timing arithmetic is in test_device_memory.py, the cache policies against a reference in
test_cache_policies.py."""

import re

import numpy as np
import pytest
from click.testing import CliRunner

from devicemodels import DEVICES
from devicemodels.base import OP_READ, OP_TRIM, OP_WRITE, OP_ZONE_RESET
from testbed.cli import cli
from kvbed.core.errors import KvbedError

from tests.support.devices import ops


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


def test_cxl_ssd_default_cache_is_a_twentieth_of_the_flash_in_whole_sets():
    # 16 MiB / 20 = 838860.8 B; a set is 8 ways x 4 KiB = 32 KiB: 25 whole sets = 800 KiB
    d = DEVICES.get("cxl-ssd").from_params(["logical_bytes=16MiB", "pages_per_block=16", "channels=2",
                                            "dies_per_channel=2"])
    assert (d.cache_bytes, d.cg.sets, d.cg.ways) == (25 * 32768, 25, 8)
    k = d.stats()["cache"]
    assert (k["cache_bytes"], k["sets"], k["unit_bytes"], k["policy"]) == (819200, 25, 4096, "lru")
    # units of 64 KiB: a set is 512 KiB, one whole set fits in 838860 B
    d = DEVICES.get("cxl-ssd").from_params(["logical_bytes=16MiB", "pages_per_block=16", "channels=2",
                                            "dies_per_channel=2", "cache_unit_bytes=64KiB"])
    assert (d.cache_bytes, d.cg.sets, d.cg.unit_pages) == (512 * 1024, 1, 16)


@pytest.mark.parametrize("extra, msg", [
    (["cache_bytes=32MiB"], "cache_bytes (32MiB) is larger than the device (logical_bytes 16MiB)"),
    (["cache_bytes=-4KiB"], "cache_bytes must be >= 0"),
    (["cache_bytes=40KiB"], "cache_bytes (40KiB) must be a whole number of sets of cache_ways (4) units of 4KiB"),
    (["cache_unit_bytes=6KiB"], "cache_unit_bytes (6144) must be a multiple of page_bytes (4096)"),
    (["cache_unit_bytes=0", "cache_ways=0"], "cache_ways must be positive"),
    (["cache_policy=arc"], "cache_policy: expected one of clock, fifo, lru, s3fifo, got 'arc'"),
    (["interleave_ways=2"], "cxl-ssd is one device: interleave_ways must be 1, got 2"),
])
def test_cxl_ssd_bad_cache_parameters(extra, msg):
    with pytest.raises(KvbedError, match=re.escape(msg)):
        _cxl_ssd(*extra)


def test_cxl_ssd_default_cache_that_cannot_hold_one_set_is_refused():
    with pytest.raises(KvbedError, match=re.escape("one set (8 units of 4MiB) (32MiB) is larger than the device")):
        DEVICES.get("cxl-ssd").from_params(["logical_bytes=16MiB", "pages_per_block=16", "channels=2",
                                            "dies_per_channel=2", "cache_unit_bytes=4MiB"])


@pytest.mark.parametrize("args, msg", [
    (["--param", "cache_bytes=1TiB"], "cache_bytes (1TiB) is larger than the device (logical_bytes 4GiB)"),
    (["--param", "bandwidth_bytes_per_s=-1"], "bandwidth_bytes_per_s must be positive, got -1"),
])
def test_cxl_ssd_bad_parameters_exit_2_on_the_cli(args, msg):
    r = CliRunner().invoke(cli, ["device", "run", "--device", "cxl-ssd", *args])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0] == f"kvbed: error: {msg}", r.output


def test_cxl_ssd_units_fill_whole_and_partial_writes_wait_for_the_fill():
    # units of 4 pages (16 KiB), 1 set of 4 ways
    d = _cxl_ssd("cache_bytes=64KiB", "cache_unit_bytes=16KiB", "cache_ways=4")
    d.precondition(0.5)  # data on the flash, so that fills are NAND reads (an unwritten page reads as zeros at once)
    link = 128  # one 4 KiB page over 32 GB/s
    # a one-page read misses: the whole unit (4 pages) is read from flash; the read waits for it
    c = d.submit(ops((OP_READ, 1, 1, 0, 0)))
    cnt = d.counters()
    assert (cnt["cache_read_misses"], cnt["cache_fills"], cnt["flash_pages_read"]) == (1, 1, 4)
    # it completes when the flash has read the unit (pages 0-3 as one op), plus load_ns
    twin = _cxl_ssd("cache_bytes=64KiB", "cache_unit_bytes=16KiB", "cache_ways=4")
    twin.precondition(0.5)
    assert c.done_ns[0] == twin.backend.submit(ops((OP_READ, 0, 4, 0, 0))).done_ns[0] + 250 > 40_000 + 5120
    # the other pages of that unit now hit
    c = d.submit(ops((OP_READ, 3, 1, 0, 10**7)))
    assert c.done_ns[0] == 10**7 + link + 250 and d.counters()["cache_read_hits"] == 1
    # a write of a whole unit (pages 4-7) needs no fill; a write of part of unit 2 (page 9) fills it first
    c = d.submit(ops((OP_WRITE, 4, 4, 0, 2 * 10**7), (OP_WRITE, 9, 1, 0, 3 * 10**7)))
    cnt = d.counters()
    assert (cnt["cache_write_misses"], cnt["cache_fills"], cnt["flash_pages_read"]) == (2, 2, 8)
    assert c.done_ns[0] == 2 * 10**7 + 4 * link + 300
    assert c.done_ns[1] - 3 * 10**7 > 40_000  # waited for the NAND read of its unit
    # two more units fill the set; the next evicts the LRU unit 0 (clean: no write-back), then unit 1 (dirty):
    # its write-back is one flash write of the whole unit
    d.submit(ops((OP_READ, 12, 1, 0, 4 * 10**7), (OP_READ, 16, 1, 0, 4 * 10**7), (OP_READ, 20, 1, 0, 4 * 10**7)))
    cnt = d.counters()
    assert cnt["cache_writebacks"] == 1 and cnt["flash_pages_written"] == 4


def test_cxl_ssd_keeps_read_hit_and_miss_latency_apart():
    d = _cxl_ssd()
    d.precondition(0.5)
    # pages 0-3 cached by writes; read 0-1 (hits), 0-4 (page 4 misses: the op is a miss), 8 (miss)
    d.submit(ops(*[(OP_WRITE, x, 1, 0, 0) for x in range(4)]))
    d.submit(ops((OP_READ, 0, 2, 0, 10**6), (OP_READ, 0, 5, 0, 2 * 10**6), (OP_READ, 8, 1, 0, 3 * 10**6)))
    k = d.stats()["cache"]
    hit, miss = k["read_hit_latency"], k["read_miss_latency"]
    assert hit["ios"] == 1 and miss["ios"] == 2
    assert hit["lat_ns"]["min"] == hit["lat_ns"]["max"] == 2 * 128 + 250
    assert miss["lat_ns"]["min"] > 40_000  # a NAND read behind each
    assert list(miss["lat_ns"]["percentile"]) == list(d.stats()["latency"]["read"]["lat_ns"]["percentile"])
    assert d.stats()["latency"]["read"]["ios"] == 3
    assert k["read_hit_ratio"] == 6 / 8 and k["fills"] == 2


def test_cxl_ssd_trim_keeps_units_it_covers_only_in_part():
    d = _cxl_ssd("cache_bytes=64KiB", "cache_unit_bytes=16KiB", "cache_ways=4")
    d.submit(ops((OP_WRITE, 0, 8), (OP_TRIM, 2, 6, 0, 1), (OP_READ, 0, 1, 0, 2), (OP_READ, 4, 1, 0, 3)))
    cnt = d.counters()
    # unit 0 (pages 0-3) was trimmed only in part: still cached; unit 1 (4-7) wholly: dropped, no write-back
    assert (cnt["cache_read_hits"], cnt["cache_read_misses"], cnt["cache_writebacks"]) == (1, 1, 0)
