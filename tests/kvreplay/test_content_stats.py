"""Content by tier (kvreplay.contentstats, ``kvbed trace stats``): hand-counted traces with and without content
keys, and a tier simulated trace whose policy ratios must be the simulator's own and whose key figures are
recounted the slow way."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvreplay.schema import OPS, TIERS, TraceMeta, make_batch, read_trace, write_trace
from kvreplay.stats import trace_stats
from kvreplay.tiers.sim import simulate_to_file

from tests.support.cli import kvbed, ok
from tests.support.tier_reference import random_trace, small_params
from tests.support.trace_versions import as_v1

A, B = 0xA11CE, 0xB0B
#: (op, object, tier, content key); one event per ns, in this order. GPU holds 1 object, the SSD 2 (1000 B each).
#: o1 (A) made and written through; o2 (B) made, evicting o1 from the GPU; o1 loaded back from the SSD; o1 hit;
#: o2 deleted everywhere, B asked again: computed as o3 with B's key.
EVENTS = [
    ("create", 1, "gpu", A), ("commit", 1, "gpu", A), ("persist", 1, "ssd", A),
    ("evict", 1, "gpu", A), ("create", 2, "gpu", B), ("commit", 2, "gpu", B), ("persist", 2, "ssd", B),
    ("load", 1, "ssd", A), ("evict", 2, "gpu", B), ("persist", 1, "gpu", A),
    ("hit", 1, "gpu", A),
    ("delete", 2, "ssd", B), ("evict", 1, "gpu", A), ("create", 3, "gpu", B), ("commit", 3, "gpu", B),
    ("persist", 3, "ssd", B),
]
#: tier rows as the tier simulator writes them (the stats printout shows them); only the capacities count here
CAPS = {t: {"capacity_bytes": cap, "policy": "lru", "hits": 1, "lookups": 5, "chunk_references": 5,
            "ref_hit_ratio": 0.2, "lookup_hit_ratio": 0.2, "bytes_in": 0, "bytes_out": 0, "evictions": 0,
            "deletes": 0, "invalidations": 0, "peak_bytes": 0} for t, cap in (("gpu", 1000), ("ssd", 2000))}


def hand_trace(path):
    op, obj, tier, key = zip(*EVENTS)
    n = len(EVENTS)
    b = make_batch(ts_ns=np.arange(n), op=np.array(op), obj_id=np.array(obj, np.uint64), tier=np.array(tier),
                   nbytes=np.full(n, 1000), ntokens=np.full(n, 4), content_key=np.array(key, np.uint64))
    return write_trace(path, b, TraceMeta(tier_stats=CAPS))


def by_tier(s):
    return {r["tier"]: r for r in s["content"]["tiers"]}


def test_hand_counted(tmp_path):
    """References A(create) B(create) A(load ssd) A(hit gpu) B(create o3).
    GPU: all 5 reach it, 1 policy hit; keys A B A A B in 1 slot: Belady A m, B m, A m, A h, B m = 1 hit; unbounded
    3 (A, A, B seen before). Stack distance by key: A 1 (B between), A 0, B 1 -> p50 1; by object o1 o2 o1 o1 o3:
    o1 1, o1 0 -> p50 0 (nearest rank of [0, 1]), 2 reuses. Writes: commit o1, commit o2, persist o1 (A again,
    o1 again), commit o3 (B again): 2 of 4 re-written by key, 1 of 4 by object.
    SSD: the 4 references the GPU did not serve, keys A B A B, 1 load; 2 slots: Belady A m, B m, A h, B h = 2;
    unbounded 2. Writes o1 A, o2 B, o3 B: 1 of 3 by key (B), none by object."""
    s = trace_stats(hand_trace(tmp_path / "h.parquet"))
    c = s["content"]
    assert (c["content_keys"], c["references"], c["distinct_keys"], c["distinct_objects"]) == (True, 5, 2, 3)
    g, d = by_tier(s)["gpu"], by_tier(s)["ssd"]
    assert [r["tier"] for r in c["tiers"]] == ["gpu", "ssd"]
    assert (g["accesses"], g["policy_hits"], g["slots"], g["belady_hits"], g["unbounded_hits"]) == (5, 1, 1, 1, 3)
    assert g["slot_sizing"] == "exact"
    assert (g["policy_hit_ratio_per_access"], g["belady_hit_ratio_per_access"]) == (0.2, 0.2)
    assert g["unbounded_hit_ratio_per_access"] == pytest.approx(3 / 5)
    assert (g["reuse_distance_keys_p50"], g["reuse_distance_keys_p90"], g["key_reuses"]) == (1, 1, 3)
    assert (g["reuse_distance_objects_p50"], g["reuse_distance_objects_p90"], g["object_reuses"]) == (0, 1, 2)
    assert (g["writes"], g["rewritten_writes"], g["rewritten_writes_by_object"]) == (4, 2, 1)
    assert (g["rewritten_share_of_writes"], g["rewritten_share_of_writes_by_object"]) == (0.5, 0.25)
    assert (d["accesses"], d["policy_hits"], d["slots"], d["belady_hits"], d["unbounded_hits"]) == (4, 1, 2, 2, 2)
    assert d["policy_hit_ratio_per_access"] == 0.25 and d["policy_hit_ratio_per_reference"] == 0.2
    assert d["belady_hit_ratio_per_access"] == 0.5 and d["belady_hit_ratio_per_reference"] == 0.4
    assert (d["writes"], d["rewritten_writes"], d["rewritten_writes_by_object"]) == (3, 1, 0)
    assert d["rewritten_share_of_writes"] == pytest.approx(1 / 3)


def test_v1_trace_gives_object_figures_only(tmp_path):
    """The same events without the content_key column: key-based fields None, object-based ones unchanged."""
    hand_trace(tmp_path / "h.parquet")
    as_v1(tmp_path / "h.parquet", tmp_path / "v1.parquet")
    s1, s2 = trace_stats(tmp_path / "v1.parquet"), trace_stats(tmp_path / "h.parquet")
    c = s1["content"]
    assert c["content_keys"] is False and "no content_key" in c["note"]
    assert c["distinct_keys"] is None and c["references_without_key"] is None
    for r1, r2 in zip(c["tiers"], s2["content"]["tiers"]):
        for k, v in r1.items():
            if "key" in k or k.startswith(("belady", "unbounded", "slot")) or k in ("rewritten_writes",
                                                                                  "rewritten_share_of_writes"):
                assert v is None, k
            else:
                assert v == r2[k], k
    res = ok(kvbed("trace", "stats", tmp_path / "v1.parquet"))
    assert res.output.count("v1 trace: no content_key") == 1 and "content by tier" in res.output


def slow_belady(keys, slots):
    cache: set = set()
    hits = 0
    for i, k in enumerate(keys):
        if k in cache:
            hits += 1
            continue
        if len(cache) == slots:
            def nxt(x):
                return next((j for j in range(i + 1, len(keys)) if keys[j] == x), len(keys) + 1)
            cache.remove(max(sorted(cache), key=nxt))
        cache.add(k)
    return hits


def slow_stack(seq):
    last, out = {}, []
    for i, x in enumerate(seq):
        if x in last:
            out.append(len(set(seq[last[x] + 1:i]) - {x}))
        last[x] = i
    return out


def test_tier_simulated_trace(tmp_path):
    """Policy ratios per reference are the simulator's ref_hit_ratio; references are its chunk references;
    Belady, unbounded hits and reuse distances recounted the slow way on each tier's key sequence."""
    path = tmp_path / "t.parquet"
    simulate_to_file(random_trace(5, n=150), small_params(), path, TraceMeta())
    s = trace_stats(path)
    ts, c = s["meta"]["tier_stats"], s["content"]
    assert c["references"] == ts["all"]["chunk_references"] and c["references_not_in_trace"] == 0
    b, _ = read_trace(path)
    ref = np.isin(b["op"], [OPS.index(o) for o in ("hit", "load", "create", "recover")])
    served = np.where(np.isin(b["op"], [OPS.index("hit"), OPS.index("load")]), b["tier"], len(TIERS))[ref]
    keys, nb = b["content_key"][ref], b["nbytes"][ref]
    for r in c["tiers"]:
        t = TIERS.index(r["tier"])
        assert r["policy_hit_ratio_per_reference"] == pytest.approx(ts[r["tier"]]["ref_hit_ratio"])
        k = [int(x) for x in keys[served >= t]]
        slots = ts[r["tier"]]["capacity_bytes"] // int(nb[served >= t].max())
        assert r["slots"] == slots and r["accesses"] == len(k) > 50
        assert r["belady_hits"] == slow_belady(k, slots)
        assert r["unbounded_hits"] == len(k) - len(set(k)) == r["key_reuses"]
        d = sorted(slow_stack(k))
        assert r["reuse_distance_keys_p50"] == d[int(np.ceil(0.5 * len(d))) - 1]
        assert r["policy_hits"] <= r["unbounded_hits"]


