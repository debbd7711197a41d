"""The payload model and the state every fault acts on, advanced event by event in one numba kernel.

Payload: an object's content is a function of (its content, scope version) - the content being its
``content_key``, scope and kind (its object id when the trace has no keys), the version that of its scope
when its KV was computed (create, recover, transform). A load is *correct* when what it reads is that
content, complete, at the scope's current version; so "correct" can be checked anywhere without bytes.

State (object ids index dense arrays):

- trace tiers (every tier but the replayed one): per (tier, object) the version a copy holds (-1: none),
  whether it is torn/corrupt, and when it was written;
- the replayed tier (on the device): a content map with one entry per mapping unit - the *write sequence*
  whose data it holds (0: zeros: trimmed or never written) and the one before (so a write that never reached
  the media can be undone); per write sequence its object, version, units and its write ops in the op log;
  the host-side index (key -> write sequence the entry points at), which faults may lose or roll back.

The index is keyed by content, as a store that looks chunks up by their prefix-chain hash is: objects with one
``content_key``, scope and kind share a *key slot* (:func:`assign_slots`), so a chunk
recomputed under a new object id finds the entry of its earlier copy. After a stale restore that entry may
point at an extent trimmed or rewritten since: the load reads whatever is there (served wrong, detected by
the contract, or *lucky*: the units happen to hold the same content). A trace without keys (format v1, or
key 0) keys the index by object id (each object its own slot), where such an entry is never looked up again.

The arrays are the NamedTuples of :mod:`kvreplay.faults.state` (each field's dtype, shape and meaning there).

Loads (load/hit events; and a ``create`` of an object the index claims the device holds, which a store with
that index would have loaded instead of computing: a *phantom* load) are classified into the outcomes below,
per fault, tier and object kind. After a detected or missing load the object is recomputed and its copy is
good again; a load served wrong leaves the bad copy in place (nothing noticed it).
"""

from __future__ import annotations

import numpy as np

from devicemodels.base import OP_TRIM, OP_WRITE
from devicemodels.jit import njit
from kvreplay import schema as S
from kvreplay.faults.contract import CHECK_CHECKSUM, CHECK_LEASE, CHECK_VERSION
from kvreplay.keycheck import EMPTY, _slot
from kvreplay.layout.actions import A_NONE, A_READ, A_WRITE

OUTCOMES = ("reused", "detected", "missing", "wrong")
O_REUSED, O_DETECTED, O_MISSING, O_WRONG = range(4)
MEASURES = ("objects", "bytes", "tokens")
# cost[] slots
(K_WRITES, K_EXTRA_PAGES_W, K_READS, K_EXTRA_PAGES_R, K_VERIFIED, K_VERIFIED_BYTES, K_DETECTED_VALID,
 K_PHANTOM, K_MEDIA_ERRORS) = range(9)
K_N = 9
# stale[fault slot, S_*, objects/bytes]: loads through a stale index entry, those served correct anyway, those
# whose entry's units held another content whole, and those served wrong (the contract let them through)
S_STALE, S_LUCKY, S_FOREIGN, S_WRONG = 0, 1, 2, 3
S_N = 4


@njit(inline="always")
def _uniform(seed, row):
    """A uniform [0, 1) draw that depends only on (seed, row): splitmix64, no generator state."""
    z = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(row) + np.uint64(0x632BE59BD9B4E019)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(inline="always")
