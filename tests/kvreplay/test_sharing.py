"""Sharing domains of the tier simulator (``share``: request, session, tenant, global; vLLM's and
SGLang's ``cache_salt``): hit ratios by domain, cross-tenant hits, the per-tenant report, checked
against the event stream and a plain-Python reference."""

from __future__ import annotations

import collections
import json
from dataclasses import replace

import numpy as np
import pytest

from tests.support.cli import kvbed, ok, one_line_error
from kvreplay.requests import RequestTrace
from kvreplay.schema import OP, OPS, TIERS, EventBatch, TraceMeta, TraceReader
from kvreplay.synth import SynthParams, recorded_settings, synthesize
from kvreplay.tiers import TierSimParams, simulate
from kvreplay.tiers.chunking import chunk_requests
from kvreplay.tiers.sharing import SHARE_CHOICES, SHARING, salts
from kvreplay.tiers.sim import params_dict, simulate_to_file
from kvreplay.validate import validate_trace
from tests.support.tier_reference import OBJ, T, RefSim, as_tuples, random_trace, small_params

GiB = 1 << 30
FINEST_FIRST = ("request", "session", "tenant", "global")
#: four tenants (chat, rag on the base model; agent, batch on their own LoRA adapters), multi-turn
#: sessions, and a 1000-token platform preamble before every tenant's system prompt; no adapter updates
SHARED = SynthParams(duration_s=300.0, tenants=4, shared_prompt_tokens=1000, adapter_update_s=0.0)
PREAMBLE_CHUNKS = 1000 // 256  # whole 256-token objects inside the preamble (the 4th holds system prompt too)


def run(reqs: RequestTrace, params: TierSimParams):
    out: list[EventBatch] = []
    res = simulate(reqs, params, out.append, buffer_events=1 << 16)
    return EventBatch.concat(out), res


@pytest.fixture(scope="module")
def shared_trace() -> RequestTrace:
    return synthesize(SHARED)


def test_share_choices_are_the_registry():
    assert sorted(SHARE_CHOICES) == SHARING.names() and SHARE_CHOICES == FINEST_FIRST


def test_domains_nest_inside_tenants():
    """A request without a session is its own domain; equal session ids of two tenants are two domains."""
    reqs = RequestTrace(arrival_ns=np.arange(6), input_tokens=np.full(6, T), output_tokens=np.ones(6, int),
                        block_offsets=np.arange(7), block_ids=np.ones(6, int), block_tokens=T,
                        session_id=np.array([7, 7, -1, -1, 7, 8]), tenant=np.array([0, 0, 0, 0, 1, 1]),
                        tenants=["a", "b"])
    s = {share: salts(reqs, share).tolist() for share in FINEST_FIRST}
    assert s["global"] == [0] * 6  # no salt: the keys of a simulator without sharing domains
    assert s["tenant"] == [1, 1, 1, 1, 2, 2]
    assert len(set(s["request"])) == 6 and 0 not in s["request"]
    ses = s["session"]
    assert ses[0] == ses[1] and len({ses[0], ses[2], ses[3], ses[4], ses[5]}) == 5 and 0 not in ses
    # identical prompts: one key at global, one per tenant / session / request otherwise
    for share, n in (("global", 1), ("tenant", 2), ("session", 5), ("request", 6)):
        _, key, _, _, _ = chunk_requests(reqs.block_offsets, reqs.block_ids, reqs.input_tokens, reqs.scope, T, T,
                                         salt=salts(reqs, share))
        assert len(set(key.tolist())) == n, share


