"""Tier simulator: event-for-event agreement with an independent plain-Python model,
hand-computed small cases, eviction policies vs textbook references, invariants."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from kvreplay.requests import RequestTrace
from kvreplay.schema import KIND, OP, OPS, TIER, TIERS, EventBatch, TraceMeta, TraceReader
from kvreplay.tiers import simulate
from kvreplay.tiers import kernel as K
from kvreplay.tiers import state as TS
from kvreplay.tiers.features import PrefixDepth, session_turns
from kvreplay.tiers.sim import simulate_to_file
from kvreplay.validate import validate_trace
from kvbed.core.errors import KvbedError

from tests.support.tier_reference import (OBJ, T, RefSim, as_tuples, chunks_of, random_trace, run,
                                         small_params)


@pytest.mark.parametrize("write_policy", ["write-through", "spill"])
@pytest.mark.parametrize("seed", [1, 2])
def test_events_match_python_reference(seed, write_policy):
    reqs = random_trace(seed)
    params = small_params(write_policy=write_policy)
    b, res = run(reqs, params)
    ref = RefSim(params, reqs)
    ref.run(*chunks_of(reqs))
    got = as_tuples(b)
    assert len(got) == len(ref.events)
    first_diff = next((i for i, (a, e) in enumerate(zip(got, ref.events)) if a != e), None)
    assert first_diff is None, (first_diff, got[first_diff - 2:first_diff + 3], ref.events[first_diff - 2:first_diff + 3])
    # hit ratios: per tier, hits / lookups that reached the tier, recomputed from the reference events
    c = collections.Counter((op, tier) for op, tier, _ in ref.events)
    ts = res.tier_stats
    assert ts["gpu"]["hits"] == c[("hit", "gpu")]
    assert ts["cpu"]["hits"] == c[("load", "cpu")]
    assert ts["ssd"]["hits"] == c[("load", "ssd")]
    # ... and from the reference's own lookups, and its bytes in (commit/recover/persist) and out (load)
    for t in ref.tiers:
        row = ts[TIERS[t]]
        assert (row["lookups"], row["hits"]) == (ref.lookups[t], ref.hits[t]), TIERS[t]
        assert row["lookup_hit_ratio"] == pytest.approx(ref.hits[t] / ref.lookups[t]), TIERS[t]
        # every chunk of every request is a reference, whether or not a lookup reached the tier
        refs = sum(len(k) for k in chunks_of(reqs)[0])
        assert (row["chunk_references"], row["ref_hit_ratio"]) == (refs, pytest.approx(ref.hits[t] / refs))
        assert (row["bytes_in"], row["bytes_out"]) == (ref.bytes_in[t], ref.bytes_out[t]), TIERS[t]
        assert 0 < row["ref_hit_ratio"] < row["lookup_hit_ratio"] < 1 and row["bytes_in"] > 0
    assert ts["cpu"]["bytes_out"] > 0 and ts["ssd"]["bytes_out"] > 0 and ts["gpu"]["bytes_out"] == 0
    assert ts["ssd"]["persists"] == c[("persist", "ssd")]
    assert ts["ssd"]["deletes"] + ts["ssd"]["evictions"] == c[("delete", "ssd")] + c[("evict", "ssd")]
    # the trace stresses every tier: evictions everywhere, reuse from every tier
    for tier in ("gpu", "cpu", "ssd"):
        assert c[("evict", tier)] + c[("delete", tier)] > 0
    assert c[("hit", "gpu")] > 0 and c[("load", "cpu")] > 0 and c[("load", "ssd")] > 0


def test_hand_computed_case():
    """Three requests, GPU holds 2 objects, CPU 3, SSD 10 (LRU, write-through). Worked by hand:

    r0 prompt A B : create/commit A (obj 1), write-through cpu+ssd; same for B (obj 2)
    r1 prompt A C : A hits in GPU; C is new (obj 3): GPU is full (A most recent, B least) -> B evicted
                    from GPU (copies remain in cpu/ssd: evict); C persisted to cpu, ssd
    r2 prompt A B : A hits; B is not in GPU: load from cpu (fastest lower tier), GPU full -> evict the
                    LRU entry, C (A was just used); B persisted into GPU
    """
    reqs = RequestTrace(arrival_ns=np.array([0, 10**9, 2 * 10**9]), input_tokens=np.array([2 * T] * 3),
                        output_tokens=np.array([1, 1, 1]), block_offsets=np.array([0, 2, 4, 6]),
                        block_ids=np.array([1, 2, 1, 3, 1, 2]), block_tokens=T)
    params = small_params(gpu_bytes=2 * OBJ, cpu_bytes=3 * OBJ, ssd_bytes=10 * OBJ)
    b, res = run(reqs, params)
    assert as_tuples(b) == [
        ("create", "gpu", 1), ("commit", "gpu", 1), ("persist", "cpu", 1), ("persist", "ssd", 1),
        ("create", "gpu", 2), ("commit", "gpu", 2), ("persist", "cpu", 2), ("persist", "ssd", 2),
        ("hit", "gpu", 1),
        ("evict", "gpu", 2), ("create", "gpu", 3), ("commit", "gpu", 3), ("persist", "cpu", 3), ("persist", "ssd", 3),
        ("hit", "gpu", 1),
        ("load", "cpu", 2), ("evict", "gpu", 3), ("persist", "gpu", 2),
    ]
    # parent = previous chunk of the prompt
    par = dict(zip(b["obj_id"].tolist(), b["parent_id"].tolist()))
    assert par == {1: 0, 2: 1, 3: 1}
    # timing: prefill of one 16-token chunk at 100k tokens/s = 160 us; a 2 MiB load from CPU at 100 GB/s
    ts = b["ts_ns"]
    assert ts[1] - ts[0] == 160_000
    assert ts[17] - ts[15] == int(OBJ * 1e9 / 100e9)
    # lookups stop at the first chunk no tier holds: r0 looks up A only (miss), r1 A (hit) and C
    # (miss), r2 A (hit) and B (GPU miss, CPU hit): GPU 2 hits of 5 lookups, CPU 1 of 3 (A, C, B); of the
    # 6 chunk references, GPU served 2, CPU 1
    assert res.tier_stats["gpu"]["lookup_hit_ratio"] == pytest.approx(2 / 5)
    assert res.tier_stats["cpu"]["lookup_hit_ratio"] == pytest.approx(1 / 3)
    assert res.tier_stats["gpu"]["ref_hit_ratio"] == pytest.approx(2 / 6)
    assert res.tier_stats["cpu"]["ref_hit_ratio"] == pytest.approx(1 / 6)
    assert res.tier_stats["ssd"]["ref_hit_ratio"] == 0.0 and res.tier_stats["ssd"]["lookups"] == 2
    assert res.tier_stats["all"]["chunk_hit_ratio"] == pytest.approx(3 / 6)
    assert (res.tier_stats["all"]["hit_chunks"], res.tier_stats["all"]["chunk_references"]) == (3, 6)


def test_last_copy_is_delete_and_ids_never_reused():
    reqs = RequestTrace(arrival_ns=np.arange(4) * 10**9, input_tokens=np.array([T] * 4),
                        output_tokens=np.ones(4, int), block_offsets=np.arange(5), block_ids=np.array([1, 2, 3, 1]),
                        block_tokens=T)
    # GPU only, room for two objects: A, B, then C evicts A (its last copy -> delete); A again is a new object
    params = small_params(gpu_bytes=2 * OBJ, cpu_bytes=0, ssd_bytes=0)
    b, _ = run(reqs, params)
    assert as_tuples(b) == [
        ("create", "gpu", 1), ("commit", "gpu", 1), ("create", "gpu", 2), ("commit", "gpu", 2),
        ("delete", "gpu", 1), ("create", "gpu", 3), ("commit", "gpu", 3),
        ("delete", "gpu", 2), ("create", "gpu", 4), ("commit", "gpu", 4),
    ]


def _cache_trace(keys: list[int]) -> RequestTrace:
    n = len(keys)
    return RequestTrace(arrival_ns=np.arange(n) * 1000, input_tokens=np.full(n, T), output_tokens=np.ones(n, int),
                        block_offsets=np.arange(n + 1), block_ids=np.array(keys), block_tokens=T)


def ref_hits(policy: str, keys: list[int], cap: int) -> int:
    """Textbook single-cache references (unit-size objects), one key per request."""
    return ref_cache(policy, [[k] for k in keys], cap)[0]


def ref_cache(policy: str, requests: list[list[int]], cap: int, pinning: bool = True) -> tuple[int, int]:
    """One cache of ``cap`` unit-size objects under the textbook policy, fed every key of every request in
    order; (hits, evictions). With ``pinning``, the keys of the running request seen so far are passed over by
    eviction where they stand (S3-FIFO: the other queue if the one it evicts from holds only those); if every
    key is one of them, the policy evicts as if none were."""
    hits = evictions = 0
    pinned: set = set()
    q: collections.OrderedDict = collections.OrderedDict()  # lru, fifo, clock: key -> referenced bit; first = oldest
    small: collections.OrderedDict = collections.OrderedDict()  # s3fifo (Yang et al. SOSP'23, Algorithm 1)
    main: collections.OrderedDict = collections.OrderedDict()
    ghost: collections.OrderedDict = collections.OrderedDict()
    freq: dict = {}
    s_cap, g_cap = 0.1 * cap, 0.9 * cap

    def first(d, pins):
        return next((k for k in d if k not in pins), None)

    def evict_one():
        pins = pinned if any(k not in pinned for k in (*q, *small, *main)) else set()
        if policy in ("lru", "fifo"):
            del q[first(q, pins)]
            return
        if policy == "clock":
            while True:
                k = first(q, pins)
                bit = q.pop(k)
                if not bit:
                    return
                q[k] = 0
        while True:  # s3fifo
            use_small = small and (len(small) >= s_cap or not main)
            d = small if use_small else main
            k = first(d, pins)
            if k is None:
                d = main if use_small else small
                k = first(d, pins)
            del d[k]
            if d is small:
                if freq[k] >= 2:
                    main[k] = True
                    freq[k] = 0  # enters the main queue unreferenced
                    continue
                ghost[k] = True
                while len(ghost) > g_cap:
                    ghost.popitem(last=False)
                return
            if freq[k] > 0:
                freq[k] -= 1
                main[k] = True
                continue
            return

    for keys in requests:
        pinned = set()
        for k in keys:
            if pinning:
                pinned.add(k)
            if k in q or k in small or k in main:
                hits += 1
                if policy == "lru":
                    q.move_to_end(k)
                elif policy == "clock":
                    q[k] = 1
                else:
                    freq[k] = min(freq.get(k, 0) + 1, 3)
                continue
            while len(q) + len(small) + len(main) >= cap:
                evict_one()
                evictions += 1
            if policy != "s3fifo":
                q[k] = 0
            elif k in ghost:
                del ghost[k]
                main[k] = True
            else:
                small[k] = True
            freq[k] = 0
    return hits, evictions


@pytest.mark.parametrize("policy", ["lru", "fifo", "clock", "s3fifo"])
def test_eviction_policy_matches_textbook_reference(policy):
    rng = np.random.default_rng(7)
    # Zipf-like popularity with a one-off scan in the middle (what S3-FIFO resists)
    keys = (rng.zipf(1.3, 3000) % 400).tolist() + list(range(1000, 1300)) + (rng.zipf(1.3, 3000) % 400).tolist()
    cap = 40
    b, res = run(_cache_trace(keys), small_params(gpu_bytes=cap * OBJ, cpu_bytes=0, ssd_bytes=0, gpu_policy=policy))
    assert res.tier_stats["gpu"]["hits"] == ref_hits(policy, keys, cap)


def _gpu_only(reqs: RequestTrace, cap: int, policy: str, **kw):
    _, res = run(reqs, small_params(gpu_bytes=cap * OBJ, cpu_bytes=0, ssd_bytes=0, gpu_policy=policy, **kw))
    g = res.tier_stats["gpu"]
    # every chunk reference is a hit (its prefix) or found resident after the prefix broke, or made anew
    return res.counters["chunk_references"] - g["computed"], g["evictions"] + g["deletes"], g


def _requests(chunks: list[list[int]]) -> RequestTrace:
    n = len(chunks)
    return RequestTrace(arrival_ns=np.arange(n) * 10**9, input_tokens=np.array([len(c) * T for c in chunks]),
                        output_tokens=np.ones(n, int), block_offsets=np.cumsum([0] + [len(c) for c in chunks]),
                        block_ids=np.concatenate(chunks), block_tokens=T)


def _libcachesim_hits(policy: str, keys: list[int], cap: int) -> int:
    import libcachesim as lcs

    cache = {"lru": lcs.LRU, "fifo": lcs.FIFO, "clock": lcs.Clock}[policy](cap)
    return sum(bool(cache.get(lcs.Request(obj_size=1, obj_id=k))) for k in keys)


def test_pinned_chunk_is_passed_over_the_issue_case():
    """FIFO, a tier of 2 objects, requests [1], [2], [1, 3], [1]. Worked by hand: 1 and 2 are made; r2 hits 1
    (pinned) and makes 3: the tier is full, its oldest entry is 1, in use, so it is passed over and 2 goes
    (1 stays the oldest); r3 hits 1: 2 hits of 5 chunk references. A plain FIFO evicts 1 for 3 and misses
    it in r3: 1 hit, libCacheSim's answer on the same key sequence."""
    reqs = _requests([[1], [2], [1, 3], [1]])
    hits, ev, g = _gpu_only(reqs, 2, "fifo")
    assert (hits, ev, g["hits"], g["evictions_past_pinned"]) == (2, 1, 2, 1)
    assert g["ref_hit_ratio"] == pytest.approx(2 / 5) and g["lookup_hit_ratio"] == pytest.approx(2 / 5)
    plain_hits, plain_ev, g = _gpu_only(reqs, 2, "fifo", pinning=False)
    assert (plain_hits, plain_ev, g["evictions_past_pinned"]) == (1, 2, 0)
    assert plain_hits == _libcachesim_hits("fifo", [1, 2, 1, 3, 1], 2)


