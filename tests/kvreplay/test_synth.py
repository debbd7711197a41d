"""kvbed trace synth: deterministic, exercises the workload features, gives SSD pressure and
lifetime spread that a lifetime hint can use."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from kvreplay.schema import KIND, OP, TIER, TraceMeta, TraceReader
from kvreplay.stats import trace_stats
from kvreplay.synth import SYNTH_TIER_DEFAULTS, SynthParams, synthesize
from kvreplay.tiers.sim import simulate_to_file
from kvreplay.validate import validate_trace
from kvbed.core.errors import KvbedError

SMALL = SynthParams(duration_s=300.0, adapter_update_s=100.0)


def test_deterministic_by_seed():
    a, b = synthesize(SMALL), synthesize(SMALL)
    for name in ("arrival_ns", "input_tokens", "output_tokens", "block_offsets", "block_ids", "session_id", "tenant",
                 "scope", "inv_ts_ns", "inv_scope"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    c = synthesize(replace(SMALL, seed=1))
    assert not np.array_equal(a.block_ids[:1000], c.block_ids[:1000])


def test_workload_features():
    tr = synthesize(SMALL)
    f = tr.facts()
    assert tr.tenants == ["chat", "rag", "agent", "batch"]
    assert set(np.unique(tr.tenant)) == {0, 1, 2, 3}
    assert f["sessions"] > 100 and f["requests"] > 3 * f["sessions"] / 2
    # adapter updates at 100 s and 200 s invalidate the agent and batch adapters in turn
    assert tr.inv_ts_ns.tolist() == [100 * 10**9, 200 * 10**9]
    assert [tr.scopes[s] for s in tr.inv_scope] == ["agent-lora@v1", "batch-lora@v1"]
    assert "agent-lora@v2" in tr.scopes
    # every request of a tenant starts with the tenant's system prompt: same first block id
    first = tr.block_ids[tr.block_offsets[:-1]]
    for t in range(4):
        m = (tr.tenant == t) & (tr.scope == np.bincount(tr.scope[tr.tenant == t]).argmax())
        assert len(np.unique(first[m])) == 1
    # chat turns grow: a session's later prompt extends the earlier one (shared prefix ids)
    chat = np.flatnonzero(tr.tenant == 0)
    s0 = tr.session_id[chat[0]]
    reqs = [r for r in chat if tr.session_id[r] == s0]
    if len(reqs) > 1:
        a = tr.block_ids[tr.block_offsets[reqs[0]]:tr.block_offsets[reqs[0] + 1]]
        b = tr.block_ids[tr.block_offsets[reqs[1]]:tr.block_offsets[reqs[1] + 1]]
        assert np.array_equal(a[:-1], b[:len(a) - 1])  # all but the partial last block
    assert f["references_to_seen_id_share"] > 0.5


def test_default_synth_trace_for_the_demo(tmp_path):
    """The defaults of `kvbed trace synth`: valid, SSD under pressure, two kinds, invalidations,
    and SSD residencies spread widely (what an oracle lifetime hint separates)."""
    path = tmp_path / "s.parquet"
    tr = synthesize(SynthParams())
    res = simulate_to_file(tr, SYNTH_TIER_DEFAULTS, path, TraceMeta())
    assert validate_trace(path).ok
    ssd = res.tier_stats["ssd"]
    assert ssd["persist_bytes"] > 4 * ssd["capacity_bytes"]  # the SSD tier is rewritten several times
    assert ssd["deletes"] + ssd["evictions"] > 10_000
    assert ssd["loads"] > 1000 and ssd["invalidations"] > 0 and ssd["transforms"] > 0
    b = TraceReader(path).read_all(["op", "tier", "kind"])
    on_ssd = (b["op"] == OP["persist"]) & (b["tier"] == TIER["ssd"])
    assert set(np.unique(b["kind"][on_ssd])) == {KIND["exact"], KIND["quantized"]}
    s = trace_stats(path)
    r = s["residency_ns"]["ssd"]["percentile"]
    assert r["99.000000"] > 2.5 * r["50.000000"]
    assert r["10.000000"] < 0.5 * r["50.000000"]


def test_bad_synth_params():
    with pytest.raises(KvbedError, match="unknown profile 'video'"):
        synthesize(replace(SMALL, profile_weights="video=1"))
    with pytest.raises(KvbedError, match="duration_s must be positive"):
        synthesize(replace(SMALL, duration_s=0))


@pytest.mark.parametrize("change, message", [
    (dict(rag_corpus_docs=0), "rag_corpus_docs must be positive"),
    (dict(rag_corpus_docs=2), "rag_docs_max (3) must not exceed rag_corpus_docs (2)"),
    (dict(seed=-1), "seed must be >= 0"),
    (dict(chat_think_s=-1.0), "chat_think_s must be >= 0"),
    (dict(rag_followup_prob=1.5), "rag_followup_prob must be in [0, 1]"),
])
def test_bad_synth_params_are_one_line_errors(change, message):
    """These used to end in numpy ValueErrors (tracebacks) or be silently clamped."""
    with pytest.raises(KvbedError) as exc:
        synthesize(replace(SMALL, **change))
    assert message in str(exc.value) and "\n" not in str(exc.value)

