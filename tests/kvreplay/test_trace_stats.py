"""kvbed trace stats: exact reuse distances vs brute force, lifetimes and shares on hand-made traces."""

from __future__ import annotations

import numpy as np
import pytest

from kvreplay.schema import OPS, TraceMeta, make_batch, read_trace, write_trace
from kvreplay.stats import trace_stats
from kvreplay.tiers.sim import simulate_to_file

from tests.support.tier_reference import OBJ, random_trace, small_params


def brute_reuse(b):
    """Reuse distance the slow way: distinct objects (and their bytes) since the previous access."""
    acc = [(int(o), int(n), OPS[c]) for o, n, c in zip(b["obj_id"], b["nbytes"], b["op"])
           if OPS[c] in ("create", "transform", "recover", "hit", "load")]
    last: dict[int, int] = {}
    dist_n, dist_b = [], []
    for i, (o, _, op) in enumerate(acc):
        if o in last and op in ("hit", "load"):
            between = {x: nb for x, nb, _ in acc[last[o] + 1:i]}
            between.pop(o, None)
            dist_n.append(len(between))
            dist_b.append(sum(between.values()))
        last[o] = i
    return dist_n, dist_b


@pytest.mark.parametrize("fenwick_positions", [1 << 20, 64])  # 64 forces many compactions and growths
def test_reuse_distance_is_exact(tmp_path, fenwick_positions):
    path = tmp_path / "t.parquet"
    simulate_to_file(random_trace(4, n=250), small_params(), path, TraceMeta(), row_group_rows=500)
    b, _ = read_trace(path)
    s = trace_stats(path, fenwick_positions=fenwick_positions)
    dn, db = brute_reuse(b)
    for key, ref in (("distance_objects", dn), ("distance_bytes", db)):
        h = s["reuse"][key]
        assert h["N"] == len(ref) > 100
        assert h["min"] == min(ref) and h["max"] == max(ref)
        assert h["mean"] * h["N"] == pytest.approx(sum(ref), rel=1e-12)  # the histogram's sum slot is exact
        # percentiles within the log-linear bucket error (1/64) of the exact order statistic
        exact = np.sort(ref)
        p50 = exact[int(np.ceil(0.5 * len(ref))) - 1]
        assert h["percentile"]["50.000000"] == pytest.approx(p50, rel=1 / 32, abs=1)
    assert s["reuse"]["reuses"] == len(dn)
    assert s["rows"] == b.n


def test_counts_lifetimes_and_top_share(tmp_path):
    # obj 1: created at 0, persisted to ssd, 8 loads, deleted at 100 s; objs 2..10 created and
    # deleted 10 s later, never reused; obj 11 still live at the end
    S = 10**9
    rows = [(0, "create", 1, "gpu"), (0, "commit", 1, "gpu"), (0, "persist", 1, "ssd"), (1, "evict", 1, "gpu")]
    rows += [(2 + i, "load", 1, "ssd") for i in range(8)]
    for o in range(2, 11):
        rows += [(20 * S + o, "create", o, "gpu"), (20 * S + o, "commit", o, "gpu"), (30 * S + o, "delete", o, "gpu")]
    rows += [(40 * S, "create", 11, "gpu"), (40 * S, "commit", 11, "gpu"), (100 * S, "delete", 1, "ssd")]
    rows.sort(key=lambda r: r[0])
    ts, op, obj, tier = zip(*rows)
    b = make_batch(ts_ns=np.array(ts), op=np.array(op), obj_id=np.array(obj, np.uint64), tier=np.array(tier),
                   nbytes=np.full(len(ts), 1000), ntokens=np.full(len(ts), 4), tenant=np.array(obj) % 2)
    path = write_trace(tmp_path / "h.parquet", b, TraceMeta(), tenants=["even", "odd"])
    s = trace_stats(path)
    cnt = {(r["op"], r["tier"]): r["count"] for r in s["ops"]}
    assert cnt[("load", "ssd")] == 8 and cnt[("delete", "gpu")] == 9 and cnt[("create", "gpu")] == 11
    assert s["objects"] == {"total": 11, "ended": 10, "live_at_end": 1, "never_stored": 0}
    lt = s["lifetime_ns"]
    assert lt["N"] == 10 and lt["min"] == 10 * S and lt["max"] == 100 * S
    # ssd residency of obj 1: persisted at 0, deleted at 100 s
    assert s["residency_ns"]["ssd"]["N"] == 1 and s["residency_ns"]["ssd"]["max"] == 100 * S
    # 11 objects: top 10% = 2 objects (ceil); all 8 reuses belong to obj 1
    assert s["reuse"]["top10pct_objects_reuse_share"] == 1.0
    assert s["reuse"]["objects_never_reused_share"] == pytest.approx(10 / 11)
    # the 8 loads of obj 1 follow each other: distance 0, then after objects 2..10: not reused
    assert s["reuse"]["distance_objects"]["max"] == 0
    ten = {t["name"]: t for t in s["tenants"]}
    assert ten["odd"]["loads"] == 8 and ten["odd"]["objects"] == 6 and ten["even"]["objects"] == 5
    assert ten["even"]["lifetime_p50_ns"] == 10 * S
    # odd lifetimes 10, 10, 10, 10, 100 s: nearest rank gives 100 s at p90 (interpolation would say 64 s)
    assert (ten["odd"]["lifetime_p50_ns"], ten["odd"]["lifetime_p90_ns"]) == (10 * S, 100 * S)


