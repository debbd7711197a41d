"""The tier simulator's numba kernel: requests in, lifecycle events out.

All state lives in arrays owned by the Python driver (:mod:`kvreplay.tiers.sim`),
so the kernel is resumable: it stops when its event buffer is nearly full, the
driver streams the events to the trace writer, and calls it again.

Layout of the state (T = 4 tiers, gpu/cpu/cxl/ssd as schema tier codes; K keys;
O object ids):

- ``Q[t, q, QH|QT|QB|QN]``: head, tail, bytes, entries of queue q (small, main, ghost)
- ``S[t, k, :]``: per key and tier, one cache line: next (toward the tail, older) and
  previous link, where k is (0 absent, 1 small, 2 main, 3 ghost = not present), access
  counter, bytes of the copy, its object id
- ``OA[o, :]``: per object parent, tokens, tenant, scope, kind, bytes, live copies
- ``S[0, k, S_INST|S_PIN]``, ``S[1, k, S_LAST]``: per-key fields in the padding of tier rows
"""

from __future__ import annotations

import numpy as np
from devicemodels.jit import njit

from kvreplay.schema import (
    OP_COMMIT,
    OP_CREATE,
    OP_DELETE,
    OP_EVICT,
    OP_HIT,
    OP_INVALIDATE,
    OP_LOAD,
    OP_PERSIST,
    OP_RECOVER,
    OP_TRANSFORM,
)

NT = 4  # gpu, cpu, cxl, ssd (schema codes 0..3)
GPU, SSD = 0, 3
QS, QM, QG = 0, 1, 2  # small, main, ghost
QH, QT, QB, QN = 0, 1, 2, 3
W_NONE, W_SMALL, W_MAIN, W_GHOST = 0, 1, 2, 3
S_NEXT, S_PREV, S_W, S_F, S_CB, S_OI = range(6)
# per-key fields that belong to no tier sit in the padding of a tier row (one cache line per row):
# S[0, k, S_INST] live exact object of k (0 = none), S[0, k, S_PIN] request using k (pin),
# S[1, k, S_LAST] last use of k (retention)
S_INST, S_PIN = 6, 7
S_LAST = 6
S_WIDTH = 8

# policy parameter columns P[t, :]
P_SMALL, P_GHOST, P_PROMOTE, P_MAXF, P_TOUCH = range(5)

# object attribute columns OA[o, :]
OA_PARENT, OA_NTOK, OA_TENANT, OA_SCOPE, OA_KIND, OA_NBYTES, OA_COPIES, OA_SESSION = range(8)
OA_WIDTH = 8

# event buffer rows EV[:, i]
EV_TS, EV_OP, EV_OBJ, EV_PARENT, EV_TIER, EV_NBYTES, EV_NTOK, EV_TENANT, EV_SCOPE, EV_KIND, EV_REQ, EV_SESS = range(12)
EV_ROWS = 12

# scalars sc[:]
# SC_CAP: physical size of the event buffer (overflow guard); SC_SOFT: flush threshold (row group);
# SC_INV_POS: progress through the keys of the scope being invalidated (resumable)
SC_POS, SC_CAP, SC_NEXT_REQ, SC_CLOCK, SC_NEXT_OBJ, SC_NEXT_INV, SC_OVERFLOW, SC_CUR_REQ, SC_EX_N, SC_SOFT, SC_INV_POS = range(11)
SC_WIDTH = 11

# per-tier counters CT[t, :]
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
) = range(21)
CT_NAMES = (
    "lookups", "hits", "hit_bytes", "persists", "persist_bytes", "loads", "load_bytes", "evictions",
    "eviction_bytes", "deletes", "delete_bytes", "invalidations", "invalidation_bytes", "computed",
    "computed_bytes", "transforms", "transform_bytes", "peak_bytes", "rejected", "expirations", "expired_bytes",
)
CT_WIDTH = len(CT_NAMES)

