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

from kvreplay.belady import belady, slots_for
from kvreplay.fenwick import fw_add, fw_sum
from kvreplay.schema import OP_COMMIT, OP_CREATE, OP_HIT, OP_LOAD, OP_PERSIST, OP_RECOVER, TIERS

NO_TIER = len(TIERS)  # serving tier of a computed chunk: below every tier
V1_NOTE = "v1 trace: no content_key, key-based figures (Belady, unbounded, re-written by key, reuse by key) omitted"


class ContentCollector:
    """The columns the content statistics need, gathered batch by batch (one row per reference or write)."""

    def __init__(self) -> None:
        self._ref: list[tuple[np.ndarray, ...]] = []
        self._wr: list[tuple[np.ndarray, ...]] = []

    def add(self, op: np.ndarray, tier: np.ndarray, oi: np.ndarray, key: np.ndarray, nbytes: np.ndarray,
            kind: np.ndarray, scope: np.ndarray) -> None:
        ref = (op == OP_HIT) | (op == OP_LOAD) | (op == OP_CREATE) | (op == OP_RECOVER)
        served = np.where((op == OP_HIT) | (op == OP_LOAD), tier, NO_TIER).astype(np.int8)
        self._ref.append((served[ref], oi[ref], key[ref], nbytes[ref].astype(np.int64)))
        wr = (op == OP_COMMIT) | (op == OP_PERSIST) | (op == OP_RECOVER)
        self._wr.append((tier[wr].astype(np.int8), oi[wr], key[wr], kind[wr].astype(np.int64),
                         scope[wr].astype(np.int64)))

    def _cols(self, parts: list[tuple[np.ndarray, ...]], n: int) -> list[np.ndarray]:
        if not parts:
            return [np.zeros(0, np.int64)] * n
        return [np.concatenate([p[i] for p in parts]) for i in range(n)]

    def result(self, tier_stats: dict[str, Any] | None, has_key: bool) -> dict[str, Any]:
        served, roi, rkey, rnb = self._cols(self._ref, 4)
        wtier, woi, wkey, wkind, wscope = self._cols(self._wr, 5)
        return content_by_tier(served, roi, rkey, rnb, wtier, woi, wkey, wkind, wscope, tier_stats or {}, has_key)


@njit
def _stack_distances(prev, out):
    """Exact LRU stack distance of each access: distinct ids accessed strictly between its previous access
    ``prev[i]`` and i (-1: first access). Marks sit at each id's latest access in a Fenwick tree."""
    n = prev.shape[0]
    tree = np.zeros(n + 1, np.int64)
    for i in range(n):
        p = prev[i]
        if p >= 0:
            out[i] = fw_sum(tree, i - 1) - fw_sum(tree, p)
            fw_add(tree, p, -1)
        else:
            out[i] = -1
        fw_add(tree, i, 1)


def previous_use(ids: np.ndarray) -> np.ndarray:
    """For each access, the index of the previous access of the same id, or -1."""
    n = len(ids)
    order = np.argsort(ids, kind="stable")
    prev = np.full(n, -1, np.int64)
    if n > 1:
        same = ids[order[1:]] == ids[order[:-1]]
        prev[order[1:][same]] = order[:-1][same]
    return prev


def reuse_distance(ids: np.ndarray) -> dict[str, Any]:
    """Reuses (accesses of an id seen before) and their stack distance p50/p90 (nearest rank)."""
    out = np.empty(len(ids), np.int64)
    if len(ids):
        _stack_distances(previous_use(ids), out)
    d = out[out >= 0]
    pct = (lambda q: int(np.percentile(d, q, method="inverted_cdf"))) if len(d) else (lambda q: None)
    return {"reuses": int(len(d)), "p50": pct(50), "p90": pct(90)}


def key_ids(keys: np.ndarray) -> np.ndarray:
    """Dense ids of ``keys``; key 0 ("no key known") gets a new id at every access (never a hit)."""
    _, inv = np.unique(keys, return_inverse=True)
    ids = inv.astype(np.int64).ravel()
    zero = keys == 0
    if zero.any():
        ids[zero] = ids.max() + 1 + np.arange(int(zero.sum()))
    return ids


def _ratio(num: int | None, den: int) -> float | None:
    if num is None:
        return None
    return num / den if den else 0.0


