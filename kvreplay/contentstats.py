"""Content statistics per tier (``kvbed trace stats``, content section): each tier's offline-optimal headroom and
the writes it spends on content it held before.

The reference stream is the trace's chunk references in trace order: ``hit`` and ``load`` (served by the event's
tier), ``create`` and ``recover`` (served by no tier: computed). For a tier simulator trace these are exactly
the requests' chunk references (``tier_stats.all.chunk_references``); a chunk recomputed while resident in the
GPU (its prefix broke earlier) has no event and is missing here (``references_not_in_trace``).

Per tier, in the order of :data:`~kvreplay.schema.TIERS` (fastest first), among the tiers that have events:

* ``accesses``: the references that reached the tier, i.e. were not served by a faster tier;
* ``policy_hits``: the references the tier served (what the trace's tier simulator did); its ratio per access
  (``policy_hit_ratio_per_access``) and per chunk reference (``policy_hit_ratio_per_reference``, the
  denominator of the tier simulator's ``ref_hit_ratio``, which it equals on a tier simulator trace);
* ``belady_hits``: Belady's MIN on the tier's access sequence by ``content_key``, a demand cache of ``slots`` =
  the tier's ``capacity_bytes`` (from the trace's tier statistics) / its largest object (:mod:`kvreplay.belady`;
  ``slot_sizing`` says when smaller objects make that an upper size estimate); both ratios;
* ``unbounded_hits``: accesses whose key the tier's sequence had before (an infinite cache); both ratios;
* reuse distance of the tier's sequence, exact LRU stack distance by key (distinct keys between two accesses
  of one key) and by object (distinct objects between two accesses of one object), p50/p90;
* ``writes`` (``commit``, ``persist``, ``recover`` into the tier) and the share of them that are re-written:
  content the tier stored before (same ``content_key``, kind and scope; the key already carries the sharing
  domain), and by object (the same object id stored there before).

A v1 trace (no ``content_key``) gets the object-based figures only (accesses, policy hits, reuse distance by
object, re-written share by object) and ``content_keys: false``; every key-based field is None.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from devicemodels.jit import njit

from kvreplay.belady import belady_next, slots_for
from kvreplay.fenwick import fw_add, fw_sum
from kvreplay.keycheck import EMPTY
from kvreplay.keycheck import _slot as place_slot  # the (place, key) table of the content-key checks
from kvreplay.schema import OP_COMMIT, OP_CREATE, OP_HIT, OP_LOAD, OP_PERSIST, OP_RECOVER, OPS, TIERS

_MIX = np.uint64(0xFF51AFD7ED558CCD)
NO_TIER = len(TIERS)  # serving tier of a computed chunk: below every tier
_IS_REF = np.isin(np.arange(len(OPS)), [OP_HIT, OP_LOAD, OP_CREATE, OP_RECOVER])  # chunk references
_IS_SERVED = np.isin(np.arange(len(OPS)), [OP_HIT, OP_LOAD])  # ... served by the event's tier
_IS_WRITE = np.isin(np.arange(len(OPS)), [OP_COMMIT, OP_PERSIST, OP_RECOVER])  # a copy begins in the tier
V1_NOTE = "v1 trace: no content_key, key-based figures (Belady, unbounded, re-written by key, reuse by key) omitted"


class ContentCollector:
    """The columns the content statistics need, gathered batch by batch (one row per reference or write)."""

    def __init__(self) -> None:
        self._ref: list[tuple[np.ndarray, ...]] = []
        self._wr: list[tuple[np.ndarray, ...]] = []

    def add(self, op: np.ndarray, tier: np.ndarray, oi: np.ndarray, key: np.ndarray, nbytes: np.ndarray,
            kind: np.ndarray, scope: np.ndarray) -> None:
        ref = _IS_REF[op]
        opr, tr = op[ref], tier[ref]
        served = np.where(_IS_SERVED[opr], tr, NO_TIER).astype(np.int8)
        self._ref.append((served, oi[ref], key[ref], nbytes[ref].astype(np.int64)))
        wr = _IS_WRITE[op]
        # where a write goes, as one number: tier + 8 * (kind + 16 * scope) (kvreplay.keycheck's place)
        tw = tier[wr]
        place = tw.astype(np.int64) + 8 * (kind[wr].astype(np.int64) + 16 * scope[wr].astype(np.int64))
        self._wr.append((tw.astype(np.int8), oi[wr], key[wr], place))

    def _cols(self, parts: list[tuple[np.ndarray, ...]], n: int) -> list[np.ndarray]:
        if not parts:
            return [np.zeros(0, np.int64)] * n
        return [np.concatenate([p[i] for p in parts]) for i in range(n)]

    def result(self, tier_stats: dict[str, Any] | None, has_key: bool) -> dict[str, Any]:
        served, roi, rkey, rnb = self._cols(self._ref, 4)
        wtier, woi, wkey, wplace = self._cols(self._wr, 4)
        return content_by_tier(served, roi, rkey, rnb, wtier, woi, wkey, wplace, tier_stats or {}, has_key)


@njit
def _stack_distances(nxt, out):
    """Exact LRU stack distance of each access: distinct ids accessed strictly between its previous access and
    it (-1: a first access), from the next uses ``nxt`` (kvreplay.belady.next_use: >= n for none). Marks sit at
    each id's latest access in a Fenwick tree."""
    n = nxt.shape[0]
    tree = np.zeros(n + 1, np.int32)
    prev = out  # out[i] holds i's previous access until i is reached
    prev[:] = -1
    for i in range(n):
        p = prev[i]
        if p >= 0:
            prev[i] = fw_sum(tree, i - 1) - fw_sum(tree, p)
            fw_add(tree, p, -1)
        if nxt[i] < n:
            prev[nxt[i]] = i
        fw_add(tree, i, 1)