# global counters G[:]
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

WRITE_THROUGH, SPILL = 0, 1


# ----------------------------------------------------------------------------- queues


@njit(inline="always")
def _push_head(Q, S, t, q, k, nb):
    h = Q[t, q, QH]
    S[t, k, S_NEXT] = h
    S[t, k, S_PREV] = -1
    if h >= 0:
        S[t, h, S_PREV] = k
    else:
        Q[t, q, QT] = k
    Q[t, q, QH] = k
    Q[t, q, QB] += nb
    Q[t, q, QN] += 1


@njit(inline="always")
def _unlink(Q, S, t, q, k, nb):
    nx = S[t, k, S_NEXT]
    pv = S[t, k, S_PREV]
    if pv >= 0:
        S[t, pv, S_NEXT] = nx
    else:
        Q[t, q, QH] = nx
    if nx >= 0:
        S[t, nx, S_PREV] = pv
    else:
        Q[t, q, QT] = pv
    Q[t, q, QB] -= nb
    Q[t, q, QN] -= 1


@njit(inline="always")
def _used(Q, t):
    return Q[t, QS, QB] + Q[t, QM, QB]


@njit(inline="always")
def pol_insert(Q, S, P, t, k, nb):
    """Admit key k (bytes nb) into tier t's queues; room must have been made."""
    if S[t, k, S_W] == W_GHOST:
        _unlink(Q, S, t, QG, k, S[t, k, S_CB])
        S[t, k, S_W] = W_MAIN
        _push_head(Q, S, t, QM, k, nb)
    elif P[t, P_SMALL] > 0.0:
        S[t, k, S_W] = W_SMALL
        _push_head(Q, S, t, QS, k, nb)
    else:
        S[t, k, S_W] = W_MAIN
        _push_head(Q, S, t, QM, k, nb)
    S[t, k, S_F] = 0
    S[t, k, S_CB] = nb


@njit(inline="always")
def pol_touch(Q, S, P, t, k):
    w = S[t, k, S_W]
    if P[t, P_TOUCH] > 0.0:
        q = w - 1
        _unlink(Q, S, t, q, k, S[t, k, S_CB])
        _push_head(Q, S, t, q, k, S[t, k, S_CB])
    if S[t, k, S_F] < P[t, P_MAXF]:
        S[t, k, S_F] += 1


@njit(inline="always")
def pol_remove(Q, S, t, k):
    """Drop k from whatever queue holds it (ghost included)."""
    w = S[t, k, S_W]
    if w != W_NONE:
        _unlink(Q, S, t, w - 1, k, S[t, k, S_CB])
        S[t, k, S_W] = W_NONE


@njit(inline="always")
def _ghost_add(Q, S, P, cap, t, k):
    limit = P[t, P_GHOST] * cap[t]
    if limit <= 0.0:
        S[t, k, S_W] = W_NONE
        return
    S[t, k, S_W] = W_GHOST
    _push_head(Q, S, t, QG, k, S[t, k, S_CB])
    while Q[t, QG, QB] > limit and Q[t, QG, QN] > 0:
        g = Q[t, QG, QT]
        _unlink(Q, S, t, QG, g, S[t, g, S_CB])
        S[t, g, S_W] = W_NONE