def test_pinned_chunk_keeps_its_place():
    """FIFO, 3 objects, requests [1], [2], [3], [1, 4], [5], [1]. r3 hits 1 (pinned, the oldest) and makes 4:
    1 is passed over where it stands, 2 goes. r4 makes 5: 1 is no longer in use and still the oldest, so it
    goes, and r5 misses it. (Moving the pinned 1 to the head, as the kernel once did, gave it a new lifetime:
    r4 evicted 3 and r5 hit 1.)"""
    hits, ev, g = _gpu_only(_requests([[1], [2], [3], [1, 4], [5], [1]]), 3, "fifo")
    assert (hits, ev, g["evictions_past_pinned"]) == (1, 3, 1)


@pytest.mark.parametrize("policy", ["lru", "fifo", "clock", "s3fifo"])
def test_pinning_matches_the_textbook_reference_with_pins(policy):
    """Multi-chunk requests on one small tier: pins matter (and every key in use, at times). Hits and
    evictions equal the textbook policy with the pin rule; without pinning, the plain textbook policy."""
    reqs = random_trace(11, n=500, max_chunks=12, partial=0.0)
    chunks, _ = chunks_of(reqs)
    for cap in (5, 16, 40):
        for pinning in (True, False):
            got = _gpu_only(reqs, cap, policy, pinning=pinning)
            assert got[:2] == ref_cache(policy, chunks, cap, pinning=pinning), (cap, pinning)
            assert (got[2]["evictions_past_pinned"] > 0) == (pinning and policy != "lru"), (cap, pinning)