def _pages(nbytes, page_bytes):
    return max(1, (nbytes + page_bytes - 1) // page_bytes)


@njit(inline="always")
def _trim(lba, npages, lba_seq, lba_prev):
    """Trimmed units hold no write any more (nor one to fall back to)."""
    for q in range(lba, lba + npages):
        lba_seq[q] = 0
        lba_prev[q] = 0


@njit(nogil=True)
def _dev_load(c, exp, checks, corrupt, st):
    """(outcome, content was correct, units held another content whole) of a load of key slot ``c`` from the
    replayed tier (``st``: FaultArrays): the index entry of ``c`` names a write sequence; what its units hold now
    is what the load reads. Correct when they hold, whole and intact, a write of the same content (key slot) at
    the scope's version ``exp``; *foreign* when they hold, whole and intact, another content's write (its own
    checksum is right: only a check naming the content or the write tells)."""
    ix_seq, restored, slot = st.dev.ix_seq, st.dev.restored, st.dev.slot
    lba_seq = st.media.lba_seq
    w_obj, w_ver, w_pages, w_lo, w_hi, w_bad = (st.writes.obj, st.writes.ver, st.writes.pages, st.writes.lo,
                                                st.writes.hi, st.writes.bad)
    lg_lba, lg_np = st.log.lba, st.log.npages
    if restored[c]:
        return O_REUSED, True, False
    s = ix_seq[c]
    if s == 0:
        return O_MISSING, False, False
    h = -1
    intact = True
    npg = 0
    for k in range(w_lo[s], w_hi[s]):
        for p in range(lg_lba[k], lg_lba[k] + lg_np[k]):
            q = lba_seq[p]
            if h < 0:
                h = q
            elif q != h:
                intact = False
            npg += 1
    if h < 0:
        h = 0
    zeros = h == 0
    if zeros or w_pages[h] != npg:
        intact = False
    bad = corrupt or (not zeros and w_bad[h] != 0)
    cslot = slot[w_obj[h]] if not zeros else np.int64(-1)  # the content the units hold (header: key or id)
    cver = w_ver[h] if not zeros else np.int64(-1)
    correct = intact and not bad and cslot == c and cver == exp
    foreign = intact and not bad and cslot != c
    det = False
    if (checks & CHECK_CHECKSUM) and (not intact or bad):
        det = True
    if (checks & CHECK_VERSION) and (zeros or cslot != c or cver != exp):
        det = True
    if (checks & CHECK_LEASE) and h != s:
        det = True
    if det:
        return O_DETECTED, correct, foreign
    return (O_REUSED if correct else O_WRONG), correct, foreign


@njit(inline="always")
def _count_stale(st, c, out, foreign, fault_slot, nbytes):
    """A load through an entry a fault-free index does not hold (stale): whether it was served correct (lucky),
    served wrong (the contract did not catch it) and whether the entry's units held another content whole
    (foreign)."""
    dev = st.dev
    s = dev.ix_seq[c]
    if dev.restored[c] == 0 and s != 0 and s != dev.true_seq[c]:
        sc = st.counts.stale[fault_slot]
        sc[S_STALE, 0] += 1
        sc[S_STALE, 1] += nbytes
        if out == O_REUSED:
            sc[S_LUCKY, 0] += 1
            sc[S_LUCKY, 1] += nbytes
        elif out == O_WRONG:
            sc[S_WRONG, 0] += 1
            sc[S_WRONG, 1] += nbytes
        if foreign:
            sc[S_FOREIGN, 0] += 1
            sc[S_FOREIGN, 1] += nbytes


@njit(nogil=True)
def assign_slots(ev, table, slot):
    """Give each object first seen in the batch ``ev`` (FaultEvents) its key slot: ``slot[o]`` (-1: not seen
    yet) becomes the id of the first object seen with its (content_key, scope, kind), found in ``table``
    (keycheck.KeyState's open-addressing table: key, place -> that object; room made by keycheck.ensure), or
    its own id when its key is 0 (none known: a v1 trace reads 0). Slots are object ids, so with no keys
    ``slot[o] == o``. Scope and kind are part of the key as they are of trace validate's "one live object per
    content" (kvreplay.keycheck): a derived copy keeps its source's key but holds other bytes. Returns the
    number of objects given a slot."""
    obj, key, scope, kind = ev.obj, ev.key, ev.scope, ev.kind
    tk, td, th, used = table.tk, table.td, table.th, table.used
    seen = 0
    for i in range(obj.shape[0]):
        o = obj[i]
        if slot[o] >= 0:
            continue
        seen += 1
        k = key[i]
        if k == 0:
            slot[o] = np.int64(o)
            continue
        place = np.int64(scope[i]) * 256 + np.int64(kind[i])
        j = _slot(tk, td, k, place, True)
        if td[j] == EMPTY:
            td[j] = place
            tk[j] = k
            th[j] = np.int64(o)
            used[0] += 1
        slot[o] = th[j]
    return seen


@njit(nogil=True)
def events_kernel(ev, a, b, cfg, st):
    """Advance the state ``st`` (FaultArrays) over rows [a, b) of the batch ``ev`` (FaultEvents; global row
    = ev.row0 + i); classify every load. ``cfg``: FaultConfig (tuples: :mod:`kvreplay.faults.state`).

    ``cfg.fault_slot``: where outcomes are counted (0: before any fault, f + 1: after fault f);
    ``kp``/``wn``: one-element cursors (next op log entry, next write sequence) carried between calls."""
    ts, op, obj, tier, nbytes, ntokens, scope, kind = (ev.ts, ev.op, ev.obj, ev.tier, ev.nbytes, ev.ntokens,
                                                       ev.scope, ev.kind)
    row0 = ev.row0
    lut, t0, window_ns, dev_tier = cfg.lut, cfg.t0, cfg.window_ns, cfg.dev_tier
    page_bytes, header_bytes, checks, seed = cfg.page_bytes, cfg.header_bytes, cfg.checks, cfg.seed
    fault_slot, media_rate, media_from = cfg.fault_slot, cfg.media_rate, cfg.media_from
    lg = st.log
    lg_row, lg_op, lg_lba, lg_np, lg_w, kp = lg.row, lg.op, lg.lba, lg.npages, lg.w, lg.kp
    o_ver, scope_ver = st.ver.o_ver, st.ver.scope_ver
    cp_ver, cp_bad, cp_ts = st.tiers.cp_ver, st.tiers.cp_bad, st.tiers.cp_ts
    slot, ix_seq, restored, true_seq = st.dev.slot, st.dev.ix_seq, st.dev.restored, st.dev.true_seq
    lba_seq, lba_prev = st.media.lba_seq, st.media.lba_prev
    wr = st.writes
    w_obj, w_ver, w_pages, w_lo, w_hi, w_bad, wn = wr.obj, wr.ver, wr.pages, wr.lo, wr.hi, wr.bad, wr.wn
    acc, tw, cost = st.counts.acc, st.counts.tw, st.counts.cost
    n_log = len(lg_row)
    n_tiers = cp_ver.shape[0]
    for i in range(a, b):
        o = obj[i]
        c = slot[o]  # the index's key: the object's content, or the object (no keys)
        t = tier[i]
        p = op[i]
        r = row0 + i
        exp = scope_ver[scope[i]]
        rel = ts[i] - t0
        w_idx = rel // window_ns
        out = -1
        ct = dev_tier
        good = False
        # a store whose index claims the device holds o's content would load it rather than compute it
        if p == S.OP_CREATE and fault_slot > 0 and ix_seq[c] != 0 and true_seq[c] == 0 and restored[c] == 0:
            out, good, foreign = _dev_load(c, exp, checks, False, st)
            _count_stale(st, c, out, foreign, fault_slot, nbytes[i])
            cost[K_PHANTOM] += 1
            if out == O_DETECTED or out == O_MISSING:
                ix_seq[c] = 0  # found bad: the entry is dropped and the object computed as the trace does
            elif out == O_WRONG:
                restored[c] = 0
        if p == S.OP_CREATE or p == S.OP_RECOVER or p == S.OP_TRANSFORM:
            o_ver[o] = exp
        act = lut[p, t]
        if act != A_NONE:  # the replayed tier (or a delete that ends its copy too)
            if act == A_WRITE:
                restored[c] = 0
                w = wn[0]
                wn[0] += 1
                w_obj[w] = o
                w_ver[w] = o_ver[o]
                w_pages[w] = 0
                w_lo[w] = 0
                w_hi[w] = 0
                w_bad[w] = 0
                first = True
                k = kp[0]
                while k < n_log and lg_row[k] == r:
                    if lg_op[k] == OP_TRIM:
                        _trim(lg_lba[k], lg_np[k], lba_seq, lba_prev)
                    elif lg_op[k] == OP_WRITE:
                        if first:
                            w_lo[w] = k
                            first = False
                        w_hi[w] = k + 1
                        lg_w[k] = w
                        w_pages[w] += lg_np[k]
                        for q in range(lg_lba[k], lg_lba[k] + lg_np[k]):
                            lba_prev[q] = lba_seq[q]
                            lba_seq[q] = w
                    k += 1
                kp[0] = k
                ix_seq[c] = w
                true_seq[c] = w
                cost[K_WRITES] += 1
                cost[K_EXTRA_PAGES_W] += _pages(nbytes[i] + header_bytes, page_bytes) - _pages(nbytes[i], page_bytes)
            elif act == A_READ:
                corrupt = False
                if media_rate > 0.0 and rel >= media_from:
                    bits = 8.0 * nbytes[i]
                    pr = -np.expm1(bits * np.log1p(-media_rate)) if media_rate < 1.0 else 1.0
                    corrupt = _uniform(seed, r) < pr
                    if corrupt and ix_seq[c] != 0:
                        cost[K_MEDIA_ERRORS] += 1
                out, good, foreign = _dev_load(c, exp, checks, corrupt, st)
                _count_stale(st, c, out, foreign, fault_slot, nbytes[i])
                cost[K_READS] += 1
                cost[K_EXTRA_PAGES_R] += _pages(nbytes[i] + header_bytes, page_bytes) - _pages(nbytes[i], page_bytes)
                if checks != 0 and out != O_MISSING:
                    cost[K_VERIFIED] += 1
                    cost[K_VERIFIED_BYTES] += nbytes[i] + header_bytes
                if out == O_DETECTED and good:
                    cost[K_DETECTED_VALID] += 1
                if out == O_DETECTED or out == O_MISSING:
                    restored[c] = 1
            else:  # free or drop: the copy ends, its units are trimmed
                k = kp[0]
                while k < n_log and lg_row[k] == r:
                    if lg_op[k] == OP_TRIM:
                        _trim(lg_lba[k], lg_np[k], lba_seq, lba_prev)
                    k += 1
                kp[0] = k
                ix_seq[c] = 0
                true_seq[c] = 0
                restored[c] = 0
        if t != dev_tier:
            if p == S.OP_PERSIST or p == S.OP_RECOVER or p == S.OP_CREATE or p == S.OP_TRANSFORM:
                cp_ver[t, o] = o_ver[o]
                cp_bad[t, o] = 0
                cp_ts[t, o] = rel
            elif p == S.OP_LOAD or p == S.OP_HIT:
                v = cp_ver[t, o]
                ct = t
                if v < 0:
                    out = O_MISSING
                else:
                    bad = cp_bad[t, o] != 0
                    correct = (not bad) and v == exp
                    det = ((checks & CHECK_CHECKSUM) != 0 and bad) or ((checks & CHECK_VERSION) != 0 and v != exp)
                    out = O_DETECTED if det else (O_REUSED if correct else O_WRONG)
                if out == O_DETECTED or out == O_MISSING:
                    cp_ver[t, o] = exp
                    cp_bad[t, o] = 0
            elif p == S.OP_INVALIDATE or p == S.OP_EVICT:
                cp_ver[t, o] = -1
            elif p == S.OP_DELETE:
                for u in range(n_tiers):
                    cp_ver[u, o] = -1
        if out >= 0:
            c = acc[fault_slot, ct, kind[i], out]
            c[0] += 1
            c[1] += nbytes[i]
            c[2] += ntokens[i]
            tw[w_idx, out] += 1


@njit(nogil=True)
def lose_inflight(log, media, k_end, at_ns, flush_ns, hit):
    """Undo the units of the log's first ``k_end`` write ops that had arrived by ``at_ns`` but were not on the
    media then (``log``: FaultLog, ``media``: Media). The units of one op reach the media in order, evenly
    spread from its arrival to its completion (the device reports one completion per op), and ``flush_ns``
    later with a volatile buffer. ``hit[w]`` gets the units of write ``w`` lost. Returns (ops hit, units lost)."""
    lg_op, lg_lba, lg_np, lg_w, lg_arr, lg_done = log.op, log.lba, log.npages, log.w, log.arr, log.done
    lba_seq, lba_prev = media.lba_seq, media.lba_prev
    n_ops = 0
    n_pages = 0
    for k in range(k_end):
        if lg_op[k] != OP_WRITE or lg_arr[k] > at_ns or lg_done[k] + flush_ns <= at_ns:
            continue
        w = lg_w[k]
        n_ops += 1
        n = lg_np[k]
        span = lg_done[k] - lg_arr[k]
        for j in range(n):
            if lg_arr[k] + span * (j + 1) // n + flush_ns <= at_ns:
                continue  # this unit was on the media
            q = lg_lba[k] + j
            if lba_seq[q] == w:
                lba_seq[q] = lba_prev[q]
                n_pages += 1
                hit[w] += 1
    return n_ops, n_pages


@njit(nogil=True)
def media_units(log, media, k_end, count):
    """``count[w]`` += the units of write ``w``'s extents (the log's first ``k_end`` ops of ``log``: FaultLog)
    that hold its data (``media``: Media)."""
    lg_op, lg_lba, lg_np, lg_w = log.op, log.lba, log.npages, log.w
    lba_seq = media.lba_seq
    for k in range(k_end):
        if lg_op[k] != OP_WRITE:
            continue
        w = lg_w[k]
        for q in range(lg_lba[k], lg_lba[k] + lg_np[k]):
            if lba_seq[q] == w:
                count[w] += 1


def torn_and_lost(hit: np.ndarray, w_pages: np.ndarray) -> tuple[int, int]:
    """(writes left torn: some units on media, some not; writes lost whole)."""
    ws = np.flatnonzero(hit)
    full = hit[ws] >= w_pages[ws]
    return int(np.count_nonzero(~full)), int(np.count_nonzero(full))
