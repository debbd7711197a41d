"""`kvbed trace capture` against the engines' own event code: vLLM 0.34.0's and SGLang 0.5.23's publishers
(EventPublisherFactory -> ZmqEventPublisher with its replay ROUTER) and SGLang's KVCacheEventRecorder,
driven by simulated caches (tests/support/engine_drivers.py) over loopback. For each scenario the trace
must hold exactly the objects, copies per tier, evicts, deletes, tenants and scopes the caches made, with
late joins and dropped messages filled from the real replay sockets, nothing lost, no event refused, and
the raw file must decode again to the identical trace."""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest

from tests.support import engine_events

ok, why = engine_events.available()
pytestmark = pytest.mark.skipif(not ok, reason=why)

from kvreplay.capture import CaptureParams  # noqa: E402
from kvreplay.capture.lifecycle import GROUP_MIX  # noqa: E402
from kvreplay.capture.rawimport import import_raw  # noqa: E402
from kvreplay.capture.subscriber import LiveCapture  # noqa: E402
from kvreplay.schema import COLUMNS, OP, TIERS, TraceMeta, TraceWriter, read_trace  # noqa: E402
from kvreplay.validate import validate_trace  # noqa: E402


def _drivers(kind, truth, ranks, drop, **kw):
    from tests.support.engine_drivers import SglangDriver, VllmDriver, free_port_run

    port, rport = free_port_run(ranks), free_port_run(ranks)
    cls = VllmDriver if kind == "vllm" else SglangDriver
    return [cls(truth, port, rport, r, seed=17 + r, drop=drop, **kw) for r in range(ranks)]


def run_scenario(tmp_path, kind, *, ranks=2, steps=120, late=6, clears=(70,), drop=frozenset({15, 16, 40}), **kw):
    from tests.support.engine_drivers import Truth

    truth = Truth()
    drivers = _drivers(kind, truth, ranks, drop, **kw)
    out, raw = tmp_path / "cap.parquet", tmp_path / "cap.kvraw"
    warnings: list[str] = []
    try:
        for _ in range(late):  # published before the capture starts: it joins late
            for d in drivers:
                d.step()
        cap = LiveCapture([d.instance for d in drivers], out, CaptureParams(flush_s=0.3).validate(),
                          replay=[d.replay_endpoint for d in drivers], raw=raw, engine=kind, warn=warnings.append)
        stop = threading.Event()
        res = {}
        th = threading.Thread(target=lambda: res.setdefault("r", cap.run(stop.is_set)))
        th.start()
        time.sleep(0.5)
        for s in range(late, steps):
            for d in drivers:
                d.step(clear=s in clears)
            time.sleep(0.003)
        end = time.monotonic() + 20
        while time.monotonic() < end and any(p.last_seq != d.published - 1
                                               for p, d in zip(cap.session.pubs, drivers)):
            time.sleep(0.02)
        stop.set()
        th.join(30)
    finally:
        for d in drivers:
            d.close()
    return truth, res["r"], out, raw, warnings, drivers