def test_s3fifo_resists_the_scan_better_than_lru():
    rng = np.random.default_rng(3)
    hot = (rng.zipf(1.2, 4000) % 300).tolist()
    keys = hot[:2000] + list(range(5000, 7000)) + hot[2000:]
    lru = ref_hits("lru", keys, 50)
    s3 = ref_hits("s3fifo", keys, 50)
    assert s3 > lru  # sanity of the reference itself on a scan-heavy stream


def test_traces_validate_for_every_configuration(tmp_path):
    reqs = random_trace(5, n=300)
    reqs.tenants = ["a", "b"]
    reqs.tenant = (np.arange(reqs.n) % 2).astype(np.int32)
    reqs.scopes = ["s0", "s1"]
    reqs.scope = (np.arange(reqs.n) >= 150).astype(np.int32)
    reqs.inv_ts_ns = np.array([reqs.arrival_ns[150] + 1])
    reqs.inv_scope = np.array([0], np.int32)
    configs = [
        dict(),
        dict(write_policy="spill", cxl_bytes=10 * OBJ),
        dict(ssd_kind="quantized", gpu_policy="s3fifo", cpu_policy="clock", ssd_policy="fifo"),
        dict(ssd_kind_tenants="a=compressed", write_policy="spill", promote_on_load=False),
        dict(cpu_bytes=0, ssd_policy="s3fifo"),
    ]
    for i, kw in enumerate(configs):
        path = tmp_path / f"t{i}.parquet"
        res = simulate_to_file(reqs, small_params(**kw), path, TraceMeta())
        rep = validate_trace(path)
        assert rep.ok, (kw, rep.counts, rep.first[:3])
        b = TraceReader(path).read_all()
        ops = collections.Counter(OPS[o] for o in b["op"])
        assert ops["invalidate"] > 0
        assert res.events == b.n
        if "ssd_kind" in kw or "ssd_kind_tenants" in kw:
            assert ops["transform"] > 0
            derived = b["kind"] != KIND["exact"]
            assert derived.any()
            # derived copies live only on the SSD, at the exact object's size times the ratio
            on = b["tier"][derived & (b["op"] == OP["persist"])]
            assert set(on.tolist()) == {TIER["ssd"]}


