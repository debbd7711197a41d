"""``type``: one class per (kind, tenant) pair - what an application can tag without any prediction.

Pairs get classes in the order they first write to the tier (round-robin when
there are more pairs than classes), so e.g. quantized copies, parity objects
and each tenant's KV end up in separate placement ids when the device has
enough of them.

Guarded (:mod:`kvreplay.hints.abstain`, unordered classes): while the pairs' classes do not explain enough of
the spread of the lifetimes seen to die (correlation ratio below ``min_separation``), every write goes to class 0.

Knows: the kind and tenant of the object being written (and which pairs wrote before), and the deaths on the
tier of the writes it placed before.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from devicemodels.jit import njit

from kvreplay.hints.registry import HINTS
from kvreplay.hints.abstain import AbstainGuard, AbstainParams
from kvreplay.hints.base import HintPolicy
from kvreplay.layout.objtable import ObjTable, ot_full, ot_insert


class TypePairs(NamedTuple):
    """The (kind, tenant) pairs seen: an :class:`ObjTable` keyed by ``kind << 32 | tenant`` (``cap`` slots; the
    Python side grows it and rebuilds the tuple when the kernel asks), each pair's class and the pair count."""

    kv: np.ndarray  # int64[2 cap or more, 2] pair key -> slot map (ObjTable.kv)
    meta: np.ndarray  # int64[3]    table counters (ObjTable.meta)
    free: np.ndarray  # int32[cap]  free-slot stack (ObjTable.free)
    cls: np.ndarray  # int16[cap]   class of the pair
    seen: np.ndarray  # int64[1]    pairs seen so far (the next pair's class is seen[0] % n_classes)


@njit(nogil=True)
def _type_kernel(start, kind, tenant, writes, pairs, out, n_classes):
    """Writes [start, ...) (event indices ``writes`` into ``kind``/``tenant``), their classes into ``out``;
    returns the first write not classified (< len(writes): grow the table)."""
    kv, meta, free, pair_cls, nxt = pairs.kv, pairs.meta, pairs.free, pairs.cls, pairs.seen
    for j in range(start, len(writes)):
        i = writes[j]
        if ot_full(kv, meta, free):
            return j
        key = (np.uint64(kind[i]) << np.uint64(32)) | np.uint64(np.uint32(tenant[i]))
        s, fresh = ot_insert(kv, meta, free, key)
        if fresh:
            pair_cls[s] = nxt[0] % n_classes
            nxt[0] += 1
        out[j] = pair_cls[s]
    return len(writes)


@HINTS.register("type")
class TypeHints(HintPolicy):
    knows = ("the written object's kind and tenant, and the lifetimes of its earlier writes that already died on "
             "the tier (it abstains to class 0 while the pairs do not separate them)")
    Params = AbstainParams
    columns = ("kind", "tenant")

    def __init__(self, n_classes, params=None, *, seed=0, tier=3):
        super().__init__(n_classes, params, seed=seed, tier=tier)
        self.pairs = ObjTable({"cls": (np.int16, 0)}, initial=64)
        self.seen = np.zeros(1, np.int64)
        self.guard = AbstainGuard(self.n_classes, self.params, ordered=False)  # pairs are labels, not ranks

    def _assign(self, batch, actions, writes):
        return self.guard.classes(batch, actions, self._propose(batch, actions, writes), self.device)

    def _propose(self, batch, actions, writes):
        out = np.zeros(len(writes), np.int16)
        w = writes.astype(np.int64)
        j = 0
        while True:
            p = self.pairs
            pairs = TypePairs(p.kv, p.meta, p.free, p.cols["cls"], self.seen)
            j = _type_kernel(j, batch["kind"], batch["tenant"], w, pairs, out, self.guard.own_classes)
            if j == len(w):
                return out
            p.grow()

    def describe(self):
        return {"pairs_seen": int(self.seen[0]), **self.guard.describe()}

    def memory_bytes(self):
        return self.pairs.nbytes() + self.guard.memory_bytes()