@njit(inline="always")
def pol_victim(Q, S, P, cap, t, cur, allow_pinned):
    """Choose and unlink a victim from tier t; -1 if the tier is empty.

    Keys in use by the running request (``S[0, k, S_PIN] == cur``: its cached prefix and the
    chunks it made so far) are skipped like a referenced entry, in every tier (a chunk being
    loaded is not evicted from under the load). If every entry is pinned, one is evicted
    anyway when ``allow_pinned`` (the request needs the room), else -1.
    """
    guard = Q[t, QS, QN] + Q[t, QM, QN]  # one full rotation
    skipped = 0
    while Q[t, QS, QN] + Q[t, QM, QN] > 0:
        use_small = Q[t, QS, QN] > 0 and (Q[t, QS, QB] >= P[t, P_SMALL] * cap[t] or Q[t, QM, QN] == 0)
        if use_small:
            k = Q[t, QS, QT]
            pinned = S[0, k, S_PIN] == cur
            if pinned and skipped >= guard:
                if not allow_pinned:
                    return -1
                pinned = False
            if S[t, k, S_F] >= P[t, P_PROMOTE] and P[t, P_PROMOTE] > 0.0 or pinned:
                _unlink(Q, S, t, QS, k, S[t, k, S_CB])
                S[t, k, S_W] = W_MAIN
                _push_head(Q, S, t, QM, k, S[t, k, S_CB])
                if pinned:
                    skipped += 1
                continue
            _unlink(Q, S, t, QS, k, S[t, k, S_CB])
            _ghost_add(Q, S, P, cap, t, k)
            return k
        k = Q[t, QM, QT]
        pinned = S[0, k, S_PIN] == cur
        if pinned and skipped >= guard:
            if not allow_pinned:
                return -1
            pinned = False
        if S[t, k, S_F] > 0 or pinned:
            if pinned:
                skipped += 1
            else:
                S[t, k, S_F] -= 1
            _unlink(Q, S, t, QM, k, S[t, k, S_CB])
            _push_head(Q, S, t, QM, k, S[t, k, S_CB])
            continue
        _unlink(Q, S, t, QM, k, S[t, k, S_CB])
        S[t, k, S_W] = W_NONE
        return k
    return -1


# ----------------------------------------------------------------------------- events


@njit(inline="always")
def _emit(EV, sc, OA, ts, op, o, tier, req, sess):
    i = sc[SC_POS]
    if i >= sc[SC_CAP]:
        sc[SC_OVERFLOW] = 1
        return
    EV[EV_TS, i] = ts
    EV[EV_OP, i] = op
    EV[EV_OBJ, i] = o
    EV[EV_PARENT, i] = OA[o, OA_PARENT]
    EV[EV_TIER, i] = tier
    EV[EV_NBYTES, i] = OA[o, OA_NBYTES]
    EV[EV_NTOK, i] = OA[o, OA_NTOK]
    EV[EV_TENANT, i] = OA[o, OA_TENANT]
    EV[EV_SCOPE, i] = OA[o, OA_SCOPE]
    EV[EV_KIND, i] = OA[o, OA_KIND]
    EV[EV_REQ, i] = req
    EV[EV_SESS, i] = sess
    sc[SC_POS] = i + 1


@njit(inline="always")
def _new_obj(sc, OA, parent, ntok, tenant, scope, kind, nbytes, sess):
    o = sc[SC_NEXT_OBJ]
    sc[SC_NEXT_OBJ] = o + 1
    OA[o, OA_PARENT] = parent
    OA[o, OA_NTOK] = ntok
    OA[o, OA_TENANT] = tenant
    OA[o, OA_SCOPE] = scope
    OA[o, OA_KIND] = kind
    OA[o, OA_NBYTES] = nbytes
    OA[o, OA_COPIES] = 0
    OA[o, OA_SESSION] = sess
    return o


@njit(inline="always")
def _end_copy(EV, sc, OA, CT, S, t, k, ts, req, sess, op_if_shared):
    """A copy left tier t (already unlinked): evict/invalidate, or delete if it was the last copy."""
    o = S[t, k, S_OI]
    S[t, k, S_OI] = 0
    OA[o, OA_COPIES] -= 1
    nb = OA[o, OA_NBYTES]
    op = op_if_shared
    if OA[o, OA_COPIES] == 0:
        if op_if_shared == OP_EVICT:
            op = OP_DELETE
        if S[0, k, S_INST] == o:
            S[0, k, S_INST] = 0
    _emit(EV, sc, OA, ts, op, o, t, req, sess)
    if op == OP_EVICT:
        CT[t, CT_EVICT] += 1
        CT[t, CT_EVICT_BYTES] += nb
    elif op == OP_DELETE:
        CT[t, CT_DELETE] += 1
        CT[t, CT_DELETE_BYTES] += nb
    else:
        CT[t, CT_INVAL] += 1
        CT[t, CT_INVAL_BYTES] += nb


