"""The tier simulator's numba kernel: requests in, lifecycle events out.

``run_kernel(rq, cfg, st)`` takes the three tuples of :mod:`kvreplay.tiers.state` (requests,
configuration, state; every array's dtype, shape and meaning is declared there). The state belongs
to the Python driver (:mod:`kvreplay.tiers.sim`), so the kernel is resumable: it stops when its
event buffer is nearly full, the driver streams the events to the trace writer, and calls it again.

Helpers take the tuples (``cfg``, ``st``) like :mod:`devicemodels.ftl_kernel`; the queue primitives
take the two arrays they work on. Kernels are compiled without numba's reference counting
(:func:`devicemodels.jit.kernel`): they never allocate, and reading an array out of a tuple then
costs nothing. With it (``njit``) every such read is counted: simulate() on the Mooncake
conversation trace took 2.18 s instead of 0.74 s (the kernel of 35 positional arguments: 1.37 s).
"""

from __future__ import annotations

import numpy as np
from devicemodels.jit import kernel

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
from kvreplay.tiers.state import (
    CT_CREATE,
    CT_CREATE_BYTES,
    CT_DELETE,
    CT_DELETE_BYTES,
    CT_EVICT,
    CT_EVICT_BYTES,
    CT_EXPIRED,
    CT_EXPIRED_BYTES,
    CT_HIT_BYTES,
    CT_HITS,
    CT_INVAL,
    CT_INVAL_BYTES,
    CT_LOAD,
    CT_LOAD_BYTES,
    CT_LOOKUPS,
    CT_PAST_PINNED,
    CT_PEAK_BYTES,
    CT_PERSIST,
    CT_PERSIST_BYTES,
    CT_REJECTED,
    CT_TRANSFORM,
    CT_TRANSFORM_BYTES,
    EV_KIND,
    EV_NBYTES,
    EV_NTOK,
    EV_OBJ,
    EV_OP,
    EV_PARENT,
    EV_REQ,
    EV_SCOPE,
    EV_SESS,
    EV_TENANT,
    EV_TIER,
    EV_TS,
    EX_DEADLINE,
    EX_KEY,
    EX_NEXT,
    G_BUSY_NS,
    G_CHUNKS,
    G_COMPUTED_TOKENS,
    G_DECODE_END_MAX,
    G_EXPIRED,
    G_HIT_CHUNKS,
    G_HIT_TOKENS,
    G_INV_EVENTS,
    G_LOAD_NS,
    G_NEW_OBJECTS,
    G_QUEUE_NS,
    G_QUEUE_NS_MAX,
    G_RECOVERED,
    G_REQUESTS,
    GPU,
    NT,
    OA_COPIES,
    OA_KIND,
    OA_NBYTES,
    OA_NTOK,
    OA_PARENT,
    OA_SCOPE,
    OA_SESSION,
    OA_TENANT,
    P_GHOST,
    P_MAXF,
    P_PROMOTE,
    P_SMALL,
    P_TOUCH,
    QB,
    QG,
    QH,
    QM,
    QN,
    QP,
    QR,
    QS,
    QT,
    S_CB,
    S_F,
    S_NEXT,
    S_OI,
    S_PREV,
    S_W,
    SC_CAP,
    SC_CLOCK,
    SC_CUR_REQ,
    SC_EX_N,
    SC_INV_POS,
    SC_NEXT_INV,
    SC_NEXT_OBJ,
    SC_NEXT_REQ,
    SC_OVERFLOW,
    SC_POS,
    SC_SOFT,
    SSD,
    TN_IN0,
    TN_RES0,
    TN_XIN,
    TN_XIN_BYTES,
    TN_XIN_TOKENS,
    TN_XOUT,
    TN_XOUT_BYTES,
    W_GHOST,
    W_MAIN,
    W_NONE,
    W_SMALL,
    SPILL,
    WRITE_THROUGH,
    XT_BYTES,
    XT_CHUNKS,
    XT_TOKENS,
)

# ----------------------------------------------------------------------------- queues


@kernel(inline="always")
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