def check(truth, result, out, raw, warnings, drivers, tmp_path):
    f = result.facts
    assert [p["last_seq"] for p in f.get("per_publisher", [])] in ([], [d.published - 1 for d in drivers])
    assert f["lost_messages"] == 0 and f["bad_messages"] == 0 and f["bad_events"] == {}, (f, warnings)
    assert f["unknown_media"] == {} and f["unknown_event_types"] == {}
    assert f["repeat_stores"] == 0 and f["removes_of_absent_blocks"] == 0
    assert f["placeholder_stores_default_size"] == 0
    assert f["gaps_filled"] >= 6 * len(drivers) + 3  # the late join's history and the dropped ones, per rank
    assert f["messages"] == sum(d.published for d in drivers)
    b, r = read_trace(out)
    op, tier = b["op"], b["tier"]
    names = {t: TIERS[t] for t in range(len(TIERS))}

    def per_tier(*ops):
        m = np.isin(op, [OP[o] for o in ops])
        return {names[int(t)]: int(n) for t, n in zip(*np.unique(tier[m], return_counts=True))}

    assert int((op == OP["create"]).sum()) == truth.objects
    assert per_tier("create", "persist") == truth.placed
    assert per_tier("evict") == truth.evicts
    assert per_tier("delete") == truth.deletes
    creates = np.flatnonzero(op == OP["create"])
    got = Counter((r.tenants[int(b["tenant"][i])], r.scopes[int(b["scope"][i])]) for i in creates)
    assert got == Counter(truth.attrs)
    assert validate_trace(out).ok
    with TraceWriter(tmp_path / "again.parquet", TraceMeta()) as w:  # the raw file decodes to the same trace
        meta = import_raw(f"{drivers[0].engine}-events", raw, w)
        w.close(meta)
    b2, r2 = read_trace(tmp_path / "again.parquet")
    assert b2.n == b.n and all(np.array_equal(b[c], b2[c]) for c in COLUMNS)
    assert r2.tenants == r.tenants and r2.scopes == r.scopes
    return b, r


def test_vllm_default_events_with_cpu_and_storage_offloading(tmp_path):
    """The README's configuration: OffloadingConnector with default events (placeholder stores: block_size 0,
    no tokens), STORAGE with LOCAL and REMOTE locality, LoRA, salts, sessions, a prefix-cache reset, two DP
    ranks, a late join and dropped messages."""
    truth, res, out, raw, warnings, drivers = run_scenario(tmp_path, "vllm")
    assert set(truth.placed) == {"gpu", "cpu", "ssd", "remote"} and truth.objects > 300
    b, r = check(truth, res, out, raw, warnings, drivers, tmp_path)
    assert res.facts["placeholder_stores"] > 100 and res.facts["all_blocks_cleared"] == 2
    # the content key is the engine's block hash: vLLM's 32-byte SHA-256, its last 8 bytes
    hashes = {int.from_bytes(d.meta[blk][0][-8:], "big") for d in drivers for blk in d.meta}
    assert set(int(k) for k in b["content_key"][b["op"] == OP["create"]]) <= hashes
    assert {s.split("|")[1] for s in r.scopes if "|" in s} == {"lora=sql-lora", "lora=chat-lora"}


def test_vllm_hybrid_model_self_describing_events(tmp_path):
    """Full plus sliding-window attention: every hash published once per KV cache group (group_idx 0, 1);
    the connector's events self-describing (kv_connector_extra_config self_describing_kv_events)."""
    truth, res, out, raw, warnings, drivers = run_scenario(tmp_path, "vllm", ranks=1, hybrid=True,
                                                           self_describing=True)
    b, _ = check(truth, res, out, raw, warnings, drivers, tmp_path)
    assert res.facts["placeholder_stores"] == 0
    keys = set(int(k) for k in b["content_key"][b["op"] == OP["create"]])
    h = {int.from_bytes(d.meta[blk][0][-8:], "big") for d in drivers for blk in d.meta}
    assert keys <= h | {x ^ GROUP_MIX for x in h} and keys & {x ^ GROUP_MIX for x in h}


def test_sglang_hicache_with_host_pool_and_radix_reset(tmp_path):
    """SGLang's recorder: GPU stores, write-back to the host pool (CPU_PINNED) before a GPU eviction, host
    evictions, salts and sessions on the radix keys, a radix reset that empties GPU and host pool, two
    attention-DP ranks, a late join and dropped messages."""
    truth, res, out, raw, warnings, drivers = run_scenario(tmp_path, "sglang")
    assert set(truth.placed) == {"gpu", "cpu"} and truth.deletes.get("cpu", 0) > 0
    _, r = check(truth, res, out, raw, warnings, drivers, tmp_path)
    assert {t for t in r.tenants} >= {"tenant-0", "tenant-1"}