def test_copy_lifecycle_conventions():
    """Per (object, tier): a copy starts with commit/recover/persist and ends with exactly one
    evict/delete/invalidate; evict leaves other copies, delete removes the last one."""
    reqs = random_trace(11, n=300)
    b, _ = run(reqs, small_params(write_policy="spill", cxl_bytes=6 * OBJ))
    where: dict[int, set] = collections.defaultdict(set)
    for op, t, o in as_tuples(b):
        if op in ("commit", "recover", "persist"):
            assert t not in where[o]
            where[o].add(t)
        elif op in ("evict", "delete", "invalidate"):
            assert t in where[o]
            where[o].discard(t)
            assert (op == "delete") == (not where[o])
        elif op in ("load", "hit"):
            assert t in where[o]


def test_prefix_depth_and_turns():
    """With a GPU that never evicts, chunk j of a prompt is created iff its key is new, and the
    parent chain of the created object has length j (depth = chunk index in the prompt)."""
    reqs = random_trace(3, n=80)
    b, _ = run(reqs, small_params(gpu_bytes=2000 * OBJ))
    depth = PrefixDepth()(b)
    got = depth[b["op"] == OP["create"]].tolist()
    keys, _ = chunks_of(reqs)
    seen: set = set()
    expected = []
    for ks in keys:
        for j, k in enumerate(ks):
            if k not in seen:
                seen.add(k)
                expected.append(j)
    assert got == expected
    assert max(expected) >= 4
    # quantized SSD copies and the exact objects rebuilt from them (both made by transform) keep the
    # depth of their source
    b, _ = run(reqs, small_params(ssd_kind="quantized", gpu_bytes=4 * OBJ, cpu_bytes=0))
    depth = PrefixDepth()(b)
    d_of = dict(zip(b["obj_id"].tolist(), depth.tolist()))
    tr = np.flatnonzero(b["op"] == OP["transform"])
    rebuilt = tr[b["kind"][tr] == KIND["exact"]]
    assert len(rebuilt) > 10
    for i in tr:
        assert d_of[int(b["obj_id"][i])] == d_of[int(b["parent_id"][i])]
    turns = session_turns(np.array([5, 7, 7, 9, 11, -1]), np.array([1, 1, 1, 2, 1, -1]))
    assert turns.tolist() == [0, 1, 1, 0, 2, -1]


