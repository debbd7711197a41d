"""Inputs, configuration and state of the tier simulator's kernel, and the one function that builds them.

Why NamedTuples of flat arrays (as :mod:`devicemodels.ftl_state`): the kernel takes three arguments
instead of dozens of positional ones, every array is declared once here with its dtype, shape and
meaning, and numba caches kernels that take them (jitclasses are not cached). The arrays belong to
the Python driver (:mod:`kvreplay.tiers.sim`), so the kernel is resumable: it stops when its event
buffer is nearly full, the driver streams the events out and calls it again with the same tuples.

Sizes: ``NT`` tiers (gpu, cpu, cxl, ssd: schema tier codes 0..3), n requests, C chunk references,
K distinct chunk keys (dense ids 0..K-1), O object ids, E event-buffer slots, N tenants, Sc scopes,
I scope invalidations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from kvreplay import schema
from kvreplay.schema import KIND
from kvreplay.tiers.chunking import chunk_table
from kvreplay.tiers.policies import EVICTION_POLICIES
from kvreplay.tiers.sharing import salts

if TYPE_CHECKING:
    from kvreplay.requests import RequestTrace
    from kvreplay.tiers.params import TierSimParams

NT = 4  # gpu, cpu, cxl, ssd (schema codes 0..3)
GPU, SSD = 0, 3
TIER_NAMES = schema.TIERS[:NT]
assert TIER_NAMES == ("gpu", "cpu", "cxl", "ssd")  # the order of sim.SIM_TIERS

# queues of a tier (TierState.Q[t, q, :]) and their columns
QS, QM, QG = 0, 1, 2  # small, main, ghost
QH, QT, QB, QN = 0, 1, 2, 3  # head key, tail key (-1: empty), bytes, entries
# QP, QR: the run of keys at the queue's tail that request QR uses (pinned), known up to key QP, its newest
# (-1: none known). A victim search passes over those keys without moving them, so while QR runs they stay
# a run at the tail and the next search starts past QP: no key is passed over twice (see pol_victim).
QP, QR = 4, 5
Q_WIDTH = 6

# which queue holds a key in a tier (column S_W): none, small, main, ghost (the ghost holds no data)
W_NONE, W_SMALL, W_MAIN, W_GHOST = 0, 1, 2, 3

# columns of TierState.S[t, k, :]: next key toward the tail (older) and previous key (-1: none),
# queue (W_*), access counter, bytes of the copy, its object id (0: none); then two columns of
# padding (a row is 64 bytes) that hold the per-key arrays of TierState (see build): the GPU row's
# hold inst and pin, the CPU row's last_use. Only build() uses S_PAD*: the kernel reads the views.
S_NEXT, S_PREV, S_W, S_F, S_CB, S_OI = range(6)
S_PAD0, S_PAD1 = 6, 7
S_WIDTH = 8

# eviction policy parameter columns TierConfig.P[t, :] (see kvreplay.tiers.policies)
P_SMALL, P_GHOST, P_PROMOTE, P_MAXF, P_TOUCH = range(5)
P_WIDTH = 5

# object attribute columns TierState.OA[o, :] (8 columns: a row is 64 bytes)
OA_PARENT, OA_NTOK, OA_TENANT, OA_SCOPE, OA_KIND, OA_NBYTES, OA_COPIES, OA_SESSION = range(8)
OA_WIDTH = 8

# event buffer rows TierState.EV[:, i] (an event's content key is not buffered: the driver looks it up,
# key_hash[okey[obj]], when it streams the events out)
EV_TS, EV_OP, EV_OBJ, EV_PARENT, EV_TIER, EV_NBYTES, EV_NTOK, EV_TENANT, EV_SCOPE, EV_KIND, EV_REQ, EV_SESS = range(12)
EV_ROWS = 12

# scalars TierState.sc[:]
# SC_POS: events in the buffer; SC_CAP: physical size of the event buffer (overflow guard);
# SC_NEXT_REQ: next request to process; SC_CLOCK: time the prefill pipeline is free;
# SC_NEXT_OBJ: next object id; SC_NEXT_INV: next invalidation; SC_OVERFLOW: 1 if the buffer overflowed;
# SC_CUR_REQ: request being processed (-1 between runs); SC_EX_N: rows of ``ex`` used;
# SC_SOFT: flush threshold (row group); SC_INV_POS: progress through the keys of the scope being
# invalidated (resumable)
SC_POS, SC_CAP, SC_NEXT_REQ, SC_CLOCK, SC_NEXT_OBJ, SC_NEXT_INV, SC_OVERFLOW, SC_CUR_REQ, SC_EX_N, SC_SOFT, SC_INV_POS = range(11)
SC_WIDTH = 11

# per-tier counters TierState.CT[t, :]
(
    CT_LOOKUPS,
    CT_HITS,
    CT_HIT_BYTES,
    CT_PERSIST,
    CT_PERSIST_BYTES,
    CT_LOAD,
    CT_LOAD_BYTES,
    CT_EVICT,
    CT_EVICT_BYTES,
    CT_DELETE,
    CT_DELETE_BYTES,
    CT_INVAL,
    CT_INVAL_BYTES,
    CT_CREATE,
    CT_CREATE_BYTES,
    CT_TRANSFORM,
    CT_TRANSFORM_BYTES,
    CT_PEAK_BYTES,
    CT_REJECTED,
    CT_EXPIRED,
    CT_EXPIRED_BYTES,
    CT_PAST_PINNED,
) = range(22)
CT_NAMES = (
    "lookups", "hits", "hit_bytes", "persists", "persist_bytes", "loads", "load_bytes", "evictions",
    "eviction_bytes", "deletes", "delete_bytes", "invalidations", "invalidation_bytes", "computed",
    "computed_bytes", "transforms", "transform_bytes", "peak_bytes", "rejected", "expirations", "expired_bytes",
    "evictions_past_pinned",
)
CT_WIDTH = len(CT_NAMES)

# global counters TierState.G[:]
(
    G_REQUESTS,
    G_CHUNKS,
    G_HIT_CHUNKS,
    G_HIT_TOKENS,
    G_COMPUTED_TOKENS,
    G_NEW_OBJECTS,
    G_RECOVERED,
    G_QUEUE_NS,
    G_QUEUE_NS_MAX,
    G_BUSY_NS,
    G_LOAD_NS,
    G_DECODE_END_MAX,
    G_INV_EVENTS,
    G_EXPIRED,
) = range(14)
G_NAMES = (
    "requests", "chunks", "hit_chunks", "hit_tokens", "computed_tokens", "new_objects", "recomputed_live_objects",
    "queue_ns_total", "queue_ns_max", "prefill_busy_ns", "load_ns_total", "last_decode_end_ns", "invalidation_events",
    "expired_objects",
)
G_WIDTH = len(G_NAMES)

# Sharing-domain accounting (kvreplay.tiers.sharing) lives in arrays of its own, not in CT/G: the
# per-tier rows and counters are written into every trace as they are, so adding columns to them
# would change the metadata of traces of the default sharing (golden digests).
# cross-tenant reuse per tier TierState.XT[t, :]: hits (GPU) or loads of an object another tenant
# created (the leakage surface of a shared cache): chunks, bytes of the copy, prompt tokens
XT_CHUNKS, XT_BYTES, XT_TOKENS = 0, 1, 2
XT_WIDTH = 3
XT_NAMES = ("chunks", "bytes", "tokens")
# per tenant TierState.TN[g, :]: cross-tenant chunks (bytes, tokens) its requests took from other
# tenants' objects (in), chunks (bytes) of its objects that served other tenants (out); then the bytes
# of its objects written into each tier (commit, recover, persist: TN_IN0 + tier) and the bytes of its
# objects each tier holds (TN_RES0 + tier; kept as copies come and go: a scan of S after the run
# reads ~90 MB on the Mooncake conversation trace, 10 ms)
TN_XIN, TN_XIN_BYTES, TN_XIN_TOKENS, TN_XOUT, TN_XOUT_BYTES, TN_IN0 = range(6)
TN_RES0 = TN_IN0 + NT
TN_WIDTH = TN_RES0 + NT

# write policies (TierConfig.wpol)
WRITE_THROUGH, SPILL = 0, 1

# columns of TierState.ex[i, :]: one TTL deadline per refresh, linked per tenant in time order
EX_DEADLINE, EX_KEY, EX_NEXT = 0, 1, 2
EX_WIDTH = 3


class TierRequests(NamedTuple):
    """The request trace, re-chunked into storage objects (read-only in the kernel)."""

    arrival: np.ndarray  # int64[n]      arrival time (ns), non-decreasing
    out_tok: np.ndarray  # int64[n]      output tokens (decode length: sets the request's end)
    sess: np.ndarray  # int64[n]         session id (-1: none), copied into the events
    tenant: np.ndarray  # int64[n]       tenant index (into RequestTrace.tenants)
    scope: np.ndarray  # int64[n]        scope index (model/adapter version)
    chunk_off: np.ndarray  # int64[n+1]  chunks of request r: chunk_off[r] .. chunk_off[r+1]-1, in prompt order
    chunk_key: np.ndarray  # int64[C]    key of chunk j (the token prefix up to its end), 0..K-1
    chunk_ntok: np.ndarray  # int64[C]   prompt tokens in chunk j
    scope_keys: np.ndarray  # int64[K]   every key, grouped by scope (increasing within a scope)
    scope_off: np.ndarray  # int64[Sc+1] keys of scope s: scope_keys[scope_off[s] .. scope_off[s+1]-1]
    inv_ts: np.ndarray  # int64[I]       time of invalidation i (ns), non-decreasing
    inv_scope: np.ndarray  # int64[I]    scope it invalidates
    key_hash: np.ndarray  # uint64[K]    chained hash of key k: the content_key of its objects in the trace


class TierConfig(NamedTuple):
    """Configuration from :class:`~kvreplay.tiers.params.TierSimParams` (read-only in the kernel)."""

    cap: np.ndarray  # int64[NT]              bytes of each tier (0: tier absent)
    P: np.ndarray  # float64[NT, P_WIDTH]     eviction policy parameters of each tier (P_* columns)
    wpol: int  # WRITE_THROUGH or SPILL
    promote: bool  # write-through: a load also writes the tiers between GPU and its source
    bytes_per_token: int  # KV bytes of one token (exact copy)
    prefill_ns_per_tok: float  # prefill pipeline time per computed token (ns)
    decode_ns_per_tok: float  # decode time per output token of one request (ns)
    read_ns_per_byte: np.ndarray  # float64[NT] load time into GPU per byte from each tier (ns; 0 for GPU)
    tenant_kind: np.ndarray  # int64[N]       kind code (schema.KIND) of the SSD's copy per tenant (0: exact)
    kind_ratio: np.ndarray  # float64[len(schema.KINDS)] bytes of a copy of that kind / exact
    ttl_ns: np.ndarray  # int64[N]            retention per tenant (ns; 0: none)
    pinning: bool  # chunks the running request uses are passed over by eviction (False: a plain cache)
    margin: int  # events budgeted per chunk when deciding whether a request fits in the buffer


class TierState(NamedTuple):
    """Everything the kernel changes; persists across its calls (allocated by :func:`build`)."""

    Q: np.ndarray  # int64[NT, 3, Q_WIDTH]     per tier, per queue (QS, QM, QG): head, tail, bytes, entries,
    #                                            pinned run at the tail (QP, QR)
    S: np.ndarray  # int64[NT, K, S_WIDTH]     per tier and key: queue links, queue, access count, bytes, object
    # per-key fields of no tier; strided views of S's padding (S[GPU, :, S_PAD0] and so on, see build)
    inst: np.ndarray  # int64[K] (view)        live exact object of key k (0: none)
    pin: np.ndarray  # int64[K] (view)         last request that used key k (-1: none); == running request: pinned
    last_use: np.ndarray  # int64[K] (view)    time (ns) of key k's last retention refresh
    OA: np.ndarray  # int64[O, OA_WIDTH]       per object: parent, tokens, tenant, scope, kind, bytes, copies, session
    okey: np.ndarray  # int64[O]               per object the chunk key k it holds (a derived copy: its source's);
    #                                            kept out of OA, whose rows are one cache line
    sc: np.ndarray  # int64[SC_WIDTH]          progress and buffer scalars (SC_*)
    CT: np.ndarray  # int64[NT, CT_WIDTH]      per-tier counters (CT_*)
    G: np.ndarray  # int64[G_WIDTH]            global counters (G_*)
    EV: np.ndarray  # int64[EV_ROWS, E]        event buffer, one column per event (EV_* rows)
    ex: np.ndarray  # int64[C+1 (1 if no TTL), EX_WIDTH] retention deadlines, one per refresh (EX_* columns)
    ex_head: np.ndarray  # int64[N]            oldest pending deadline (row of ex) per tenant, -1: none
    ex_tail: np.ndarray  # int64[N]            newest pending deadline per tenant, -1: none
    FR: np.ndarray  # int64[4, NT+1]           scratch: _make_room's frames (tier, key, victim, bytes needed)
    XT: np.ndarray  # int64[NT, XT_WIDTH]      cross-tenant reuse per tier (XT_* columns)
    TN: np.ndarray  # int64[N, TN_WIDTH]       per-tenant cross-tenant reuse, bytes written and held (TN_* columns)
    req_hit: np.ndarray  # int64[n]            chunks of request r served from cache (its reused prefix)


def policy_matrix(params: "TierSimParams") -> np.ndarray:
    """TierConfig.P: each tier's eviction policy as parameters of the one queue engine."""
    P = np.zeros((NT, P_WIDTH), np.float64)
    for i, t in enumerate(TIER_NAMES):
        pol = EVICTION_POLICIES.get(params.policy(t))
        P[i] = (pol.small_ratio, pol.ghost_ratio, pol.promote_freq, pol.max_freq, 1.0 if pol.touch_to_head else 0.0)
    return P