def test_hit_ratios_ordered_request_session_tenant_global(shared_trace):
    """With an ample cache (nothing evicted, no retention limit, no adapter updates), chunk j of a
    request is reused iff an earlier request of its sharing domain had the same prefix through chunk
    j: reuse only stops at the first chunk no tier holds, and every chunk ever made is still held. A
    finer domain's earlier requests are a subset of a coarser one's, so each request reuses a prefix
    at most as long - per request, not just on the whole. The synthetic workload makes every step
    strict: a request alone reuses nothing (its chunk keys are its own), a session reuses its earlier
    turns, a tenant its system prompt across sessions, and global shares the preamble across the two
    base-model tenants."""
    reqs = shared_trace
    base = TierSimParams(gpu_bytes=4 << 40, cpu_bytes=0, ssd_bytes=0)  # request: ~1.1 TiB of chunks
    res = {s: run(reqs, replace(base, share=s))[1] for s in FINEST_FIRST}
    for s, r in res.items():
        g = r.tier_stats["gpu"]
        assert g["evictions"] + g["deletes"] + g["rejected"] == 0, s  # the premise: nothing ever leaves
        assert r.share["hit_chunks"] == r.counters["hit_chunks"] == int(r.state["req_hit"].sum())
    for fine, coarse in zip(FINEST_FIRST, FINEST_FIRST[1:]):
        assert (res[fine].state["req_hit"] <= res[coarse].state["req_hit"]).all(), (fine, coarse)
    ratio = {s: res[s].share["chunk_hit_ratio"] for s in FINEST_FIRST}
    tok = {s: res[s].share["token_hit_ratio"] for s in FINEST_FIRST}
    assert ratio["request"] == 0.0 and tok["request"] == 0.0
    assert 0.0 < ratio["session"] < ratio["tenant"] < ratio["global"]
    assert 0.0 < tok["session"] < tok["tenant"] < tok["global"]
    assert ratio["session"] > 0.5 and ratio["tenant"] > ratio["session"] + 0.05  # sessions, system prompts
    assert res["global"].share["domains"] == 1 and res["tenant"].share["domains"] == 4
    assert res["request"].share["domains"] == reqs.n > res["session"].share["domains"] > 4
    # tenant -> global: only the first request of the second base-model tenant gains, the preamble's
    # whole chunks (everything later finds its own tenant's copy at either setting)
    assert res["global"].share["hit_chunks"] - res["tenant"].share["hit_chunks"] == PREAMBLE_CHUNKS
    # cross-tenant hits: none inside tenants; at global, every base-model request of the tenant that
    # did not make the preamble takes its chunks from the other tenant's objects
    for s in ("request", "session", "tenant"):
        assert res[s].share["cross_tenant_hits"] == 0 and res[s].share["cross_tenant_bytes"] == 0, s
        assert all(t["cross_tenant_hits"] == t["served_other_tenants"] == 0 for t in res[s].share["tenants"].values())
    base_scope = np.flatnonzero(reqs.scope == 0)
    first = reqs.tenant[base_scope[0]]
    others = int((reqs.tenant[base_scope] != first).sum())
    g = res["global"].share
    assert others > 50
    assert g["cross_tenant_hits"] == PREAMBLE_CHUNKS * others
    assert g["cross_tenant_tokens"] == 256 * PREAMBLE_CHUNKS * others
    assert g["cross_tenant_bytes"] == OBJ // T * 256 * PREAMBLE_CHUNKS * others
    assert g["cross_tenant_per_tier"]["gpu"]["chunks"] == g["cross_tenant_hits"]
    maker, taker = reqs.tenants[first], next(reqs.tenants[t] for t in np.unique(reqs.tenant[base_scope]) if t != first)
    assert g["tenants"][taker]["cross_tenant_hits"] == g["cross_tenant_hits"]
    assert g["tenants"][maker]["served_other_tenants"] == g["cross_tenant_hits"]
    # finer domains store duplicates: distinct chunks (and bytes written) grow
    keys = [res[s].share["distinct_chunks"] for s in FINEST_FIRST]
    stored = [res[s].share["bytes_in"] for s in FINEST_FIRST]
    assert keys[0] > keys[1] > keys[2] > keys[3] and stored[0] > stored[1] > stored[2] > stored[3]