def test_bad_parameters():
    reqs = random_trace(1, n=5)
    with pytest.raises(KvbedError, match="smaller than one object"):
        run(reqs, small_params(ssd_bytes=OBJ - 1))
    with pytest.raises(KvbedError, match="_policy: expected one of clock, fifo, lru, s3fifo, got 'arc'"):
        run(reqs, small_params(cpu_policy="arc"))
    with pytest.raises(KvbedError, match="model: expected one of llama-3-8b, .*, got"):
        run(reqs, small_params(model="gpt-5"))
    with pytest.raises(KvbedError, match="write_policy: expected one of write-through, spill, got 'write-back'"):
        run(reqs, small_params(write_policy="write-back"))
    with pytest.raises(KvbedError, match="tenant=kind"):
        run(reqs, small_params(ssd_kind_tenants="oops"))


@pytest.mark.parametrize("kw", [
    dict(gpu_policy="s3fifo", ssd_policy="s3fifo", cxl_bytes=5 * OBJ),
    dict(write_policy="spill", ssd_kind="quantized", gpu_policy="s3fifo", cxl_bytes=5 * OBJ),
    dict(ssd_kind="compressed", ttl_s=0.3),
])
def test_kernel_state_is_consistent_after_a_run(kw):
    reqs = random_trace(9, n=300)
    _, res = run(reqs, small_params(**kw))
    S, Q, OA, inst = res.state["S"], res.state["Q"], res.state["OA"], res.state["inst"]
    held = np.zeros(len(OA), np.int64)
    for t in range(K.NT):
        for q in range(3):
            m = S[t, :, K.S_W] == q + 1
            assert Q[t, q, K.QN] == m.sum()
            assert Q[t, q, K.QB] == S[t, m, K.S_CB].sum()
        assert Q[t, K.QS, K.QB] + Q[t, K.QM, K.QB] <= res.state["cap"][t]
        # a present entry holds an object, a ghost or absent one none
        present = (S[t, :, K.S_W] == TS.W_SMALL) | (S[t, :, K.S_W] == TS.W_MAIN)
        assert ((S[t, :, TS.S_OI] != 0) == present).all()
        np.add.at(held, S[t, present, TS.S_OI], 1)
    # an object's copy count is the number of tiers holding it; a key's live exact object has a copy
    assert (held == OA[:, TS.OA_COPIES]).all()
    live = inst[inst != 0]
    assert (OA[live, TS.OA_COPIES] > 0).all() and (OA[live, TS.OA_KIND] == 0).all()