@kernel(inline="always")
def _unlink(Q, S, t, q, k, nb):
    nx = S[t, k, S_NEXT]
    pv = S[t, k, S_PREV]
    if Q[t, q, QP] == k:  # the pinned run at the tail ends at k: it now ends one older (-1: empty)
        Q[t, q, QP] = nx
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


@kernel(inline="always")
def _used(Q, t):
    return Q[t, QS, QB] + Q[t, QM, QB]


@kernel(inline="always")
def pol_insert(cfg, st, t, k, nb):
    """Admit key k (bytes nb) into tier t's queues; room must have been made."""
    Q, S, P = st.Q, st.S, cfg.P
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


@kernel(inline="always")
def pol_touch(cfg, st, t, k):
    Q, S, P = st.Q, st.S, cfg.P
    w = S[t, k, S_W]
    if P[t, P_TOUCH] > 0.0:
        q = w - 1
        _unlink(Q, S, t, q, k, S[t, k, S_CB])
        _push_head(Q, S, t, q, k, S[t, k, S_CB])
    if S[t, k, S_F] < P[t, P_MAXF]:
        S[t, k, S_F] += 1


@kernel(inline="always")
def pol_remove(st, t, k):
    """Drop k from whatever queue holds it (ghost included)."""
    Q, S = st.Q, st.S
    w = S[t, k, S_W]
    if w != W_NONE:
        _unlink(Q, S, t, w - 1, k, S[t, k, S_CB])
        S[t, k, S_W] = W_NONE


@kernel(inline="always")
def _ghost_add(cfg, st, t, k):
    Q, S = st.Q, st.S
    limit = cfg.P[t, P_GHOST] * cfg.cap[t]
    if limit <= 0.0:
        S[t, k, S_W] = W_NONE
        return
    S[t, k, S_W] = W_GHOST
    _push_head(Q, S, t, QG, k, S[t, k, S_CB])
    while Q[t, QG, QB] > limit and Q[t, QG, QN] > 0:
        g = Q[t, QG, QT]
        _unlink(Q, S, t, QG, g, S[t, g, S_CB])
        S[t, g, S_W] = W_NONE


#: ``cur`` of a victim search that pins nothing (request ids are >= 0, ``TierState.pin`` -1 when unused)
NO_PIN = -2


@kernel(inline="always")
def _past_pinned_run(Q, S, pin, t, q, cur):
    """The oldest key of queue q that request ``cur`` does not use (-1: it uses them all), when its tail is one
    it uses. Those keys are passed over and stay where they stand: they form a run at the tail, whose newest
    key Q[t, q, QP] remembers while ``cur`` runs (QR), so a search starts past the run and each pinned key is
    passed over once per request, however many evictions the request causes."""
    if Q[t, q, QR] != cur:
        Q[t, q, QR] = cur
        Q[t, q, QP] = -1
    p = Q[t, q, QP]
    k = Q[t, q, QT] if p < 0 else S[t, p, S_PREV]
    while k >= 0 and pin[k] == cur:
        p = k
        k = S[t, k, S_PREV]
    Q[t, q, QP] = p
    return k