def _from_events(reqs: RequestTrace, b: EventBatch) -> dict:
    """The sharing report's numbers recomputed from the event stream alone: a hit or load is
    cross-tenant when the object's tenant (the event's) is not the requesting request's."""
    op, tier = b["op"], b["tier"]
    reuse = (op == OP["hit"]) | (op == OP["load"])
    asker = reqs.tenant[b["request_id"][reuse].astype(np.int64)]
    owner = b["tenant"][reuse]
    cross = asker != owner
    ng = len(reqs.tenants)
    written = np.isin(op, [OP["commit"], OP["recover"], OP["persist"]])
    # copies alive at the end: starts minus ends per (object, tier)
    net: collections.Counter = collections.Counter()
    size, ten = {}, {}
    for o, t, c, nb, g in zip(b["obj_id"].tolist(), tier.tolist(), op.tolist(), b["nbytes"].tolist(),
                              b["tenant"].tolist()):
        if OPS[c] in ("commit", "recover", "persist"):
            net[(o, t)] += 1
        elif OPS[c] in ("evict", "delete", "invalidate"):
            net[(o, t)] -= 1
        size[o], ten[o] = nb, g
    end = np.zeros(ng, np.int64)
    for (o, _), n in net.items():
        end[ten[o]] += n * size[o]
    return {
        "cross_chunks": int(cross.sum()),
        "cross_bytes": int(b["nbytes"][reuse][cross].sum()),
        "cross_tokens": int(b["ntokens"][reuse][cross].sum()),
        "cross_per_tier": np.bincount(tier[reuse][cross], minlength=len(TIERS)),
        "cross_in": np.bincount(asker[cross], minlength=ng),
        "cross_out": np.bincount(owner[cross], minlength=ng),
        "hits_per_tenant": np.bincount(asker, minlength=ng),
        "bytes_in": {t: np.bincount(b["tenant"][written & (tier == i)], weights=b["nbytes"][written & (tier == i)],
                                    minlength=ng).astype(np.int64) for i, t in enumerate(TIERS)},
        "end": end,
    }


@pytest.mark.parametrize("kw", [
    dict(),
    dict(write_policy="spill", cxl_bytes=2 * GiB, ssd_kind_tenants="batch=quantized,rag=compressed",
         gpu_policy="s3fifo"),
])
@pytest.mark.parametrize("share", FINEST_FIRST)
def test_report_matches_the_event_stream(shared_trace, share, kw):
    """Small tiers (every tier evicts; derived SSD copies in the second case): the kernel's per-tier
    and per-tenant counters equal what the events say, and cross-tenant reuse is zero by
    construction in every domain finer than global (each lies inside one tenant)."""
    reqs = shared_trace
    params = TierSimParams(gpu_bytes=1 * GiB, cpu_bytes=4 * GiB, ssd_bytes=16 * GiB, share=share, **kw)
    b, res = run(reqs, params)
    sh, ev = res.share, _from_events(reqs, b)
    assert sh["cross_tenant_hits"] == ev["cross_chunks"]
    assert sh["cross_tenant_bytes"] == ev["cross_bytes"] and sh["cross_tenant_tokens"] == ev["cross_tokens"]
    for t, row in sh["cross_tenant_per_tier"].items():
        assert row["chunks"] == ev["cross_per_tier"][TIERS.index(t)], t
    assert sh["hit_chunks"] == sum(res.tier_stats[t]["hits"] for t in sh["cross_tenant_per_tier"])
    for g, name in enumerate(reqs.tenants):
        row = sh["tenants"][name]
        assert row["hit_chunks"] == ev["hits_per_tenant"][g], name
        assert (row["cross_tenant_hits"], row["served_other_tenants"]) == (ev["cross_in"][g], ev["cross_out"][g])
        assert row["bytes_in_per_tier"] == {t: int(ev["bytes_in"][t][g]) for t in row["bytes_in_per_tier"]}
        assert row["end_bytes"] == ev["end"][g]
    for t in sh["cross_tenant_per_tier"]:  # per tenant, the bytes written add up to the tier's
        assert sum(r["bytes_in_per_tier"][t] for r in sh["tenants"].values()) == res.tier_stats[t]["bytes_in"], t
    assert sh["end_bytes"] == sum(res.tier_stats[t]["end_bytes"] for t in sh["cross_tenant_per_tier"])
    assert res.tier_stats["gpu"]["evictions"] > 1000 and res.tier_stats["ssd"]["evictions"] + \
        res.tier_stats["ssd"]["deletes"] > 100
    if share == "global":
        assert sh["cross_tenant_hits"] > 100 and sh["cross_tenant_bytes"] > 0
    else:
        assert sh["cross_tenant_hits"] == 0 and not ev["cross_in"].any()