def test_json_and_table(tmp_path):
    p = hand_trace(tmp_path / "h.parquet")
    s = json.loads(ok(kvbed("trace", "stats", p, "--json")).output)
    g = by_tier(s)["gpu"]
    assert g["policy_hit_ratio_per_access"] == 0.2 and g["rewritten_share_of_writes"] == 0.5
    out = ok(kvbed("trace", "stats", p)).output
    assert "content by tier" in out and "v1 trace" not in out


def test_next_uses_of_a_subsequence_are_numpys():
    """The kernel's next uses of a masked sub-sequence (dense ids from a hash table, key 0 never repeating) are
    kvreplay.belady.next_use's (a numpy sort) on the sub-sequence itself, with key 0 made unique."""
    from kvreplay.belady import next_use
    from kvreplay.contentstats import dense_ids, next_uses

    rng = np.random.default_rng(7)
    keys = rng.integers(0, 50, 20000).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # 0 stays 0
    ids, n = dense_ids(keys)
    assert n == len(np.unique(keys[keys != 0])) and (ids[keys == 0] == -1).all()
    for mask in (np.ones(len(keys), bool), rng.random(len(keys)) < 0.3):
        sub = keys[mask].astype(np.int64)
        sub[sub == 0] = -1 - np.arange((sub == 0).sum())  # key 0: every access its own key
        assert np.array_equal(next_uses(ids, n, mask), next_use(sub))


def test_no_capacity_recorded_gives_no_belady(tmp_path):
    """A trace without tier statistics (a capture, a hand-made trace): no slots, so no Belady figure; the unbounded
    cache and everything else still count (the hand trace's 3 and 2 unbounded hits)."""
    op, obj, tier, key = zip(*EVENTS)
    n = len(EVENTS)
    b = make_batch(ts_ns=np.arange(n), op=np.array(op), obj_id=np.array(obj, np.uint64), tier=np.array(tier),
                   nbytes=np.full(n, 1000), ntokens=np.full(n, 4), content_key=np.array(key, np.uint64))
    t = by_tier(trace_stats(write_trace(tmp_path / "n.parquet", b, TraceMeta())))
    assert t["gpu"]["belady_hits"] is None and t["gpu"]["slots"] is None
    assert t["gpu"]["slot_sizing"] == "capacity not recorded in the trace"
    assert (t["gpu"]["unbounded_hits"], t["ssd"]["unbounded_hits"]) == (3, 2)
    assert t["gpu"]["rewritten_writes"] == 2