@kernel(inline="always")
def pol_victim(cfg, st, t, cur, allow_pinned):
    """Choose and unlink a victim from tier t; -1 if there is none.

    The policy runs as it would without pins, except that keys in use by the running request
    (``st.pin[k] == cur``: its cached prefix and the chunks it made so far) are passed over where they
    stand: their queue, place in it and access count stay as they are, and the policy goes on with the
    next key (S3-FIFO: if the queue it evicts from holds only such keys, it evicts from the other one).
    So a chunk being loaded is not evicted from under the load, in every tier. If every key of the tier
    is in use, the policy's own choice is evicted anyway when ``allow_pinned`` (the request needs the
    room), else -1 (a spill target: the spill is dropped). ``cur = NO_PIN`` pins nothing (a plain cache).
    Searches that passed over a pinned key, or refused a spill, count in CT_PAST_PINNED: when it stays 0
    the tier evicted exactly as the plain policy.
    """
    Q, S, P, cap, pin = st.Q, st.S, cfg.P, cfg.cap, st.pin
    passed = False
    while Q[t, QS, QN] + Q[t, QM, QN] > 0:
        use_small = Q[t, QS, QN] > 0 and (Q[t, QS, QB] >= P[t, P_SMALL] * cap[t] or Q[t, QM, QN] == 0)
        q = QS if use_small else QM
        k = Q[t, q, QT]
        if pin[k] == cur:  # the tail is in use (never with cur = NO_PIN): past the pinned run
            passed = True
            k = _past_pinned_run(Q, S, pin, t, q, cur)
        if k < 0:
            q = QM if use_small else QS
            k = Q[t, q, QT]
            if k >= 0 and pin[k] == cur:
                k = _past_pinned_run(Q, S, pin, t, q, cur)
            if k < 0:
                if not allow_pinned:
                    st.CT[t, CT_PAST_PINNED] += 1
                    return -1
                cur = NO_PIN  # every key is in use: as if none were
                passed = False
                continue
        if q == QS:
            if S[t, k, S_F] >= P[t, P_PROMOTE] and P[t, P_PROMOTE] > 0.0:
                _unlink(Q, S, t, QS, k, S[t, k, S_CB])
                S[t, k, S_W] = W_MAIN
                S[t, k, S_F] = 0  # enters the main queue unreferenced (S3-FIFO's reference implementation)
                _push_head(Q, S, t, QM, k, S[t, k, S_CB])
                continue
            _unlink(Q, S, t, QS, k, S[t, k, S_CB])
            _ghost_add(cfg, st, t, k)
        elif S[t, k, S_F] > 0:
            S[t, k, S_F] -= 1
            _unlink(Q, S, t, QM, k, S[t, k, S_CB])
            _push_head(Q, S, t, QM, k, S[t, k, S_CB])
            continue
        else:
            _unlink(Q, S, t, QM, k, S[t, k, S_CB])
            S[t, k, S_W] = W_NONE
        if passed:
            st.CT[t, CT_PAST_PINNED] += 1
        return k
    return -1


# ----------------------------------------------------------------------------- events


@kernel(inline="always")
def _emit(st, ts, op, o, tier, req, sess):
    sc, EV, OA = st.sc, st.EV, st.OA
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


@kernel(inline="always")
def _new_obj(st, parent, ntok, tenant, scope, kind, nbytes, sess, key):
    sc, OA = st.sc, st.OA
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
    st.okey[o] = key
    return o


@kernel(inline="always")
def _end_copy(st, t, k, ts, req, sess, op_if_shared):
    """A copy left tier t (already unlinked): evict/invalidate, or delete if it was the last copy."""
    S, OA, CT = st.S, st.OA, st.CT
    o = S[t, k, S_OI]
    S[t, k, S_OI] = 0
    OA[o, OA_COPIES] -= 1
    nb = OA[o, OA_NBYTES]
    st.TN[OA[o, OA_TENANT], TN_RES0 + t] -= nb
    op = op_if_shared
    if OA[o, OA_COPIES] == 0:
        if op_if_shared == OP_EVICT:
            op = OP_DELETE
        if st.inst[k] == o:
            st.inst[k] = 0
    _emit(st, ts, op, o, t, req, sess)
    if op == OP_EVICT:
        CT[t, CT_EVICT] += 1
        CT[t, CT_EVICT_BYTES] += nb
    elif op == OP_DELETE:
        CT[t, CT_DELETE] += 1
        CT[t, CT_DELETE_BYTES] += nb
    else:
        CT[t, CT_INVAL] += 1
        CT[t, CT_INVAL_BYTES] += nb


@kernel(inline="always")
def _cross_tenant(st, t, k, o, ten, ntok):
    """Chunk k served from tier t (hit or load of object o) to a request of tenant ``ten``, which did
    not create o: the reuse a shared cache gives across tenants (and what a timing attack observes)."""
    XT, TN = st.XT, st.TN
    nb = st.S[t, k, S_CB]
    XT[t, XT_CHUNKS] += 1
    XT[t, XT_BYTES] += nb
    XT[t, XT_TOKENS] += ntok
    TN[ten, TN_XIN] += 1
    TN[ten, TN_XIN_BYTES] += nb
    TN[ten, TN_XIN_TOKENS] += ntok
    g = st.OA[o, OA_TENANT]
    TN[g, TN_XOUT] += 1
    TN[g, TN_XOUT_BYTES] += nb