def test_small_cache_what_happens(shared_trace, capsys):
    """Small tiers (1 GiB GPU, 4 GiB CPU, 16 GiB SSD, LRU, write-through): no ordering of hit ratios
    is claimed here. What holds at any capacity: a request alone reuses nothing; finer domains make
    more distinct chunks (their keys refine the coarser ones'); only global shares across tenants.
    What was observed when this was written: request 0, session 0.203, tenant 0.623, global 0.622 -
    global slightly *below* tenant although it stores fewer bytes. Upper-tier hits do not refresh a
    chunk's recency in the lower tiers, so different reuse upstream changes which chunks the lower
    LRU tiers keep; with the GPU alone (LRU, 0.5-16 GiB) global stayed above tenant."""
    reqs = shared_trace
    base = TierSimParams(gpu_bytes=1 * GiB, cpu_bytes=4 * GiB, ssd_bytes=16 * GiB)
    res = {s: run(reqs, replace(base, share=s))[1] for s in FINEST_FIRST}
    sh = {s: r.share for s, r in res.items()}
    with capsys.disabled():
        print("\nsharing domain, small tiers: " + ", ".join(
            f"{s} {sh[s]['chunk_hit_ratio']:.4f} ({sh[s]['bytes_in'] / GiB:.0f} GiB in, "
            f"{res[s].tier_stats['gpu']['evictions']} GPU evictions)" for s in FINEST_FIRST))
    assert sh["request"]["chunk_hit_ratio"] == 0.0 and sh["request"]["hit_chunks"] == 0
    assert sh["session"]["chunk_hit_ratio"] > 0.0
    keys = [sh[s]["distinct_chunks"] for s in FINEST_FIRST]
    assert keys == sorted(keys, reverse=True) and keys[0] > keys[-1]
    assert [sh[s]["cross_tenant_hits"] for s in FINEST_FIRST[:3]] == [0, 0, 0]
    assert sh["global"]["cross_tenant_hits"] > 0
    for s in FINEST_FIRST:
        assert res[s].tier_stats["gpu"]["evictions"] > 1000, s  # the premise: the cache is small


def chunks_of(reqs: RequestTrace, share: str):
    off, key, ntok, _, _ = chunk_requests(reqs.block_offsets, reqs.block_ids, reqs.input_tokens, reqs.scope,
                                          reqs.block_tokens, T, salt=salts(reqs, share))
    return ([key[off[r]:off[r + 1]].tolist() for r in range(reqs.n)],
            [ntok[off[r]:off[r + 1]].tolist() for r in range(reqs.n)])


@pytest.mark.parametrize("share", ["session", "tenant"])
def test_salted_keys_events_match_reference(share):
    """A sharing domain changes which chunks are the same key, nothing else: event for event equal
    to the reference model fed the salted keys."""
    reqs = random_trace(4, n=300)
    reqs.tenants, reqs.tenant = ["a", "b", "c"], (np.arange(reqs.n) % 3).astype(np.int32)
    reqs.session_id = np.where(np.arange(reqs.n) % 5 == 0, -1, np.arange(reqs.n) % 7).astype(np.int64)
    params = small_params(share=share)
    b, res = run(reqs, params)
    ref = RefSim(params, reqs)
    ref.run(*chunks_of(reqs, share))
    assert as_tuples(b) == ref.events
    assert res.share["cross_tenant_hits"] == 0
    # the same trace shared globally does reuse across tenants
    assert run(reqs, small_params())[1].share["cross_tenant_hits"] > 0


def test_trace_records_sharing(tmp_path, shared_trace):
    """The trace's metadata records the sharing domain in the settings and its report in tier_stats, for
    every domain (global included: its cross-tenant figures are the leakage surface to compare against)."""
    plain = synthesize(replace(SHARED, shared_prompt_tokens=0))
    cases = [("tenant", shared_trace), ("global", shared_trace), ("global", plain)]
    for i, (share, reqs) in enumerate(cases):
        path = tmp_path / f"t{i}.parquet"
        params = replace(TierSimParams(gpu_bytes=2 * GiB, cpu_bytes=8 * GiB, ssd_bytes=32 * GiB), share=share)
        res = simulate_to_file(reqs, params, path, TraceMeta())
        assert validate_trace(path).ok
        meta = TraceReader(path).meta
        assert meta.generator["tier_sim"]["share"] == share
        assert meta.tier_stats["share"] == json.loads(json.dumps(res.share))
        assert meta.tier_stats["share"]["share"] == share
        assert (meta.tier_stats["share"]["cross_tenant_hits"] > 0) == (share == "global" and reqs is shared_trace)
    assert params_dict(TierSimParams())["share"] == "global"