def reuse_distance(nxt: np.ndarray) -> dict[str, Any]:
    """Reuses (accesses of an id seen before) and their stack distance p50/p90 (nearest rank)."""
    out = np.empty(len(nxt), np.int64)
    if len(nxt):
        _stack_distances(nxt, out)
    d = out[out >= 0]
    pct = (lambda q: int(np.percentile(d, q, method="inverted_cdf"))) if len(d) else (lambda q: None)
    return {"reuses": int(len(d)), "p50": pct(50), "p90": pct(90)}


@njit
def _dense_ids(keys, tk, tv):
    """Dense ids 0.. of ``keys`` in order of first appearance, by an open-addressing table (``tk``/``tv``: a
    power of two of at least twice the keys, ``tv`` all -1); key 0 ("no key known") gets -1: equal to nothing.
    Returns the ids and how many there are."""
    mask = np.uint64(tk.shape[0] - 1)
    ids = np.empty(keys.shape[0], np.int64)
    n = 0
    for i in range(keys.shape[0]):
        k = keys[i]
        if k == 0:
            ids[i] = -1
            continue
        h = (k ^ (k >> np.uint64(33))) * _MIX
        j = np.int64((h ^ (h >> np.uint64(29))) & mask)
        while tv[j] >= 0 and tk[j] != k:
            j = np.int64((np.uint64(j) + np.uint64(1)) & mask)
        if tv[j] < 0:
            tk[j] = k
            tv[j] = n
            n += 1
        ids[i] = tv[j]
    return ids, n