@kernel(inline="always")
def _lower(cfg, t):
    for u in range(t + 1, NT):
        if cfg.cap[u] > 0:
            return u
    return -1


@kernel(inline="always")
def _copy_for(cfg, st, x, u, src_tier, ts, req, sess):
    """Object that tier u stores for exact object x: x itself, or a derived (transformed) copy for the SSD."""
    if u != SSD:
        return x
    OA = st.OA
    kd = cfg.tenant_kind[OA[x, OA_TENANT]]
    if kd == 0:
        return x
    nb = max(1, np.int64(OA[x, OA_NBYTES] * cfg.kind_ratio[kd]))
    y = _new_obj(st, x, OA[x, OA_NTOK], OA[x, OA_TENANT], OA[x, OA_SCOPE], kd, nb, OA[x, OA_SESSION],
                 st.okey[x])
    _emit(st, ts, OP_TRANSFORM, y, src_tier, req, sess)
    st.CT[u, CT_TRANSFORM] += 1
    st.CT[u, CT_TRANSFORM_BYTES] += nb
    return y


@kernel(inline="always")
def _size_in(cfg, st, x, u):
    OA = st.OA
    nb = OA[x, OA_NBYTES]
    if u == SSD:
        kd = cfg.tenant_kind[OA[x, OA_TENANT]]
        if kd != 0:
            return max(1, np.int64(nb * cfg.kind_ratio[kd]))
    return nb


@kernel(inline="always")
def _place(cfg, st, t, k, o, ts, req, sess, op):
    OA, CT = st.OA, st.CT
    pol_insert(cfg, st, t, k, OA[o, OA_NBYTES])
    st.S[t, k, S_OI] = o
    OA[o, OA_COPIES] += 1
    g = OA[o, OA_TENANT]
    st.TN[g, TN_IN0 + t] += OA[o, OA_NBYTES]
    st.TN[g, TN_RES0 + t] += OA[o, OA_NBYTES]
    _emit(st, ts, op, o, t, req, sess)
    if op == OP_PERSIST:
        CT[t, CT_PERSIST] += 1
        CT[t, CT_PERSIST_BYTES] += OA[o, OA_NBYTES]
    u = _used(st.Q, t)
    if u > CT[t, CT_PEAK_BYTES]:
        CT[t, CT_PEAK_BYTES] = u


@kernel
def _make_room(cfg, st, t0, need0, ts, req, sess):
    """Evict from tier t0 until ``need0`` more bytes fit; with the spill policy a victim is
    first written to the next lower tier (recursively making room there). Returns False if
    the object is larger than the tier. Frames are kept in small arrays (no recursion)."""
    cap, S, FR = cfg.cap, st.S, st.FR
    if need0 > cap[t0]:
        return False
    d = 0
    FR[0, 0] = t0
    FR[1, 0] = -1
    FR[2, 0] = -1
    FR[3, 0] = need0
    cur = st.sc[SC_CUR_REQ] if cfg.pinning else NO_PIN
    while True:
        t = FR[0, d]
        if FR[2, d] >= 0:
            _end_copy(st, t, FR[2, d], ts, req, sess, OP_EVICT)
            FR[2, d] = -1
        if _used(st.Q, t) + FR[3, d] > cap[t]:
            v = pol_victim(cfg, st, t, cur, d == 0)
            if v < 0:
                # a spill target full of chunks the request is using: drop the spill (the victim
                # above is simply evicted); at the top frame the tier is empty (cannot happen)
                if d == 0:
                    return False
                d -= 1
                continue
            FR[2, d] = v
            if cfg.wpol == SPILL:
                u = _lower(cfg, t)
                if u >= 0 and (S[u, v, S_W] == W_NONE or S[u, v, S_W] == W_GHOST):
                    x = S[t, v, S_OI]
                    nb = _size_in(cfg, st, x, u)
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
        o = _copy_for(cfg, st, x, u, src, ts, req, sess)
        _place(cfg, st, u, v, o, ts, req, sess, OP_PERSIST)
        d -= 1