def _rewritten(ids: list[np.ndarray]) -> int:
    """Writes whose identity (the tuple of ``ids`` columns) an earlier write had: writes - distinct identities."""
    if len(ids[0]) == 0:
        return 0
    order = np.lexsort(ids)
    new = np.ones(len(order), bool)
    new[1:] = np.any(np.stack([c[order[1:]] != c[order[:-1]] for c in ids]), axis=0)
    return int(len(order) - new.sum())


def content_by_tier(served: np.ndarray, roi: np.ndarray, rkey: np.ndarray, rnb: np.ndarray, wtier: np.ndarray,
                    woi: np.ndarray, wkey: np.ndarray, wkind: np.ndarray, wscope: np.ndarray,
                    tier_stats: dict[str, Any], has_key: bool) -> dict[str, Any]:
    refs = len(served)
    recorded = (tier_stats.get("all") or {}).get("chunk_references")
    present = sorted(set(np.unique(served).tolist()) - {NO_TIER} | set(np.unique(wtier).tolist()))
    rows = []
    for t in present:
        name = TIERS[t]
        reach = served >= t
        acc = int(reach.sum())
        hits = int((served == t).sum())
        keys = key_ids(rkey[reach]) if has_key else None
        cap = (tier_stats.get(name) or {}).get("capacity_bytes")
        row: dict[str, Any] = {
            "tier": name,
            "accesses": acc,
            "policy_hits": hits,
            "policy_hit_ratio_per_access": _ratio(hits, acc),
            "policy_hit_ratio_per_reference": _ratio(hits, refs),
            "capacity_bytes": cap,
        }
        if has_key:
            slots, sizing = slots_for(cap, rnb[reach]) if cap is not None else (None, None)
            b = belady(keys, slots if slots is not None else 0)
            bh = b.hits if slots is not None else None
            row.update(slots=slots, slot_sizing=sizing if cap is not None else "capacity not recorded in the trace",
                       belady_hits=bh, belady_hit_ratio_per_access=_ratio(bh, acc),
                       belady_hit_ratio_per_reference=_ratio(bh, refs),
                       unbounded_hits=b.unbounded_hits, unbounded_hit_ratio_per_access=_ratio(b.unbounded_hits, acc),
                       unbounded_hit_ratio_per_reference=_ratio(b.unbounded_hits, refs))
        else:
            row.update(slots=None, slot_sizing=None, belady_hits=None, belady_hit_ratio_per_access=None,
                       belady_hit_ratio_per_reference=None, unbounded_hits=None,
                       unbounded_hit_ratio_per_access=None, unbounded_hit_ratio_per_reference=None)
        rk = reuse_distance(keys) if has_key else {"reuses": None, "p50": None, "p90": None}
        ro = reuse_distance(roi[reach])
        row.update(reuse_distance_keys_p50=rk["p50"], reuse_distance_keys_p90=rk["p90"], key_reuses=rk["reuses"],
                   reuse_distance_objects_p50=ro["p50"], reuse_distance_objects_p90=ro["p90"],
                   object_reuses=ro["reuses"])
        w = wtier == t
        nw = int(w.sum())
        by_obj = _rewritten([woi[w]])
        row.update(writes=nw, rewritten_writes_by_object=by_obj, rewritten_share_of_writes_by_object=_ratio(by_obj, nw))
        if has_key:
            keyed = w & (wkey != 0)
            rw = _rewritten([wscope[keyed], wkind[keyed], wkey[keyed]])
            row.update(writes_without_key=int(nw - keyed.sum()), rewritten_writes=rw,
                       rewritten_share_of_writes=_ratio(rw, int(keyed.sum())))
        else:
            row.update(writes_without_key=None, rewritten_writes=None, rewritten_share_of_writes=None)
        rows.append(row)
    return {
        "content_keys": has_key,
        "note": None if has_key else V1_NOTE,
        "references": refs,
        "references_without_key": int((rkey == 0).sum()) if has_key else None,
        "distinct_keys": int(len(np.unique(rkey))) if has_key else None,
        "distinct_objects": int(len(np.unique(roi))),
        "chunk_references_recorded": recorded,
        "references_not_in_trace": (int(recorded) - refs) if recorded is not None else None,
        "tiers": rows,
    }
