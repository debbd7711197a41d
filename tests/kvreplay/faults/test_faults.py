"""Faults and recovery contracts on hand-built traces (tests/fault_traces.py): every outcome is counted by
hand in the comments; the contracts' detection claims are checked with real numbers."""

from __future__ import annotations

import json

import pytest

from tests.support import fault_traces as T
from kvreplay.replay import Replay, build_config


def outcomes(path, fault, contract, extra=()):
    cfg = build_config(path, "conv", "none", [f"contract={contract}", f"fault={fault}", "window_ns=1ms", *extra])
    # T.STALE reuses ids on purpose (the only way to a phantom load), which the replay's row checks refuse
    res = Replay(cfg, trace_checked=path.name == "stale.parquet").run()["result"]["faults"]
    return {k: v["objects"] for k, v in res["injected"][0]["outcomes"].items() if v["objects"]}, res


@pytest.fixture(scope="module")
def stale(tmp_path_factory):
    return T.write(tmp_path_factory.mktemp("f") / "stale.parquet", T.STALE)


@pytest.fixture(scope="module")
def drift(tmp_path_factory):
    return T.write(tmp_path_factory.mktemp("f") / "drift.parquet", T.DRIFT)


@pytest.fixture(scope="module")
def power(tmp_path_factory):
    return T.write(tmp_path_factory.mktemp("f") / "power.parquet", T.POWER, nbytes=T.POWER_BYTES)


# stale index from 1.5 ms (holds 1 and 2), restored at 5 ms: load 3 -> missing (not indexed); create 2 -> the
# index says ssd holds it, its unit is trimmed (zeros); create 1 -> its unit holds 3, intact, same length
@pytest.mark.parametrize("contract,expected", [
    ("none", {"missing": 1, "wrong": 2}),
    ("checksum", {"missing": 1, "detected": 1, "wrong": 1}),  # zeros caught; 3's intact data passes
    ("version", {"missing": 1, "detected": 2}),
    ("lease", {"missing": 1, "detected": 2}),
    ("full", {"missing": 1, "detected": 2}),
])
def test_stale_index(stale, contract, expected):
    got, res = outcomes(stale, "stale-index@5ms,age_ns=3.5ms", contract)
    assert got == expected
    assert res["phantom_loads"] == 2
    st = res["injected"][0]["state"]
    assert (st["stale_entries"], st["entries_missing"], st["index_entries"]) == (2, 1, 2)


# drift at 2 ms: load 1 (ssd, old), hit 2 (gpu, old), load 3 (new), load 1 again (old unless recomputed)
@pytest.mark.parametrize("contract,expected", [
    ("none", {"reused": 1, "wrong": 3}),
    ("checksum", {"reused": 1, "wrong": 3}),  # old data is intact: a checksum cannot tell
    ("version", {"reused": 2, "detected": 2}),
    ("full", {"reused": 2, "detected": 2}),
])
def test_version_drift(drift, contract, expected):
    got, res = outcomes(drift, "version-drift@2ms", contract)
    assert got == expected
    blk = res["injected"][0]
    assert blk["per_kind"]["quantized"]["reused"]["objects"] == 1
    if contract == "none":
        assert blk["per_tier"]["gpu"]["wrong"]["objects"] == 1 and blk["per_tier"]["ssd"]["wrong"]["objects"] == 2
        assert blk["served_wrong_bytes"] == 3 * T.OBJ_BYTES
    else:
        assert blk["recompute_tokens"] == (2 * T.TOKENS if contract != "checksum" else 0)


def test_version_drift_of_another_scope_changes_nothing(drift):
    got, _ = outcomes(drift, "version-drift@2ms,scope=m2", "none")
    assert got == {"reused": 4}


# partial offload at 360 ms: 4's first unit is on the media, its second op never ran -> torn
@pytest.mark.parametrize("contract,expected", [
    ("none", {"reused": 3, "wrong": 1}),
    ("checksum", {"reused": 3, "detected": 1}),
    ("version", {"reused": 3, "wrong": 1}),  # the header (first unit) is 4's own
    ("lease", {"reused": 3, "wrong": 1}),
    ("full", {"reused": 3, "detected": 1}),
])
def test_partial_offload_tears(power, contract, expected):
    got, res = outcomes(power, "partial-offload@360ms", contract, T.ONE_DIE)
    assert got == expected
    st = res["injected"][0]["state"]
    assert (st["torn_objects"], st["lost_objects"], st["write_ops_lost"]) == (1, 0, 1)