def test_ttl_retention_deletes_every_copy():
    """Tenant 'short' keeps KV for 10 s after its last use, 'long' has no TTL. Worked by hand:
    t=0 A (short) created -> gpu, cpu, ssd; t=5 s A hit (deadline moves to 15 s); t=8 s B (long)
    created; t=30 s: A expired at 15 s -> one delete per tier at 15 s; B stays; A is made again as obj 3."""
    S = 10**9
    reqs = RequestTrace(arrival_ns=np.array([0, 5 * S, 8 * S, 30 * S]), input_tokens=np.full(4, T),
                        output_tokens=np.ones(4, int), block_offsets=np.arange(5), block_ids=np.array([1, 1, 2, 1]),
                        block_tokens=T, tenant=np.array([0, 0, 1, 0]), tenants=["short", "long"])
    b, res = run(reqs, small_params(ttl_tenants="short=10"))
    ev = [(int(t), op, tier, o) for t, (op, tier, o) in zip(b["ts_ns"], as_tuples(b))]
    exp = [e for e in ev if e[1] == "delete"]
    # obj 3 (made at 30 s, committed 160 us later) expires after the last request: pending deadlines
    # are all played out at the end, so every short-lived object ends inside the trace
    t3 = 30 * S + 160_000 + 10 * S
    assert exp == [(15 * S, "delete", "gpu", 1), (15 * S, "delete", "cpu", 1), (15 * S, "delete", "ssd", 1),
                   (t3, "delete", "gpu", 3), (t3, "delete", "cpu", 3), (t3, "delete", "ssd", 3)]
    assert [e[1:] for e in ev if e[0] >= 30 * S][:2] == [("create", "gpu", 3), ("commit", "gpu", 3)]
    assert res.counters["expired_objects"] == 2
    assert res.tier_stats["ssd"]["expirations"] == 2
    # without a TTL nothing is deleted (every tier holds all three objects)
    b2, _ = run(reqs, small_params())
    assert not any(op == "delete" for op, _, _ in as_tuples(b2))