@njit(inline="always")
def _lower(cap, t):
    for u in range(t + 1, NT):
        if cap[u] > 0:
            return u
    return -1


@njit(inline="always")
def _copy_for(sc, OA, CT, EV, tenant_kind, kind_ratio, x, u, src_tier, ts, req, sess):
    """Object that tier u stores for exact object x: x itself, or a derived (transformed) copy for the SSD."""
    if u != SSD:
        return x
    kd = tenant_kind[OA[x, OA_TENANT]]
    if kd == 0:
        return x
    nb = max(1, np.int64(OA[x, OA_NBYTES] * kind_ratio[kd]))
    y = _new_obj(sc, OA, x, OA[x, OA_NTOK], OA[x, OA_TENANT], OA[x, OA_SCOPE], kd, nb, OA[x, OA_SESSION])
    _emit(EV, sc, OA, ts, OP_TRANSFORM, y, src_tier, req, sess)
    CT[u, CT_TRANSFORM] += 1
    CT[u, CT_TRANSFORM_BYTES] += nb
    return y


@njit(inline="always")
def _size_in(OA, tenant_kind, kind_ratio, x, u):
    nb = OA[x, OA_NBYTES]
    if u == SSD:
        kd = tenant_kind[OA[x, OA_TENANT]]
        if kd != 0:
            return max(1, np.int64(nb * kind_ratio[kd]))
    return nb


@njit(inline="always")
def _place(Q, S, P, OA, CT, EV, sc, t, k, o, ts, req, sess, op):
    pol_insert(Q, S, P, t, k, OA[o, OA_NBYTES])
    S[t, k, S_OI] = o
    OA[o, OA_COPIES] += 1
    _emit(EV, sc, OA, ts, op, o, t, req, sess)
    if op == OP_PERSIST:
        CT[t, CT_PERSIST] += 1
        CT[t, CT_PERSIST_BYTES] += OA[o, OA_NBYTES]
    u = _used(Q, t)
    if u > CT[t, CT_PEAK_BYTES]:
        CT[t, CT_PEAK_BYTES] = u


@njit
def _make_room(Q, S, P, OA, CT, EV, sc, cap, tenant_kind, kind_ratio, wpol,
               t0, need0, ts, req, sess, FR):
    """Evict from tier t0 until ``need0`` more bytes fit; with the spill policy a victim is
    first written to the next lower tier (recursively making room there). Returns False if
    the object is larger than the tier. Frames are kept in small arrays (no recursion)."""
    if need0 > cap[t0]:
        return False
    d = 0
    FR[0, 0] = t0
    FR[1, 0] = -1
    FR[2, 0] = -1
    FR[3, 0] = need0
    cur = sc[SC_CUR_REQ]
    while True:
        t = FR[0, d]
        if FR[2, d] >= 0:
            _end_copy(EV, sc, OA, CT, S, t, FR[2, d], ts, req, sess, OP_EVICT)
            FR[2, d] = -1
        if _used(Q, t) + FR[3, d] > cap[t]:
            v = pol_victim(Q, S, P, cap, t, cur, d == 0)
            if v < 0:
                # a spill target full of chunks the request is using: drop the spill (the victim
                # above is simply evicted); at the top frame the tier is empty (cannot happen)
                if d == 0:
                    return False
                d -= 1
                continue
            FR[2, d] = v
            if wpol == SPILL:
                u = _lower(cap, t)
                if u >= 0 and (S[u, v, S_W] == W_NONE or S[u, v, S_W] == W_GHOST):
                    x = S[t, v, S_OI]
                    nb = _size_in(OA, tenant_kind, kind_ratio, x, u)
                    if nb <= cap[u]:
                        d += 1
                        FR[0, d] = u
                        FR[1, d] = v
                        FR[2, d] = -1
                        FR[3, d] = nb
            continue
        if d == 0:
            return True
        # room made in FR[0, d]: place the spilled victim there
        u = FR[0, d]
        v = FR[1, d]
        src = FR[0, d - 1]
        x = S[src, v, S_OI]
        o = _copy_for(sc, OA, CT, EV, tenant_kind, kind_ratio, x, u, src, ts, req, sess)
        _place(Q, S, P, OA, CT, EV, sc, u, v, o, ts, req, sess, OP_PERSIST)
        d -= 1