@kernel(inline="always")
def _admit(cfg, st, t, k, x, src, ts, req, sess):
    """Write exact object x (key k) into tier t as a persist (transforming it for the SSD if configured)."""
    OA = st.OA
    nb = _size_in(cfg, st, x, t)
    ok = True
    if _used(st.Q, t) + nb > cfg.cap[t]:
        # the copy in flight counts as one, so spilling cannot delete x while it is being placed
        OA[x, OA_COPIES] += 1
        ok = _make_room(cfg, st, t, nb, ts, req, sess)
        OA[x, OA_COPIES] -= 1
    if not ok:
        st.CT[t, CT_REJECTED] += 1
        return False
    o = _copy_for(cfg, st, x, t, src, ts, req, sess)
    _place(cfg, st, t, k, o, ts, req, sess, OP_PERSIST)
    return True


@kernel(inline="always")
def _present(st, t, k):
    w = st.S[t, k, S_W]
    return w == W_SMALL or w == W_MAIN


@kernel
def _invalidate_scope(rq, cfg, st, s, ts):
    """Drop every copy of the scope's keys; returns False if it must be resumed after a flush."""
    sc, scope_off = st.sc, rq.scope_off
    i = scope_off[s] + sc[SC_INV_POS]
    while i < scope_off[s + 1]:
        if sc[SC_POS] + NT > sc[SC_SOFT]:
            sc[SC_INV_POS] = i - scope_off[s]
            return False
        k = rq.scope_keys[i]
        for t in range(NT):
            if cfg.cap[t] <= 0:
                continue
            present = _present(st, t, k)
            pol_remove(st, t, k)  # a ghost entry goes too
            if present:
                _end_copy(st, t, k, ts, -1, -1, OP_INVALIDATE)
                st.G[G_INV_EVENTS] += 1
        i += 1
    sc[SC_INV_POS] = 0
    return True


@kernel(inline="always")
def _touch_ttl(cfg, st, k, tenant, ts):
    """Refresh key k's retention deadline (prompt-cache TTL): queue (ts + ttl, k) on its tenant's list.
    Deadlines of one tenant are queued in time order, so each list is a FIFO (no heap needed)."""
    ttl = cfg.ttl_ns[tenant]
    if ttl <= 0:
        return
    ex, ex_head, ex_tail, sc = st.ex, st.ex_head, st.ex_tail, st.sc
    st.last_use[k] = ts
    i = sc[SC_EX_N]
    sc[SC_EX_N] = i + 1
    ex[i, EX_DEADLINE] = ts + ttl
    ex[i, EX_KEY] = k
    ex[i, EX_NEXT] = -1
    if ex_tail[tenant] >= 0:
        ex[ex_tail[tenant], EX_NEXT] = i
    else:
        ex_head[tenant] = i
    ex_tail[tenant] = i


@kernel
def _next_deadline(st):
    """Tenant whose pending retention deadline comes first (-1: none)."""
    ex, ex_head = st.ex, st.ex_head
    best = -1
    for g in range(ex_head.shape[0]):
        i = ex_head[g]
        if i >= 0 and (best < 0 or ex[i, EX_DEADLINE] < ex[ex_head[best], EX_DEADLINE]):
            best = g
    return best


@kernel
def _expire_one(cfg, st, g):
    """Pop tenant g's earliest deadline; if still current, delete every copy of the key."""
    ex, ex_head, ex_tail, S = st.ex, st.ex_head, st.ex_tail, st.S
    i = ex_head[g]
    ex_head[g] = ex[i, EX_NEXT]
    if ex_head[g] < 0:
        ex_tail[g] = -1
    dl = ex[i, EX_DEADLINE]
    k = ex[i, EX_KEY]
    if st.last_use[k] + cfg.ttl_ns[g] != dl:
        return  # accessed again since: a later deadline is queued
    ts = max(dl, st.sc[SC_CLOCK])
    gone = False
    for t in range(NT):
        if cfg.cap[t] <= 0:
            continue
        if _present(st, t, k):
            pol_remove(st, t, k)
            st.CT[t, CT_EXPIRED] += 1
            st.CT[t, CT_EXPIRED_BYTES] += st.OA[S[t, k, S_OI], OA_NBYTES]
            _end_copy(st, t, k, ts, -1, -1, OP_DELETE)
            gone = True
    if gone:
        st.G[G_EXPIRED] += 1