def dense_ids(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`_dense_ids` with its table."""
    m = 1 << max(4, int(2 * len(keys)).bit_length())
    return _dense_ids(np.ascontiguousarray(keys, np.uint64), np.zeros(m, np.uint64), np.full(m, -1, np.int64))


@njit
def _next_uses(ids, mask, last, nxt):
    """For the accesses where ``mask`` is set, in their own numbering 0..m-1: the next access of the same id
    (m + j if none; id -1 never repeats), as kvreplay.belady.next_use gives. ``last``: -1 per id (scratch)."""
    m = nxt.shape[0]
    j = m
    for i in range(ids.shape[0] - 1, -1, -1):
        if not mask[i]:
            continue
        j -= 1
        g = ids[i]
        if g < 0 or last[g] < 0:
            nxt[j] = m + j
        else:
            nxt[j] = last[g]
        if g >= 0:
            last[g] = j


def next_uses(ids: np.ndarray, n_ids: int, mask: np.ndarray) -> np.ndarray:
    nxt = np.empty(int(mask.sum()), np.int64)
    _next_uses(ids, mask, np.full(max(n_ids, 1), -1, np.int64), nxt)
    return nxt


def _ratio(num: int | None, den: int) -> float | None:
    if num is None:
        return None
    return num / den if den else 0.0


@njit
def _first_writes(wtier, woi, wkey, wplace, seen, tk, td, new_obj, new_key):
    """Count, per tier, the writes that are the first of their object there (``new_obj``) and the first of
    their content there (``new_key``: (place, key) not in the table yet; key 0 skipped). ``seen``: a tier
    bitmask per object; ``tk``/``td``: an empty open-addressing table (kvreplay.keycheck's) of at least twice
    the keyed writes."""
    for i in range(wtier.shape[0]):
        t = wtier[i]
        o = woi[i]
        bit = np.uint8(1 << t)
        if seen[o] & bit == 0:
            seen[o] |= bit
            new_obj[t] += 1
        k = wkey[i]
        if k != 0:
            j = place_slot(tk, td, k, wplace[i], True)
            if td[j] == EMPTY:
                td[j] = wplace[i]
                tk[j] = k
                new_key[t] += 1


def _first_write_counts(wtier, woi, wkey, wplace):
    """(first writes of an object, first writes of a content) per tier code."""
    new_obj = np.zeros(NO_TIER + 1, np.int64)
    new_key = np.zeros(NO_TIER + 1, np.int64)
    if len(wtier):
        m = 1 << max(4, int(2 * int((wkey != 0).sum())).bit_length())
        _first_writes(wtier, woi, wkey, wplace, np.zeros(int(woi.max()) + 1, np.uint8), np.zeros(m, np.uint64),
                      np.full(m, EMPTY, np.int64), new_obj, new_key)
    return new_obj, new_key


def content_by_tier(served: np.ndarray, roi: np.ndarray, rkey: np.ndarray, rnb: np.ndarray, wtier: np.ndarray,
                    woi: np.ndarray, wkey: np.ndarray, wplace: np.ndarray, tier_stats: dict[str, Any],
                    has_key: bool) -> dict[str, Any]:
    refs = len(served)
    recorded = (tier_stats.get("all") or {}).get("chunk_references")
    present = sorted(set(np.unique(served).tolist()) - {NO_TIER} | set(np.unique(wtier).tolist()))
    n_obj = int(roi.max()) + 1 if refs else 0  # roi: dense object indices already
    kid, n_keys = dense_ids(rkey) if has_key else (None, 0)
    writes = np.bincount(wtier, minlength=NO_TIER + 1) if len(wtier) else np.zeros(NO_TIER + 1, np.int64)
    new_obj, new_key = _first_write_counts(wtier, woi, wkey, wplace)
    if has_key:
        wt = wtier[wkey != 0]
        writes_keyed = np.bincount(wt, minlength=NO_TIER + 1) if len(wt) else np.zeros(NO_TIER + 1, np.int64)
    none = dict.fromkeys(("slots", "slot_sizing", "belady_hits", "belady_hit_ratio_per_access",
                          "belady_hit_ratio_per_reference", "unbounded_hits", "unbounded_hit_ratio_per_access",
                          "unbounded_hit_ratio_per_reference"))
    rows = []
    for t in present:
        name = TIERS[t]
        reach = served >= t
        acc = int(reach.sum())
        hits = int((served == t).sum())
        cap = (tier_stats.get(name) or {}).get("capacity_bytes")
        row: dict[str, Any] = {
            "tier": name,
            "accesses": acc,
            "policy_hits": hits,
            "policy_hit_ratio_per_access": _ratio(hits, acc),
            "policy_hit_ratio_per_reference": _ratio(hits, refs),
            "capacity_bytes": cap,
            **none,
        }
        rk = {"reuses": None, "p50": None, "p90": None}
        if has_key:
            nxt = next_uses(kid, n_keys, reach)
            if cap is not None:
                slots, sizing = slots_for(cap, rnb[reach])
                b = belady_next(nxt, slots)
                row.update(slots=slots, slot_sizing=sizing, belady_hits=b.hits,
                           belady_hit_ratio_per_access=_ratio(b.hits, acc),
                           belady_hit_ratio_per_reference=_ratio(b.hits, refs))
            else:
                b = belady_next(nxt, 0)
                row.update(slot_sizing="capacity not recorded in the trace")
            row.update(unbounded_hits=b.unbounded_hits, unbounded_hit_ratio_per_access=_ratio(b.unbounded_hits, acc),
                       unbounded_hit_ratio_per_reference=_ratio(b.unbounded_hits, refs))
            rk = reuse_distance(nxt)
        ro = reuse_distance(next_uses(roi, n_obj, reach))
        row.update(reuse_distance_keys_p50=rk["p50"], reuse_distance_keys_p90=rk["p90"], key_reuses=rk["reuses"],
                   reuse_distance_objects_p50=ro["p50"], reuse_distance_objects_p90=ro["p90"],
                   object_reuses=ro["reuses"])
        nw = int(writes[t])
        rw_obj = nw - int(new_obj[t])
        row.update(writes=nw, rewritten_writes_by_object=rw_obj, rewritten_share_of_writes_by_object=_ratio(rw_obj, nw))
        if has_key:
            nk = int(writes_keyed[t])
            rw = nk - int(new_key[t])
            row.update(writes_without_key=nw - nk, rewritten_writes=rw, rewritten_share_of_writes=_ratio(rw, nk))
        else:
            row.update(writes_without_key=None, rewritten_writes=None, rewritten_share_of_writes=None)
        rows.append(row)
    return {
        "content_keys": has_key,
        "note": None if has_key else V1_NOTE,
        "references": refs,
        "references_without_key": int((rkey == 0).sum()) if has_key else None,
        "distinct_keys": n_keys if has_key else None,
        "distinct_objects": int(np.count_nonzero(np.bincount(roi))) if refs else 0,
        "chunk_references_recorded": recorded,
        "references_not_in_trace": (int(recorded) - refs) if recorded is not None else None,
        "tiers": rows,
    }