@njit(inline="always")
def _admit(Q, S, P, OA, CT, EV, sc, cap, tenant_kind, kind_ratio, wpol,
           t, k, x, src, ts, req, sess, FR):
    """Write exact object x (key k) into tier t as a persist (transforming it for the SSD if configured)."""
    nb = _size_in(OA, tenant_kind, kind_ratio, x, t)
    ok = True
    if _used(Q, t) + nb > cap[t]:
        # the copy in flight counts as one, so spilling cannot delete x while it is being placed
        OA[x, OA_COPIES] += 1
        ok = _make_room(Q, S, P, OA, CT, EV, sc, cap, tenant_kind, kind_ratio, wpol,
                        t, nb, ts, req, sess, FR)
        OA[x, OA_COPIES] -= 1
    if not ok:
        CT[t, CT_REJECTED] += 1
        return False
    o = _copy_for(sc, OA, CT, EV, tenant_kind, kind_ratio, x, t, src, ts, req, sess)
    _place(Q, S, P, OA, CT, EV, sc, t, k, o, ts, req, sess, OP_PERSIST)
    return True


@njit(inline="always")
def _present(S, t, k):
    w = S[t, k, S_W]
    return w == W_SMALL or w == W_MAIN


@njit
def _invalidate_scope(Q, S, OA, CT, EV, sc, cap, scope_keys, scope_off, s, ts, G):
    """Drop every copy of the scope's keys; returns False if it must be resumed after a flush."""
    i = scope_off[s] + sc[SC_INV_POS]
    while i < scope_off[s + 1]:
        if sc[SC_POS] + NT > sc[SC_SOFT]:
            sc[SC_INV_POS] = i - scope_off[s]
            return False
        k = scope_keys[i]
        for t in range(NT):
            if cap[t] <= 0:
                continue
            present = _present(S, t, k)
            pol_remove(Q, S, t, k)  # a ghost entry goes too
            if present:
                _end_copy(EV, sc, OA, CT, S, t, k, ts, -1, -1, OP_INVALIDATE)
                G[G_INV_EVENTS] += 1
        i += 1
    sc[SC_INV_POS] = 0
    return True


@njit(inline="always")
def _touch_ttl(ttl_ns, S, ex, ex_head, ex_tail, sc, k, tenant, ts):
    """Refresh key k's retention deadline (prompt-cache TTL): queue (ts + ttl, k) on its tenant's list.
    Deadlines of one tenant are queued in time order, so each list is a FIFO (no heap needed)."""
    ttl = ttl_ns[tenant]
    if ttl <= 0:
        return
    S[1, k, S_LAST] = ts
    i = sc[SC_EX_N]
    sc[SC_EX_N] = i + 1
    ex[i, 0] = ts + ttl
    ex[i, 1] = k
    ex[i, 2] = -1
    if ex_tail[tenant] >= 0:
        ex[ex_tail[tenant], 2] = i
    else:
        ex_head[tenant] = i
    ex_tail[tenant] = i


@njit
def _next_deadline(ex, ex_head):
    best = -1
    for g in range(ex_head.shape[0]):
        i = ex_head[g]
        if i >= 0 and (best < 0 or ex[i, 0] < ex[ex_head[best], 0]):
            best = g
    return best