@kernel
def _background(rq, cfg, st, upto):
    """Invalidations and TTL expiries due by ``upto``, in time order. Returns False if the event
    buffer needs flushing first."""
    sc, inv_ts = st.sc, rq.inv_ts
    ninv = inv_ts.shape[0]
    while True:
        g = _next_deadline(st)
        if g < 0 and sc[SC_NEXT_INV] >= ninv:
            return True
        dl = st.ex[st.ex_head[g], EX_DEADLINE] if g >= 0 else np.iinfo(np.int64).max
        iv = inv_ts[sc[SC_NEXT_INV]] if sc[SC_NEXT_INV] < ninv else np.iinfo(np.int64).max
        if min(dl, iv) > upto:
            return True
        if iv <= dl and sc[SC_NEXT_INV] < ninv:
            j = sc[SC_NEXT_INV]
            if not _invalidate_scope(rq, cfg, st, rq.inv_scope[j], max(inv_ts[j], sc[SC_CLOCK])):
                return False
            sc[SC_NEXT_INV] = j + 1
        else:
            if sc[SC_POS] + 2 * NT > sc[SC_SOFT]:
                return False
            _expire_one(cfg, st, g)


@kernel(nogil=True)
def run_kernel(rq, cfg, st):
    """Process requests from sc[SC_NEXT_REQ] until done or the event buffer needs flushing.

    Returns 1 when every request (and trailing invalidation) is processed, 0 to be called again.
    """
    S, OA, sc, CT, G = st.S, st.OA, st.sc, st.CT, st.G
    inst, pin = st.inst, st.pin
    cap, wpol = cfg.cap, cfg.wpol
    arrival, chunk_off, chunk_key, chunk_ntok = rq.arrival, rq.chunk_off, rq.chunk_key, rq.chunk_ntok
    n = arrival.shape[0]
    while sc[SC_NEXT_REQ] < n:
        r = sc[SC_NEXT_REQ]
        c0 = chunk_off[r]
        c1 = chunk_off[r + 1]
        need = (c1 - c0 + 2) * cfg.margin
        if sc[SC_POS] > 0 and sc[SC_POS] + need > sc[SC_SOFT]:
            return 0
        start = max(arrival[r], sc[SC_CLOCK])
        # invalidations and retention expiries due before this request starts
        if not _background(rq, cfg, st, start):
            return 0
        sc[SC_CUR_REQ] = r
        sess = rq.sess[r]
        ten = rq.tenant[r]
        scp = rq.scope[r]
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
                if _present(st, u, k):
                    t = u
                    break
            if t < 0:
                h = j - c0
                break
            CT[t, CT_HITS] += 1
            CT[t, CT_HIT_BYTES] += S[t, k, S_CB]
            G[G_HIT_CHUNKS] += 1
            G[G_HIT_TOKENS] += chunk_ntok[j]
            pin[k] = r
            o = S[t, k, S_OI]
            if OA[o, OA_TENANT] != ten:
                _cross_tenant(st, t, k, o, ten, chunk_ntok[j])
            if t == GPU:
                _emit(st, ts, OP_HIT, o, GPU, r, sess)
                pol_touch(cfg, st, GPU, k)
                _touch_ttl(cfg, st, k, OA[o, OA_TENANT], ts)
                continue
            _emit(st, ts, OP_LOAD, o, t, r, sess)
            CT[t, CT_LOAD] += 1
            CT[t, CT_LOAD_BYTES] += OA[o, OA_NBYTES]
            pol_touch(cfg, st, t, k)
            dt = np.int64(OA[o, OA_NBYTES] * cfg.read_ns_per_byte[t])
            ts += dt
            G[G_LOAD_NS] += dt
            x = inst[k]
            if x == 0:
                # only a derived (quantized/compressed) copy survives: rebuild the exact object from it
                x = _new_obj(st, o, chunk_ntok[j], OA[o, OA_TENANT], OA[o, OA_SCOPE], 0,
                             chunk_ntok[j] * cfg.bytes_per_token, OA[o, OA_SESSION], k)
                inst[k] = x
                _emit(st, ts, OP_TRANSFORM, x, GPU, r, sess)
                CT[GPU, CT_TRANSFORM] += 1
                CT[GPU, CT_TRANSFORM_BYTES] += OA[x, OA_NBYTES]
            _admit(cfg, st, GPU, k, x, t, ts, r, sess)
            _touch_ttl(cfg, st, k, OA[x, OA_TENANT], ts)
            if cfg.promote and wpol == WRITE_THROUGH:
                for u in range(1, t):
                    if cap[u] > 0 and not _present(st, u, k):
                        _admit(cfg, st, u, k, x, GPU, ts, r, sess)
        st.req_hit[r] = h
        # 2. prefill the rest, chunk by chunk
        prev_obj = 0
        if h > 0:
            prev_obj = inst[chunk_key[c0 + h - 1]]
        for j in range(c0 + h, c1):
            k = chunk_key[j]
            ntok = chunk_ntok[j]
            dt = np.int64(ntok * cfg.prefill_ns_per_tok)
            G[G_COMPUTED_TOKENS] += ntok
            G[G_BUSY_NS] += dt
            pin[k] = r
            x = inst[k]
            if x != 0 and _present(st, GPU, k):
                # recomputed although resident (the prefix broke earlier): nothing new to store
                pol_touch(cfg, st, GPU, k)
                ts += dt
                _touch_ttl(cfg, st, k, OA[x, OA_TENANT], ts)
                prev_obj = x
                continue
            nb = ntok * cfg.bytes_per_token
            if x == 0:
                x = _new_obj(st, prev_obj, ntok, ten, scp, 0, nb, sess, k)
                inst[k] = x
                G[G_NEW_OBJECTS] += 1
                if _used(st.Q, GPU) + nb <= cap[GPU] or _make_room(cfg, st, GPU, nb, ts, r, sess):
                    _emit(st, ts, OP_CREATE, x, GPU, r, sess)
                    ts += dt
                    _place(cfg, st, GPU, k, x, ts, r, sess, OP_COMMIT)
                    CT[GPU, CT_CREATE] += 1
                    CT[GPU, CT_CREATE_BYTES] += nb
                else:
                    # larger than the whole GPU cache: computed and streamed through, never cached there
                    CT[GPU, CT_REJECTED] += 1
                    _emit(st, ts, OP_CREATE, x, GPU, r, sess)
                    ts += dt
                    _emit(st, ts, OP_DELETE, x, GPU, r, sess)
                    inst[k] = 0
                    prev_obj = x
                    continue
            else:
                # the object lives in a lower tier but the cached prefix broke before it: recompute
                G[G_RECOVERED] += 1
                ts += dt
                ok = True
                if _used(st.Q, GPU) + nb > cap[GPU]:
                    OA[x, OA_COPIES] += 1  # in flight (see _admit)
                    ok = _make_room(cfg, st, GPU, nb, ts, r, sess)
                    OA[x, OA_COPIES] -= 1
                if ok:
                    _place(cfg, st, GPU, k, x, ts, r, sess, OP_RECOVER)
                    CT[GPU, CT_CREATE] += 1
                    CT[GPU, CT_CREATE_BYTES] += nb
            if inst[k] == x:
                _touch_ttl(cfg, st, k, OA[x, OA_TENANT], ts)
            if wpol == WRITE_THROUGH and inst[k] == x:
                for u in range(1, NT):
                    if cap[u] > 0 and not _present(st, u, k):
                        _admit(cfg, st, u, k, x, GPU, ts, r, sess)
            prev_obj = x
        sc[SC_CLOCK] = ts
        end = ts + np.int64(rq.out_tok[r] * cfg.decode_ns_per_tok)
        if end > G[G_DECODE_END_MAX]:
            G[G_DECODE_END_MAX] = end
        sc[SC_NEXT_REQ] = r + 1
    sc[SC_CUR_REQ] = -1
    # the rest of the invalidations, and every retention deadline still pending
    if not _background(rq, cfg, st, np.iinfo(np.int64).max):
        return 0
    return 1