def test_stats_of_a_tier_simulated_trace(tmp_path):
    path = tmp_path / "t.parquet"
    res = simulate_to_file(random_trace(8, n=200), small_params(), path, TraceMeta())
    s = trace_stats(path)
    assert sum(r["count"] for r in s["ops"]) == res.events
    # tier stats from the simulator are kept in the metadata, shown again by stats
    assert s["meta"]["tier_stats"]["ssd"]["persists"] == sum(
        r["count"] for r in s["ops"] if r["op"] == "persist" and r["tier"] == "ssd")
    assert s["meta"]["geometry"]["object_bytes"] == OBJ


def test_top10_share_counts_every_object(tmp_path):
    """25 objects: 5 never reused, objects 6..25 loaded 1..20 times. The top 10% of the 25 objects
    (ceil: 3) take 20+19+18 of the 210 reuses; counting only reused objects (2 of 20) would give 39/210."""
    rows = []
    for o in range(1, 26):
        rows += [(o, "create", o, "gpu"), (o, "commit", o, "gpu"), (o, "persist", o, "ssd")]
    t = 100
    for o in range(6, 26):
        for _ in range(o - 5):
            rows.append((t, "load", o, "ssd"))
            t += 1
    ts, op, obj, tier = zip(*rows)
    b = make_batch(ts_ns=np.array(ts), op=np.array(op), obj_id=np.array(obj, np.uint64), tier=np.array(tier),
                   nbytes=np.full(len(ts), 1000), ntokens=np.full(len(ts), 4))
    s = trace_stats(write_trace(tmp_path / "z.parquet", b, TraceMeta()))
    assert s["reuse"]["reuses"] == 210
    assert s["reuse"]["top10pct_objects_reuse_share"] == pytest.approx(57 / 210)
    assert s["reuse"]["objects_never_reused_share"] == pytest.approx(5 / 25)


def _old_row(hits: int, lookups: int) -> dict:
    """A tier row as traces before per-reference hit ratios wrote it: one ``hit_ratio`` = hits / lookups."""
    return {"capacity_bytes": 1 << 30, "policy": "lru", "hits": hits, "lookups": lookups, "hit_ratio": hits / lookups,
            "bytes_in": 0, "bytes_out": 0, "evictions": 0, "deletes": 0, "invalidations": 0, "peak_bytes": 0}


@pytest.mark.parametrize("with_counters", [True, False])
def test_old_trace_hit_ratios_read_as_what_they_are(tmp_path, with_counters):
    """An old trace's ``hit_ratio`` was hits / lookups: read as the lookup ratio. The share of chunk references
    follows from the chunk count the simulator recorded (GPU 31,912 hits of 162,794 lookups and of 571,526
    chunks: the Mooncake import's figures); without the count it is not made up but shown as n/a."""
    import json

    from tests.support.cli import kvbed, ok
    from kvreplay.tiers import hitratio
    from testbed.study.table import _hit_ratios

    b = make_batch(ts_ns=np.array([0, 1]), op=np.array(["create", "commit"]), obj_id=np.array([1, 1], np.uint64),
                   tier=np.array(["gpu", "gpu"]), nbytes=np.full(2, 1000), ntokens=np.full(2, 4))
    stats = {"gpu": _old_row(31_912, 162_794), "cpu": _old_row(74_128, 130_882),
             "all": {"chunk_hit_ratio": 0.26, "token_hit_ratio": 0.27, "mean_queue_ns": 0, "max_queue_ns": 0}}
    extra = {"tier_sim_counters": {"chunk_references": 571_526, "chunks": 571_526}} if with_counters else {}
    path = write_trace(tmp_path / "old.parquet", b, TraceMeta(tier_stats=stats, extra=extra))
    s = json.loads(ok(kvbed("trace", "stats", path, "--json")).stdout)
    gpu = s["meta"]["tier_stats"]["gpu"]
    assert "hit_ratio" not in gpu
    assert gpu["lookup_hit_ratio"] == pytest.approx(31_912 / 162_794)  # 19.6%
    text = ok(kvbed("trace", "stats", path)).stdout
    assert "hits / all chunks" in text and "hits / lookups" in text and "19.6%" in text
    study_cols = _hit_ratios(path)  # a study's table columns
    assert study_cols["lookup_hit_ratio_gpu"] == gpu["lookup_hit_ratio"]
    if with_counters:
        assert (gpu["chunk_references"], gpu["ref_hit_ratio"]) == (571_526, pytest.approx(31_912 / 571_526))
        assert "5.6%" in text and "n/a" not in text
        assert study_cols["ref_hit_ratio_cpu"] == pytest.approx(74_128 / 571_526)
    else:
        assert gpu["ref_hit_ratio"] is None and gpu["ref_hit_ratio_note"] == hitratio.NOT_RECORDED
        assert "n/a" in text and "not recorded in this trace" in text
        assert study_cols["ref_hit_ratio_cpu"] is None