@pytest.mark.parametrize("fault,contract,expected,torn_lost", [
    # 4 torn as above; the gpu copy of 3 is gone with the power
    ("power-loss@360ms", "none", {"reused": 2, "wrong": 1, "missing": 1}, (1, 0)),
    ("power-loss@360ms", "checksum", {"reused": 2, "detected": 1, "missing": 1}, (1, 0)),
    # a 100 ms write buffer: 4's units (done ~351/402 ms) were both still volatile -> lost whole (zeros)
    ("power-loss@360ms,flush_ns=100ms", "none", {"reused": 2, "wrong": 1, "missing": 1}, (0, 1)),
    ("power-loss@360ms,flush_ns=100ms", "checksum", {"reused": 2, "detected": 1, "missing": 1}, (0, 1)),
    # a 400 ms buffer: 1 and 3 (done 52/155 ms) were not on the media either
    ("power-loss@360ms,flush_ns=400ms", "none", {"wrong": 3, "missing": 1}, (0, 3)),
    ("power-loss@360ms,flush_ns=400ms", "full", {"detected": 3, "missing": 1}, (0, 3)),
    ("power-loss@360ms,index=lost", "none", {"missing": 4}, (1, 0)),
])
def test_power_loss(power, fault, contract, expected, torn_lost):
    got, res = outcomes(power, fault, contract, T.ONE_DIE)
    assert got == expected
    st = res["injected"][0]["state"]
    assert (st["torn_objects"], st["lost_objects"]) == torn_lost
    assert st["gpu_copies_lost"] == 4


@pytest.mark.parametrize("fault,contract,expected", [
    ("media-error@360ms,objects=1", "none", {"reused": 3, "wrong": 1}),
    ("media-error@360ms,objects=1", "version", {"reused": 3, "wrong": 1}),
    ("media-error@360ms,objects=1", "checksum", {"reused": 3, "detected": 1}),
    ("media-error@360ms,rate_per_bit=1", "none", {"reused": 1, "wrong": 3}),  # every ssd load; the gpu hit is fine
    ("media-error@360ms,rate_per_bit=1", "checksum", {"reused": 1, "detected": 3}),
    ("media-error@360ms,rate_per_bit=0", "checksum", {"reused": 4}),
    ("tier-loss@360ms,tier=gpu", "none", {"reused": 3, "missing": 1}),
    ("tier-loss@360ms,tier=ssd", "full", {"reused": 1, "missing": 3}),
])
def test_media_error_and_tier_loss(power, fault, contract, expected):
    got, _ = outcomes(power, fault, contract)
    assert got == expected


def test_media_error_rate_is_seeded(power):
    # p = 1 - (1 - r)^(8 * 1 MiB) ~ 0.5 per load at r = 8.3e-8: which loads are hit depends on the seed only
    runs = {s: outcomes(power, "media-error@360ms,rate_per_bit=8.3e-8", "checksum", [f"seed={s}"])[0]
            for s in (1, 1, 2, 3, 4, 5)}
    assert len({json.dumps(v, sort_keys=True) for v in runs.values()}) > 1
    assert all(sum(v.values()) == 4 and "wrong" not in v for v in runs.values())


def test_time_series_around_the_fault(stale):
    cfg = build_config(stale, "conv", "none", ["contract=none", "fault=stale-index@5ms,age_ns=3.5ms",
                                               "window_ns=1ms"])
    rows = {r["window"]: r for r in Replay(cfg, trace_checked=True).run()["timeseries"]}  # see outcomes()
    assert (rows[6]["loads_missing"], rows[7]["loads_wrong"], rows[8]["loads_wrong"]) == (1, 1, 1)
    assert sum(r["loads_reused"] + r["loads_detected"] for r in rows.values()) == 0


def test_registries_hold_each_kind_once():
    from kvreplay.faults import CONTRACTS, FAULTS

    assert FAULTS.names() == ["media-error", "partial-offload", "power-loss", "stale-index", "tier-loss",
                              "version-drift"]
    sizes = {n: (CONTRACTS.get(n).header_bytes(), CONTRACTS.get(n).index_entry_bytes()) for n in CONTRACTS}
    assert sizes == {"none": (0, 0), "checksum": (16, 0), "version": (16, 8), "lease": (16, 16), "full": (48, 24)}


def test_units_of_one_op_reach_the_media_in_order(tmp_path):
    # 5 (four units, one op: arrives at 0, done ~205 ms on one die); at 110 ms its first two units are on
    # the media, the rest not: torn
    p = T.write(tmp_path / "big.parquet", [(0, "create", 5, "gpu"), (0, "persist", 5, "ssd"),
                                           (110, "commit", 5, "gpu"), (300, "load", 5, "ssd")],
                nbytes={5: 4 * T.MiB - 4096})
    got, res = outcomes(p, "partial-offload@110ms", "checksum", T.ONE_DIE)
    st = res["injected"][0]["state"]
    assert (st["torn_objects"], st["pages_lost"], st["write_ops_lost"]) == (1, 2, 1)
    assert got == {"detected": 1}
    assert outcomes(p, "partial-offload@110ms", "none", T.ONE_DIE)[0] == {"wrong": 1}
