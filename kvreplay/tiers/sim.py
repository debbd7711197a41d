"""Tier simulator: a request trace -> KV lifecycle events over GPU HBM, CPU DRAM, CXL and SSD.

The model (every number is a :class:`TierSimParams` field, overridable):

* Storage objects are chunks of ``tokens_per_object`` prompt tokens (LMCache's
  chunking); ``nbytes = tokens * bytes_per_token`` of the model's KV geometry.
* One logical prefill pipeline serves requests first come, first served with the
  cluster's aggregate throughput (a fluid model of several prefill instances
  sharing one KV pool, as in Mooncake). A request starts at max(arrival, pipeline
  free); its longest cached prefix is reused chunk by chunk (``hit`` in GPU, or
  ``load`` from the fastest lower tier at that tier's read bandwidth, copied into
  GPU); the rest is prefilled chunk by chunk (``create`` ... ``commit``). Decode
  runs outside the pipeline at ``decode_tokens_per_s`` per request and stores no KV.
* Write policy ``write-through`` persists every new chunk to every lower tier at
  commit (LMCache's CPU + local-disk backends); on a load, copies are also put in
  the tiers above the source (inclusive). ``spill`` keeps new chunks in GPU and
  writes a victim to the next tier only when it is evicted (a victim cache).
* Each tier evicts with its own policy (``EVICTION_POLICIES``: lru, fifo, clock,
  s3fifo). Chunks in use by the running request (its cached prefix and the chunks it made
  so far) are pinned, in every tier: eviction passes over them where they stand (their place,
  queue and access count unchanged) and takes the next entry the policy would; if every
  entry of a tier is pinned, the policy's own choice goes anyway (a spill into such a tier is
  dropped instead). Each tier's ``evictions_past_pinned`` counts the evictions that passed over
  a pinned entry (0: the tier evicted as the plain policy). ``pinning=False`` turns this off:
  each tier is then a plain cache, as cache simulators (libCacheSim) model one.
* With ``ssd_kind`` quantized/compressed (for all tenants or per tenant), the SSD
  stores a derived object (``transform`` with parent = the exact object, size
  scaled by the kind's ratio); loading it rebuilds an exact object (``transform``
  again, parent = the derived one).
* Sharing domains (``share``, :mod:`kvreplay.tiers.sharing`): a prefix is reused only by requests
  of the domain that made it - the request itself, its session, its tenant, or anyone (``global``),
  as with vLLM's and SGLang's ``cache_salt``. Every domain shares the tiers' capacity. The report's
  ``share`` section gives hit ratios per tenant, the bytes each tenant's objects write into each
  tier and the cross-tenant hits (a hit or load of an object another tenant created).
* Retention (``ttl_s``, per tenant ``ttl_tenants``): like the prompt caches of
  LLM APIs, a chunk not used for its tenant's TTL is deleted from every tier at
  that moment (refreshed on each hit/load/recompute). Scope invalidations
  (adapter updates in the request trace) drop every copy of the scope's chunks.

Event conventions (what replay and stats rely on):

* Object ids are dense, from 1, and never reused. An object's copy in a tier
  begins with ``commit`` (GPU, after ``create``), ``recover`` (GPU, recomputed
  while live elsewhere) or ``persist``, and ends with exactly one of ``evict``
  (capacity; other copies remain), ``delete`` (the object ends: its last copy
  evicted for capacity, or - TTL expiry - one ``delete`` per tier holding a copy,
  all at the same time), or ``invalidate`` (scope version change). So on any one
  tier every persist is followed by at most one evict/delete/invalidate.
* ``parent_id`` of an exact object is the object of the previous chunk of the
  same prompt when it was made (0 for the first chunk): prefix depth is the
  length of the parent chain (:func:`kvreplay.tiers.features.prefix_depth`).
  For derived objects it is the source object.
* ``content_key`` is the chunk's chained hash (:func:`kvreplay.tiers.chunking.chunk_table`: its token
  prefix, scope and sharing-domain salt): a chunk evicted and recomputed gets a new object id and the same
  key; a derived copy, and the exact object rebuilt from it, keep the key of their source.
* ``request_id``/``session_id`` are those of the request that caused the event
  (-1 for invalidations and expiries); ``tenant``/``scope``/``kind`` belong to the object.
* Timestamps are issue times in ns; the stream is non-decreasing by construction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from kvreplay import schema
from kvreplay.requests import RequestTrace
from kvreplay.schema import EventBatch
from kvreplay.tiers import kernel as K
from kvreplay.tiers import hitratio
from kvreplay.tiers import state as TS
from kvreplay.tiers.params import SIM_TIERS, TierSimParams, params_dict
from kvreplay.tiers.sharing import salts
from kvbed.core.errors import KvbedError


@dataclass
class TierSimResult:
    events: int
    objects: int
    tier_stats: dict[str, Any]  # what the trace records
    counters: dict[str, Any]
    elapsed_s: float
    share: dict[str, Any]  # sharing-domain report (share_report), always computed
    state: dict[str, np.ndarray] | None = None  # final kernel state (tests check its invariants)


def simulate(
    reqs: RequestTrace,
    params: TierSimParams,
    sink: Callable[[EventBatch], None],
    *,
    buffer_events: int = 1 << 20,
    progress: Callable[[int, int], None] | None = None,
) -> TierSimResult:
    """Run the tier simulation, handing sorted event batches to ``sink`` as they fill."""
    t_start = time.perf_counter()
    params.validate()
    rq, cfg, st = TS.build(reqs, params, buffer_events)
    sc = st.sc
    total = 0
    while True:
        done = K.run_kernel(rq, cfg, st)
        if sc[TS.SC_OVERFLOW]:
            raise KvbedError(f"tier simulator: request {int(sc[TS.SC_NEXT_REQ])} emitted more than "
                             f"{int(sc[TS.SC_CAP])} events at once; rerun with a larger tokens_per_object")
        n = int(sc[TS.SC_POS])
        if n:
            sink(_to_batch(st.EV, n, rq.key_hash, st.okey))
            total += n
            sc[TS.SC_POS] = 0
        if progress is not None:
            progress(int(sc[TS.SC_NEXT_REQ]), reqs.n)
        if done:
            break

    objects = int(sc[TS.SC_NEXT_OBJ]) - 1
    counters = {name: int(st.G[i]) for i, name in enumerate(TS.G_NAMES)}
    counters.update(chunk_references=len(rq.chunk_key), distinct_chunks=len(rq.scope_keys), objects=objects,
                    events=total)
    tier_stats = tier_report(params, st.CT, st.G, st.Q)
    share = tier_stats["share"] = share_report(params, reqs, rq, st)
    return TierSimResult(
        events=total,
        objects=objects,
        tier_stats=tier_stats,
        counters=counters,
        elapsed_s=time.perf_counter() - t_start,
        share=share,
        state={"Q": st.Q, "S": st.S, "OA": st.OA[: objects + 1], "inst": st.inst, "cap": cfg.cap,
               "req_hit": st.req_hit, "XT": st.XT, "TN": st.TN},
    )


def _to_batch(EV: np.ndarray, n: int, key_hash: np.ndarray, okey: np.ndarray) -> EventBatch:
    cols = {
        "ts_ns": EV[TS.EV_TS, :n],
        "op": EV[TS.EV_OP, :n],
        "obj_id": EV[TS.EV_OBJ, :n],
        "parent_id": EV[TS.EV_PARENT, :n],
        "tier": EV[TS.EV_TIER, :n],
        "nbytes": EV[TS.EV_NBYTES, :n],
        "ntokens": EV[TS.EV_NTOK, :n],
        "tenant": EV[TS.EV_TENANT, :n],
        "scope": EV[TS.EV_SCOPE, :n],
        "kind": EV[TS.EV_KIND, :n],
        "request_id": EV[TS.EV_REQ, :n],
        "session_id": EV[TS.EV_SESS, :n],
        "content_key": key_hash[okey[EV[TS.EV_OBJ, :n]]],
    }
    return EventBatch({name: cols[name].astype(dt, copy=True) for name, (_, dt) in schema.COLUMNS.items()})


def tier_report(params: TierSimParams, CT: np.ndarray, G: np.ndarray, Q: np.ndarray) -> dict[str, Any]:
    """Per tier: the chunk references it served (``ref_hit_ratio``: hits / every chunk of every request) and
    its hits among the lookups that reached it (``lookup_hit_ratio``; see :mod:`kvreplay.tiers.hitratio`),
    bytes in (persist/commit) and out (load)."""
    out: dict[str, Any] = {}
    chunks = int(G[TS.G_CHUNKS])
    for i, t in enumerate(SIM_TIERS):
        cap = params.capacity(t)
        if cap <= 0:
            continue
        row = {name: int(CT[i, j]) for j, name in enumerate(TS.CT_NAMES)}
        row["capacity_bytes"] = cap
        row["policy"] = params.policy(t)
        row.update(hitratio.ratios(row["hits"], row["lookups"], chunks))
        row["bytes_in"] = row["persist_bytes"] + row["computed_bytes"]
        row["bytes_out"] = row["load_bytes"]
        row["end_bytes"] = int(Q[i, TS.QS, TS.QB] + Q[i, TS.QM, TS.QB])
        out[t] = row
    out["all"] = {
        "chunk_references": chunks,
        "hit_chunks": int(G[TS.G_HIT_CHUNKS]),
        "chunk_hit_ratio": int(G[TS.G_HIT_CHUNKS]) / chunks if chunks else 0.0,
        "token_hit_ratio": int(G[TS.G_HIT_TOKENS]) / max(1, int(G[TS.G_HIT_TOKENS] + G[TS.G_COMPUTED_TOKENS])),
        "computed_tokens": int(G[TS.G_COMPUTED_TOKENS]),
        "hit_tokens": int(G[TS.G_HIT_TOKENS]),
        "mean_queue_ns": int(G[TS.G_QUEUE_NS]) / max(1, int(G[TS.G_REQUESTS])),
        "max_queue_ns": int(G[TS.G_QUEUE_NS_MAX]),
        "prefill_busy_ns": int(G[TS.G_BUSY_NS]),
    }
    return out


def share_report(params: TierSimParams, reqs: RequestTrace, rq: TS.TierRequests, st: TS.TierState
                 ) -> dict[str, Any]:
    """Reuse inside the sharing domains, per tenant, and across tenants (from the kernel's per-request
    reused prefixes ``req_hit`` and its per-tier and per-tenant counters ``XT``/``TN``)."""
    tiers = [t for t in SIM_TIERS if params.capacity(t) > 0]
    ti = [SIM_TIERS.index(t) for t in tiers]
    ng = len(reqs.tenants)
    ten = reqs.tenant.astype(np.int64)
    c0, c1 = rq.chunk_off[:-1], rq.chunk_off[1:]
    cum = np.zeros(len(rq.chunk_ntok) + 1, np.int64)
    np.cumsum(rq.chunk_ntok, out=cum[1:])
    hit_tok = cum[c0 + st.req_hit] - cum[c0]
    all_tok = cum[c1] - cum[c0]

    def per_tenant(values: np.ndarray) -> np.ndarray:
        return np.bincount(ten, weights=values, minlength=ng).astype(np.int64) if len(ten) else np.zeros(ng, np.int64)

    requests = np.bincount(ten, minlength=ng)
    chunks, hits = per_tenant(c1 - c0), per_tenant(st.req_hit)
    tok, htok = per_tenant(all_tok), per_tenant(hit_tok)
    TN, XT = st.TN, st.XT
    end = TN[:, TS.TN_RES0:TS.TN_RES0 + TS.NT].sum(axis=1)  # bytes each tenant's objects hold at the end

    def ratio(a: int, b: int) -> float:
        return a / b if b else 0.0

    tenants = {}
    for g in np.flatnonzero(requests):
        bytes_in = {t: int(TN[g, TS.TN_IN0 + i]) for t, i in zip(tiers, ti)}
        tenants[reqs.tenants[g]] = {
            "requests": int(requests[g]),
            "chunks": int(chunks[g]),
            "hit_chunks": int(hits[g]),
            "chunk_hit_ratio": ratio(int(hits[g]), int(chunks[g])),
            "token_hit_ratio": ratio(int(htok[g]), int(tok[g])),
            "cross_tenant_hits": int(TN[g, TS.TN_XIN]),
            "cross_tenant_bytes": int(TN[g, TS.TN_XIN_BYTES]),
            "cross_tenant_tokens": int(TN[g, TS.TN_XIN_TOKENS]),
            "served_other_tenants": int(TN[g, TS.TN_XOUT]),
            "served_other_tenants_bytes": int(TN[g, TS.TN_XOUT_BYTES]),
            "bytes_in": sum(bytes_in.values()),
            "bytes_in_per_tier": bytes_in,
            "end_bytes": int(end[g]),
        }
    hit_chunks, n_chunks = int(st.req_hit.sum()), len(rq.chunk_key)
    xt = {t: {name: int(XT[i, j]) for j, name in enumerate(TS.XT_NAMES)} for t, i in zip(tiers, ti)}
    return {
        "share": params.share,
        "domains": int(np.unique(salts(reqs, params.share)).size),
        "chunk_hit_ratio": ratio(hit_chunks, n_chunks),
        "token_hit_ratio": ratio(int(hit_tok.sum()), int(all_tok.sum())),
        "hit_chunks": hit_chunks,
        "chunks": n_chunks,
        "distinct_chunks": len(rq.scope_keys),
        "bytes_in": int(TN[:, TS.TN_IN0:TS.TN_IN0 + TS.NT].sum()),
        "end_bytes": int(end.sum()),
        "cross_tenant_hits": int(XT[:, TS.XT_CHUNKS].sum()),
        "cross_tenant_bytes": int(XT[:, TS.XT_BYTES].sum()),
        "cross_tenant_tokens": int(XT[:, TS.XT_TOKENS].sum()),
        "cross_tenant_hit_share": ratio(int(XT[:, TS.XT_CHUNKS].sum()), hit_chunks),
        "cross_tenant_per_tier": xt,
        "tenants": tenants,
    }


def simulate_to_file(
    reqs: RequestTrace,
    params: TierSimParams,
    out_path,
    meta: schema.TraceMeta,
    *,
    progress: Callable[[int, int], None] | None = None,
    row_group_rows: int = schema.DEFAULT_ROW_GROUP_ROWS,
) -> TierSimResult:
    """Simulate and stream the events into a trace file (written atomically, one row group per batch)."""
    meta.geometry = {
        "model": params.model,
        "kv_dtype": params.kv_dtype,
        "bytes_per_token": params.bytes_per_token,
        "tokens_per_object": params.tokens_per_object,
        "object_bytes": params.object_bytes,
    }
    meta.generator.setdefault("tier_sim", params_dict(params))
    writer = schema.TraceWriter(out_path, meta, tenants=list(reqs.tenants), scopes=list(reqs.scopes),
                                row_group_rows=row_group_rows)
    try:
        # Writing in a second thread while the kernel runs was measured slower here (2 shared
        # cores, pyarrow's own threads): batches are written as they fill.
        res = simulate(reqs, params, writer.write, buffer_events=row_group_rows, progress=progress)
        meta.tier_stats = res.tier_stats
        meta.extra.setdefault("tier_sim_counters", res.counters)
        writer.close(meta)
    except BaseException:
        writer.abort()
        raise
    return res