@njit
def _expire_one(Q, S, OA, CT, EV, sc, cap, ttl_ns, ex, ex_head, ex_tail, g, G):
    """Pop tenant g's earliest deadline; if still current, delete every copy of the key."""
    i = ex_head[g]
    ex_head[g] = ex[i, 2]
    if ex_head[g] < 0:
        ex_tail[g] = -1
    dl = ex[i, 0]
    k = ex[i, 1]
    if S[1, k, S_LAST] + ttl_ns[g] != dl:
        return  # accessed again since: a later deadline is queued
    ts = max(dl, sc[SC_CLOCK])
    gone = False
    for t in range(NT):
        if cap[t] <= 0:
            continue
        if _present(S, t, k):
            pol_remove(Q, S, t, k)
            CT[t, CT_EXPIRED] += 1
            CT[t, CT_EXPIRED_BYTES] += OA[S[t, k, S_OI], OA_NBYTES]
            _end_copy(EV, sc, OA, CT, S, t, k, ts, -1, -1, OP_DELETE)
            gone = True
    if gone:
        G[G_EXPIRED] += 1


@njit
def _background(Q, S, OA, CT, EV, sc, cap, scope_keys, scope_off, inv_ts, inv_scope,
                ttl_ns, ex, ex_head, ex_tail, G, upto):
    """Invalidations and TTL expiries due by ``upto``, in time order. Returns False if the event
    buffer needs flushing first."""
    ninv = inv_ts.shape[0]
    while True:
        g = _next_deadline(ex, ex_head)
        if g < 0 and sc[SC_NEXT_INV] >= ninv:
            return True
        dl = ex[ex_head[g], 0] if g >= 0 else np.iinfo(np.int64).max
        iv = inv_ts[sc[SC_NEXT_INV]] if sc[SC_NEXT_INV] < ninv else np.iinfo(np.int64).max
        if min(dl, iv) > upto:
            return True
        if iv <= dl and sc[SC_NEXT_INV] < ninv:
            j = sc[SC_NEXT_INV]
            if not _invalidate_scope(Q, S, OA, CT, EV, sc, cap, scope_keys, scope_off, inv_scope[j],
                                     max(inv_ts[j], sc[SC_CLOCK]), G):
                return False
            sc[SC_NEXT_INV] = j + 1
        else:
            if sc[SC_POS] + 2 * NT > sc[SC_SOFT]:
                return False
            _expire_one(Q, S, OA, CT, EV, sc, cap, ttl_ns, ex, ex_head, ex_tail, g, G)


