"""Device parameter dataclasses: validation errors, override routing, config round trips."""

import pytest

from devicemodels import DEVICES
from devicemodels.params import CxlParams, FdpParams, FlashParams, ZnsParams
from kvbed.core.errors import KvbedError

SMALL = ["logical_bytes=16MiB", "pages_per_block=16", "channels=2", "dies_per_channel=2"]


@pytest.mark.parametrize("bad, msg", [
    (dict(page_bytes=0), "page_bytes must be positive"),
    (dict(logical_bytes=0), "logical_bytes must be positive"),
    (dict(channels=0), "channels must be positive"),
    (dict(logical_bytes=10_000), "multiple of page_bytes"),
    (dict(page_bytes=6144, logical_bytes=6144 * 100), "multiple of nand_page_bytes"),
    (dict(op_ratio=0.0), "op_ratio must be in"),
    (dict(gc_fg_free_lines=0), "gc_fg_free_lines must be >= 1"),
    (dict(gc_policy="lru"), "gc_policy: expected one of cost-benefit, d-choices, fifo, greedy, random, got 'lru'"),
    (dict(gc_bg_trigger="always"), "gc_bg_trigger: expected one of idle, threshold, per-command, got 'always'"),
    (dict(page_read_ns=-1), "page_read_ns must be >= 0"),
    (dict(gc_separate_frontier=False, gc_fg_free_lines=1), "needs gc_fg_free_lines >= 2"),
])
def test_flash_params_errors(bad, msg):
    with pytest.raises(KvbedError, match=msg):
        FlashParams(**bad).validate()


def test_op_too_small_for_gc_is_refused_with_a_suggestion():
    # 64 logical lines of 16 blocks; 1% OP gives 65 lines, GC needs 2 frontiers + 1 free + 1 spare
    with pytest.raises(KvbedError, match=r"too small for GC to make progress.*op_ratio >= 0\.0625"):
        DEVICES.get("conv").from_params(SMALL + ["op_ratio=0.01", "blocks_per_line=4"])
    # PI FDP needs a GC frontier per RUH: the same OP that suits one RUH is refused for 8
    ok = ["logical_bytes=64MiB", "pages_per_block=16", "op_ratio=0.1", "ru_bytes=64KiB"]
    DEVICES.get("fdp").from_params(ok + ["nruh=1"])
    with pytest.raises(KvbedError, match="reclaim units"):
        DEVICES.get("fdp").from_params(["logical_bytes=4MiB", "pages_per_block=16", "op_ratio=0.1",
                                        "ru_bytes=256KiB", "nruh=8", "ruh_type=persistently"])


def test_fdp_and_zns_geometry_checks():
    with pytest.raises(KvbedError, match="multiple of the block size"):
        DEVICES.get("fdp").from_params(["ru_bytes=1000KiB"])
    with pytest.raises(KvbedError, match="nruh must be <= 128"):
        FdpParams(nruh=200).validate()
    with pytest.raises(KvbedError, match="ruh_type"):
        FdpParams(ruh_type="both").validate()
    with pytest.raises(KvbedError, match="exceeds zone_bytes"):
        ZnsParams(zone_cap_bytes=128 << 20).validate()
    with pytest.raises(KvbedError, match="multiple of zone_bytes"):
        DEVICES.get("zns").from_params(["logical_bytes=100MiB"])
    with pytest.raises(KvbedError, match="max_open_zones <= max_active_zones"):
        ZnsParams(max_open_zones=20, max_active_zones=10).validate()
    with pytest.raises(KvbedError, match="cxl_bytes must be positive"):
        CxlParams(cxl_bytes=0).validate()


def test_from_params_routes_keys_and_config_round_trips():
    cls = DEVICES.get("fdp")
    d = cls.from_params(SMALL + ["op_ratio=20%", "fdp.nruh=4", "ru_bytes=64KiB", "block_erase_ns=3ms"])
    assert d.flash.op_ratio == 0.2 and d.flash.block_erase_ns == 3_000_000
    assert d.fdp.nruh == 4 and d.fdp.ru_bytes == 65536 and d.n_placement_ids == 4
    again = cls.from_config(d.config())
    assert again.params == d.params
    typed = cls.from_params({"logical_bytes": 16 << 20, "pages_per_block": 16, "channels": 2,
                             "dies_per_channel": 2, "ru_bytes": "64KiB", "nruh": 4, "op_ratio": 0.2})
    assert typed.params["fdp"] == d.params["fdp"]
    with pytest.raises(KvbedError, match="unknown parameter 'nruhs'"):
        cls.from_params(["nruhs=4"])
    with pytest.raises(KvbedError, match="unknown keys for FdpParams"):
        cls.from_config({"flash": {}, "fdp": {"bogus": 1}})


def test_every_device_builds_from_defaults_and_reports_the_contract():
    for name in DEVICES.names():
        cls = DEVICES.get(name)
        d = cls()
        assert d.page_bytes > 0 and d.logical_pages > 0
        assert d.n_placement_ids == (8 if name == "fdp" else 1)
        assert set(d.config()) == {"device", *cls.param_classes}
        c = d.counters()
        assert all(isinstance(v, int) for v in c.values())
        assert {"host_pages_written", "media_pages_written", "gc_runs", "gc_pages_moved", "block_erases",
                "gc_fg_stall_ns"} <= set(c)


@pytest.mark.parametrize("unit, ppb, nand_blocks", [
    ("4KiB", 256, 1),   # FEMU: a block of 256 x 4 KiB pages is one NAND block
    ("4KiB", 64, 1),    # a smaller model block still erases one NAND block
    ("1MiB", 1, 1),     # replay's coarse unit: 1 MiB block = 256 NAND pages = one NAND block
    ("1MiB", 4, 4),     # 4 MiB block = four NAND blocks
])
def test_block_erase_time_counts_nand_blocks_not_mapping_units(unit, ppb, nand_blocks):
    dev = DEVICES.get("conv").from_params([f"page_bytes={unit}", f"pages_per_block={ppb}",
                                           "logical_bytes=1GiB", "channels=2", "dies_per_channel=2"])
    assert dev.flash.nand_blocks_per_block == nand_blocks
    assert dev.geo.erase_ns == 2_000_000 * nand_blocks