def test_synth_shared_preamble():
    """shared_prompt_tokens puts one preamble before every tenant's system prompt: the base-model
    tenants' prompts then start with the same block ids, adapter tenants' do not (other KV); 0 (the
    default) generates what kvbed generated before the field existed."""
    plain = synthesize(replace(SHARED, shared_prompt_tokens=0))
    shared = synthesize(SHARED)
    first = shared.block_ids[shared.block_offsets[:-1]]
    base = shared.scope == 0
    assert len(np.unique(shared.tenant[base])) == 2 and len(np.unique(first[base])) == 1
    assert len(np.unique(first[~base])) > 1 and not set(first[~base].tolist()) & set(first[base].tolist())
    pfirst = plain.block_ids[plain.block_offsets[:-1]]
    assert len(np.unique(pfirst[plain.scope == 0])) == 2  # without it each tenant has its own first block
    # the same sessions and turns (a little later: longer prompts take longer), each 1000 tokens longer
    a, b = (np.lexsort((t.turn, t.session_id)) for t in (plain, shared))
    assert np.array_equal(plain.session_id[a], shared.session_id[b]) and np.array_equal(plain.turn[a], shared.turn[b])
    assert (shared.input_tokens[b] - plain.input_tokens[a] == 1000).all()
    assert recorded_settings(replace(SHARED, shared_prompt_tokens=0))["shared_prompt_tokens"] == 0
    assert recorded_settings(SHARED)["shared_prompt_tokens"] == 1000


def test_cli_share(tmp_path):
    out = tmp_path / "s.parquet"
    res = ok(kvbed("trace", "synth", "-o", out, "--duration-s", 120, "--share", "session", "--param",
                   "shared_prompt_tokens=800", "--json"))
    summary = json.loads(res.stdout)
    assert summary["share"]["share"] == "session" and summary["share"]["cross_tenant_hits"] == 0
    assert summary["tier_stats"]["share"]["domains"] == summary["share"]["domains"] > 4
    s = json.loads(ok(kvbed("trace", "stats", out, "--json")).stdout)
    assert s["meta"]["tier_stats"]["share"]["share"] == "session"
    assert s["meta"]["generator"]["synth"]["shared_prompt_tokens"] == 800
    text = ok(kvbed("trace", "stats", out)).stdout
    assert "per tenant, sharing domain session" in text and "cross-tenant hits" in text
    res = ok(kvbed("trace", "synth", "-o", out, "--duration-s", 120, "--param", "shared_prompt_tokens=800"))
    assert "sharing domain global (1 domain)" in res.stdout
    assert "served others" in res.stdout  # the per-tenant table
    res = ok(kvbed("trace", "stats", out))
    assert "per tenant, sharing domain global" in res.stdout  # cross-tenant hits happened: recorded


def test_cli_bad_share(tmp_path):
    out = tmp_path / "o.parquet"
    one_line_error(kvbed("trace", "synth", "-o", out, "--duration-s", 10, "--share", "cluster"),
                   "share: expected one of request, session, tenant, global, got 'cluster'")
    one_line_error(kvbed("trace", "synth", "-o", out, "--duration-s", 10, "--param", "share=Tenant"),
                   "share: expected one of request, session, tenant, global, got 'Tenant'")
    one_line_error(kvbed("trace", "synth", "-o", out, "--duration-s", 10, "--param", "shared_prompt_tokens=-5"),
                   "synth shared_prompt_tokens must be >= 0, got -5")
    one_line_error(kvbed("trace", "synth", "-o", out, "--duration-s", 10, "--param", "shared_prompt_tokens=lots"),
                   "shared_prompt_tokens")
    assert not out.exists()