def test_tiny_event_buffer_gives_the_same_stream():
    """The kernel stops and resumes whenever its buffer fills (between requests, inside an
    invalidation, between expiries): the stream must not depend on where it stopped."""
    reqs = random_trace(21, n=300)
    reqs.tenants, reqs.tenant = ["a", "b"], (np.arange(reqs.n) % 2).astype(np.int32)
    reqs.scopes, reqs.scope = ["s0", "s1"], (np.arange(reqs.n) >= 200).astype(np.int32)
    reqs.inv_ts_ns, reqs.inv_scope = np.array([reqs.arrival_ns[200]]), np.array([0], np.int32)
    params = small_params(ttl_tenants="a=0.3", write_policy="spill", cxl_bytes=4 * OBJ)
    big, _ = run(reqs, params)
    parts: list[EventBatch] = []
    simulate(reqs, params, parts.append, buffer_events=64)
    assert len(parts) > 20
    small = EventBatch.concat(parts)
    for col in big:
        assert np.array_equal(big[col], small[col]), col


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), gpu=st.integers(6, 12), cpu=st.integers(0, 20), ssd=st.integers(0, 40),
       spill=st.booleans(), promote=st.booleans())
def test_property_lru_matches_reference(seed, gpu, cpu, ssd, spill, promote):
    """Any LRU stack (tiers may be absent), either write policy: event-for-event equal to the
    reference model, and the produced stream keeps the copy conventions."""
    reqs = random_trace(seed, n=60)
    params = small_params(gpu_bytes=gpu * OBJ, cpu_bytes=cpu * OBJ, ssd_bytes=ssd * OBJ,
                          write_policy="spill" if spill else "write-through", promote_on_load=promote)
    b, _ = run(reqs, params)
    ref = RefSim(params, reqs)
    ref.run(*chunks_of(reqs))
    assert as_tuples(b) == ref.events
    where: dict[int, set] = collections.defaultdict(set)
    for op, t, o in ref.events:
        if op in ("commit", "recover", "persist"):
            assert t not in where[o]
            where[o].add(t)
        elif op in ("evict", "delete"):
            where[o].discard(t)
            assert (op == "delete") == (not where[o])
    assert np.all(np.diff(b["ts_ns"]) >= 0)


def _chunk_hashes(off, ids, inp, scope):
    from kvreplay.tiers.chunking import _chunk_hashes as ch, _count_chunks

    o = _count_chunks(off, inp, 16, 64)
    return ch(off, ids, inp, scope.astype(np.int64), np.zeros(len(inp), np.uint64), 16, 64, o)[0]


def test_chunking_across_block_sizes():
    """Object keys identify the token prefix up to their end, for objects smaller or larger than the
    source blocks; the last object may be partial; tokens past the last block id are not cached."""
    from kvreplay.tiers.chunking import chunk_requests

    # three requests over 16-token blocks: r1 shares r0's first 5 blocks, r2 = r0 with 40 tokens
    ids = [1, 2, 3, 4, 5, 6, 7, 8] + [1, 2, 3, 4, 5, 9, 10, 11] + [1, 2, 3]
    off = np.array([0, 8, 16, 19])
    inp = np.array([128, 128, 40])
    scope = np.zeros(3, np.int32)
    # objects of 64 tokens = 4 blocks
    o, key, ntok, _, _ = chunk_requests(off, np.array(ids), inp, scope, 16, 64)
    assert o.tolist() == [0, 2, 4, 5]
    assert ntok.tolist() == [64, 64, 64, 64, 40]
    assert key[0] == key[2] and key[1] != key[3]  # first object shared, second differs (block 6 vs 9)
    assert key[4] not in key[:4]  # 40-token partial object is its own key
    # objects of 8 tokens = half a block: two objects per block, keys chain through
    o, key, ntok, _, _ = chunk_requests(off, np.array(ids), inp, scope, 16, 8)
    assert np.diff(o).tolist() == [16, 16, 5]
    assert np.array_equal(key[16:26], key[0:10]) and key[26] != key[10]
    assert np.array_equal(key[32:37], key[0:5])
    # another scope (model/adapter version) makes different KV from the same tokens
    h0 = _chunk_hashes(off, np.array(ids), inp, scope)
    h1 = _chunk_hashes(off, np.array(ids), inp, np.ones(3, np.int32))
    assert not set(h0.tolist()) & set(h1.tolist())
    # input longer than the ids cover: only the covered tokens are cacheable
    o, _, ntok, _, _ = chunk_requests(np.array([0, 2]), np.array([1, 2]), np.array([100]), np.zeros(1, np.int32), 16, 64)
    assert ntok.tolist() == [32]