def build(reqs: "RequestTrace", params: "TierSimParams", buffer_events: int
          ) -> tuple[TierRequests, TierConfig, TierState]:
    """Chunk the requests, derive the configuration and allocate the state of a run (``params`` validated)."""
    T = params.tokens_per_object
    chunk_off, chunk_key, chunk_ntok, key_ntok, key_scope, key_hash = chunk_table(
        reqs.block_offsets, reqs.block_ids, reqs.input_tokens, reqs.scope, reqs.block_tokens, T,
        salt=salts(reqs, params.share),
    )
    nkeys = len(key_ntok)
    nchunks = len(chunk_key)
    max_chunks = int(np.diff(chunk_off).max()) if reqs.n else 0

    # keys of each scope, for invalidations
    order = np.argsort(key_scope, kind="stable")
    scope_off = np.zeros(len(reqs.scopes) + 1, np.int64)
    np.cumsum(np.bincount(key_scope, minlength=len(reqs.scopes)), out=scope_off[1:])
    rq = TierRequests(
        arrival=reqs.arrival_ns,
        out_tok=reqs.output_tokens,
        sess=reqs.session_id,
        tenant=reqs.tenant.astype(np.int64),
        scope=reqs.scope.astype(np.int64),
        chunk_off=chunk_off,
        chunk_key=chunk_key,
        chunk_ntok=chunk_ntok.astype(np.int64),
        scope_keys=order.astype(np.int64),
        scope_off=scope_off,
        inv_ts=reqs.inv_ts_ns,
        inv_scope=reqs.inv_scope.astype(np.int64),
        key_hash=key_hash,
    )

    default_kind, per_tenant = params.tenant_kinds()
    kind_ratio = np.ones(len(schema.KINDS), np.float64)
    kind_ratio[KIND["quantized"]] = params.quantized_ratio
    kind_ratio[KIND["compressed"]] = params.compressed_ratio
    default_ttl, per_ttl = params.tenant_ttls()
    read_ns_per_byte = np.zeros(NT, np.float64)
    read_ns_per_byte[1] = 1e9 / params.cpu_read_bytes_per_s
    read_ns_per_byte[2] = 1e9 / params.cxl_read_bytes_per_s
    read_ns_per_byte[3] = 1e9 / params.ssd_read_bytes_per_s
    # Flush when the next request could bring the buffer past ``buffer_events`` (typical events per
    # chunk: margin). Beyond that the buffer keeps slack for the rare request whose inserts evict
    # many small objects (partial chunks) in cascade; running out of it is reported, never silent.
    margin = 16 + 8 * NT
    cfg = TierConfig(
        cap=np.array([params.capacity(t) for t in TIER_NAMES], np.int64),
        P=policy_matrix(params),
        wpol=WRITE_THROUGH if params.write_policy == "write-through" else SPILL,
        promote=bool(params.promote_on_load),
        bytes_per_token=np.int64(params.bytes_per_token),
        prefill_ns_per_tok=1e9 / params.prefill_tokens_per_s,
        decode_ns_per_tok=1e9 / params.decode_tokens_per_s,
        read_ns_per_byte=read_ns_per_byte,
        tenant_kind=np.array([KIND[per_tenant.get(t, default_kind)] for t in reqs.tenants], np.int64),
        kind_ratio=kind_ratio,
        ttl_ns=np.array([int(per_ttl.get(t, default_ttl) * 1e9) for t in reqs.tenants], np.int64),
        pinning=bool(params.pinning),
        margin=np.int64(margin),
    )

    soft = max(buffer_events, (max_chunks + 2) * margin)
    min_tok = int(chunk_ntok.min()) if nchunks else T
    worst = 16 + 8 * NT * (-(-T // max(min_tok, 1)) + 1)
    slack = min(max((max_chunks + 2) * worst, 1 << 16), 1 << 22)
    Q = np.zeros((NT, 3, Q_WIDTH), np.int64)
    Q[:, :, QH] = -1
    Q[:, :, QT] = -1
    Q[:, :, QP] = -1
    Q[:, :, QR] = -1
    S = np.zeros((NT, max(nkeys, 1), S_WIDTH), np.int64)
    S[:, :, S_NEXT] = -1
    S[:, :, S_PREV] = -1
    # Why the per-key fields live in the padding of S's rows rather than in arrays of their own:
    # a chunk's lookup already reads its GPU row, and pin/inst are read or written with it, so
    # they come with that row's cache lines instead of one more miss each on a random key.
    # scripts/bench_trace_import.py (Mooncake conversation trace, 3.25 M events, 2 shared cores),
    # median of 5 invocations x 5 runs, alternating, this layout vs separate int64[K] arrays:
    # total 1.120 s vs 1.193 s (-6%), CPU 1.083 s vs 1.169 s (-7%); simulate() alone 0.658 s vs
    # 0.738 s (-11%). One int64[K, 3] array of the three fields did no better than separate ones
    # (0.739 s vs 0.747 s), nor did aligning rows to 64 bytes help (0.653 s vs 0.658 s).
    inst, pin, last_use = S[GPU, :, S_PAD0], S[GPU, :, S_PAD1], S[1, :, S_PAD0]
    pin[:] = -1
    sc = np.zeros(SC_WIDTH, np.int64)
    sc[SC_NEXT_OBJ] = 1
    sc[SC_CLOCK] = np.iinfo(np.int64).min // 2
    sc[SC_SOFT] = soft
    sc[SC_CAP] = soft + slack
    # object ids: at most one exact object per chunk reference, plus one derived copy per SSD write
    # and one rebuilt object per load (each bounded by the references)
    ocap = 3 * nchunks + 16
    st = TierState(
        Q=Q,
        S=S,
        inst=inst,
        pin=pin,
        last_use=last_use,
        OA=np.zeros((ocap, OA_WIDTH), np.int64),
        okey=np.zeros(ocap, np.int64),
        sc=sc,
        CT=np.zeros((NT, CT_WIDTH), np.int64),
        G=np.zeros(G_WIDTH, np.int64),
        EV=np.empty((EV_ROWS, soft + slack), np.int64),
        ex=np.zeros((nchunks + 1 if cfg.ttl_ns.any() else 1, EX_WIDTH), np.int64),  # one row per access
        ex_head=np.full(len(reqs.tenants), -1, np.int64),
        ex_tail=np.full(len(reqs.tenants), -1, np.int64),
        FR=np.zeros((4, NT + 1), np.int64),
        XT=np.zeros((NT, XT_WIDTH), np.int64),
        TN=np.zeros((len(reqs.tenants), TN_WIDTH), np.int64),
        req_hit=np.zeros(reqs.n, np.int64),
    )
    return rq, cfg, st