@njit(nogil=True)
def run_kernel(
    # requests
    arrival, out_tok, sess_of, tenant_of, scope_of, chunk_off, chunk_key, chunk_ntok,
    # keys
    scope_keys, scope_off,
    # invalidations
    inv_ts, inv_scope,
    # configuration
    cap, P, wpol, promote, bytes_per_token, prefill_ns_per_tok, decode_ns_per_tok, read_ns_per_byte,
    tenant_kind, kind_ratio, ttl_ns,
    # state
    Q, S, OA, sc, CT, G, EV, ex, ex_head, ex_tail,
    # scratch
    FR,
    margin_per_chunk,
):
    """Process requests from sc[SC_NEXT_REQ] until done or the event buffer needs flushing.

    Returns 1 when every request (and trailing invalidation) is processed, 0 to be called again.
    """
    n = arrival.shape[0]
    ninv = inv_ts.shape[0]
    while sc[SC_NEXT_REQ] < n:
        r = sc[SC_NEXT_REQ]
        c0 = chunk_off[r]
        c1 = chunk_off[r + 1]
        need = (c1 - c0 + 2) * margin_per_chunk
        if sc[SC_POS] > 0 and sc[SC_POS] + need > sc[SC_SOFT]:
            return 0
        start = max(arrival[r], sc[SC_CLOCK])
        # invalidations and retention expiries due before this request starts
        if not _background(Q, S, OA, CT, EV, sc, cap, scope_keys, scope_off, inv_ts, inv_scope,
                           ttl_ns, ex, ex_head, ex_tail, G, start):
            return 0
        sc[SC_CUR_REQ] = r
        sess = sess_of[r]
        ten = tenant_of[r]
        scp = scope_of[r]
        G[G_REQUESTS] += 1
        G[G_CHUNKS] += c1 - c0
        qd = start - arrival[r]
        G[G_QUEUE_NS] += qd
        if qd > G[G_QUEUE_NS_MAX]:
            G[G_QUEUE_NS_MAX] = qd
        ts = start
        # 1. reuse the longest cached prefix chunk by chunk (checked just before use, since loading
        # one chunk may evict a later one from a lower tier): hit in GPU, or load from the fastest
        # lower tier into GPU; stop at the first chunk no tier holds
        h = c1 - c0
        for j in range(c0, c1):
            k = chunk_key[j]
            t = -1
            for u in range(NT):
                if cap[u] <= 0:
                    continue
                CT[u, CT_LOOKUPS] += 1
                if _present(S, u, k):
                    t = u
                    break
            if t < 0:
                h = j - c0
                break
            CT[t, CT_HITS] += 1
            CT[t, CT_HIT_BYTES] += S[t, k, S_CB]
            G[G_HIT_CHUNKS] += 1
            G[G_HIT_TOKENS] += chunk_ntok[j]
            S[0, k, S_PIN] = r
            if t == GPU:
                o = S[GPU, k, S_OI]
                _emit(EV, sc, OA, ts, OP_HIT, o, GPU, r, sess)
                pol_touch(Q, S, P, GPU, k)
                _touch_ttl(ttl_ns, S, ex, ex_head, ex_tail, sc, k, OA[o, OA_TENANT], ts)
                continue
            o = S[t, k, S_OI]
            _emit(EV, sc, OA, ts, OP_LOAD, o, t, r, sess)
            CT[t, CT_LOAD] += 1
            CT[t, CT_LOAD_BYTES] += OA[o, OA_NBYTES]
            pol_touch(Q, S, P, t, k)
            dt = np.int64(OA[o, OA_NBYTES] * read_ns_per_byte[t])
            ts += dt
            G[G_LOAD_NS] += dt
            x = S[0, k, S_INST]
            if x == 0:
                # only a derived (quantized/compressed) copy survives: rebuild the exact object from it
                x = _new_obj(sc, OA, o, chunk_ntok[j], OA[o, OA_TENANT], OA[o, OA_SCOPE], 0,
                             chunk_ntok[j] * bytes_per_token, OA[o, OA_SESSION])
                S[0, k, S_INST] = x
                _emit(EV, sc, OA, ts, OP_TRANSFORM, x, GPU, r, sess)
                CT[GPU, CT_TRANSFORM] += 1
                CT[GPU, CT_TRANSFORM_BYTES] += OA[x, OA_NBYTES]
            _admit(Q, S, P, OA, CT, EV, sc, cap, tenant_kind, kind_ratio, wpol,
                   GPU, k, x, t, ts, r, sess, FR)
            _touch_ttl(ttl_ns, S, ex, ex_head, ex_tail, sc, k, OA[x, OA_TENANT], ts)
            if promote and wpol == WRITE_THROUGH:
                for u in range(1, t):
                    if cap[u] > 0 and not _present(S, u, k):
                        _admit(Q, S, P, OA, CT, EV, sc, cap, tenant_kind, kind_ratio,
                               wpol, u, k, x, GPU, ts, r, sess, FR)
        # 2. prefill the rest, chunk by chunk
        prev_obj = 0
        if h > 0:
            prev_obj = S[0, chunk_key[c0 + h - 1], S_INST]
        for j in range(c0 + h, c1):
            k = chunk_key[j]
            ntok = chunk_ntok[j]
            dt = np.int64(ntok * prefill_ns_per_tok)
            G[G_COMPUTED_TOKENS] += ntok
            G[G_BUSY_NS] += dt
            S[0, k, S_PIN] = r
            x = S[0, k, S_INST]
            if x != 0 and _present(S, GPU, k):
                # recomputed although resident (the prefix broke earlier): nothing new to store
                pol_touch(Q, S, P, GPU, k)
                ts += dt
                _touch_ttl(ttl_ns, S, ex, ex_head, ex_tail, sc, k, OA[x, OA_TENANT], ts)
                prev_obj = x
                continue
            nb = ntok * bytes_per_token
            if x == 0:
                x = _new_obj(sc, OA, prev_obj, ntok, ten, scp, 0, nb, sess)
                S[0, k, S_INST] = x
                G[G_NEW_OBJECTS] += 1
                if _used(Q, GPU) + nb <= cap[GPU] or _make_room(
                        Q, S, P, OA, CT, EV, sc, cap, tenant_kind, kind_ratio, wpol, GPU, nb, ts, r, sess,
                        FR):
                    _emit(EV, sc, OA, ts, OP_CREATE, x, GPU, r, sess)
                    ts += dt
                    _place(Q, S, P, OA, CT, EV, sc, GPU, k, x, ts, r, sess, OP_COMMIT)
                    CT[GPU, CT_CREATE] += 1
                    CT[GPU, CT_CREATE_BYTES] += nb
                else:
                    # larger than the whole GPU cache: computed and streamed through, never cached there
                    CT[GPU, CT_REJECTED] += 1
                    _emit(EV, sc, OA, ts, OP_CREATE, x, GPU, r, sess)
                    ts += dt
                    _emit(EV, sc, OA, ts, OP_DELETE, x, GPU, r, sess)
                    S[0, k, S_INST] = 0
                    prev_obj = x
                    continue
            else:
                # the object lives in a lower tier but the cached prefix broke before it: recompute
                G[G_RECOVERED] += 1
                ts += dt
                ok = True
                if _used(Q, GPU) + nb > cap[GPU]:
                    OA[x, OA_COPIES] += 1  # in flight (see _admit)
                    ok = _make_room(Q, S, P, OA, CT, EV, sc, cap, tenant_kind, kind_ratio, wpol,
                                    GPU, nb, ts, r, sess, FR)
                    OA[x, OA_COPIES] -= 1
                if ok:
                    _place(Q, S, P, OA, CT, EV, sc, GPU, k, x, ts, r, sess, OP_RECOVER)
                    CT[GPU, CT_CREATE] += 1
                    CT[GPU, CT_CREATE_BYTES] += nb
            if S[0, k, S_INST] == x:
                _touch_ttl(ttl_ns, S, ex, ex_head, ex_tail, sc, k, OA[x, OA_TENANT], ts)
            if wpol == WRITE_THROUGH and S[0, k, S_INST] == x:
                for u in range(1, NT):
                    if cap[u] > 0 and not _present(S, u, k):
                        _admit(Q, S, P, OA, CT, EV, sc, cap, tenant_kind, kind_ratio,
                               wpol, u, k, x, GPU, ts, r, sess, FR)
            prev_obj = x
        sc[SC_CLOCK] = ts
        end = ts + np.int64(out_tok[r] * decode_ns_per_tok)
        if end > G[G_DECODE_END_MAX]:
            G[G_DECODE_END_MAX] = end
        sc[SC_NEXT_REQ] = r + 1
    sc[SC_CUR_REQ] = -1
    # the rest of the invalidations, and every retention deadline still pending
    if not _background(Q, S, OA, CT, EV, sc, cap, scope_keys, scope_off, inv_ts, inv_scope,
                       ttl_ns, ex, ex_head, ex_tail, G, np.iinfo(np.int64).max):
        return 0
    return 1
