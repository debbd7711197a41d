"""``hotness``: recency and frequency of use so far, LRFU-style.

Every object carries a score that gains 1 at each reuse (a ``hit`` or ``load``
in any tier) and halves every ``half_life_ns`` of trace time without one - the
combined recency/frequency value of LRFU (Lee et al., 2001), which behaves
like LRU for a short half-life and like LFU for a long one. A write is ranked
by ``log2(1 + score)``: with ``adaptive`` (default) its class is that value's
place among the running quantiles of the values of earlier writes (edges moved
every ``refresh`` writes, :mod:`kvreplay.hints.quantiles`), so every placement
id gets a share whatever the trace's reuse scale; before the first refresh, and
with ``adaptive=false``, the class is ``floor(log2(1 + score))`` (a 1e-6
relative tolerance lets three hits a few ns ago make class 2) capped at the top
class: never-reused objects share class 0, each further class needs about
twice the recent reuse.

A new object starts from its parent's current score when ``inherit`` is on
(``parent_id`` is the previous chunk of the prefix, or the source of a
transform): the tail of a hot shared prefix is likely hot too.

Guarded (:mod:`kvreplay.hints.abstain`, unordered classes: a hot object may live longer or shorter): while
the classes do not explain enough of the spread of the lifetimes seen to die, every write goes to class 0.

Knows: the past only - reuse events of every tier up to the write, and the deaths of its earlier writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from devicemodels.jit import kernel
from kvreplay.schema import OP_DELETE, OP_HIT, OP_LOAD
from kvreplay.hints.registry import HINTS
from kvreplay.hints.abstain import AbstainGuard, AbstainParams
from kvreplay.hints.base import HintPolicy
from kvreplay.layout.actions import A_WRITE
from kvreplay.hints.quantiles import class_of, new_state, note_score
from kvreplay.layout.objtable import ObjTable, ot_find, ot_full, ot_insert, ot_remove
from kvbed.core.errors import KvbedError
from kvbed.core.params import param


@dataclass(frozen=True)
class HotnessParams(AbstainParams):
    half_life_ns: int = param(60_000_000_000, "the score halves after this much trace time without reuse")
    inherit: bool = param(True, "a new object starts from its parent's score")
    adaptive: bool = param(True, "classes at the running quantiles of the scores (else a fixed log2 scale)")
    refresh: int = param(4096, "move the adaptive edges every this many writes")


@kernel(inline="always")
def _decayed(score, last, now, half_life):
    if now <= last:
        return score
    return score * 2.0 ** (-(now - last) / half_life)


class HotEvents(NamedTuple):
    """One batch of trace events, n of them (read-only in the kernel)."""

    op: np.ndarray  # int8[n]      schema op code
    obj: np.ndarray  # uint64[n]   object id
    parent: np.ndarray  # uint64[n] parent_id: the previous chunk of the prefix, or a transform's source (0: none)
    ts: np.ndarray  # int64[n]     trace time (ns)
    actions: np.ndarray  # int8[n] what the event does on the replayed tier (kvreplay.layout.actions A_*)


class HotObjects(NamedTuple):
    """The objects seen and not yet deleted: an :class:`ObjTable` (``kv, meta, free``) and its columns, per slot
    (``cap`` slots; the Python side grows the table and rebuilds the tuple when the kernel asks)."""

    kv: np.ndarray  # int64[2 cap or more, 2] object id -> slot map (ObjTable.kv)
    meta: np.ndarray  # int64[3]     table counters (ObjTable.meta)
    free: np.ndarray  # int32[cap]   free-slot stack (ObjTable.free)
    score: np.ndarray  # float64[cap] reuse score at time ``last`` (decays from there)
    last: np.ndarray  # int64[cap]   trace time (ns) the score was last updated


class HotRanking(NamedTuple):
    """The running quantiles of the ranked values (:mod:`kvreplay.hints.quantiles`)."""

    hist: np.ndarray  # float64[quantiles.NBINS] histogram of the values log2(1 + score) of past writes
    edges: np.ndarray  # float64[n_classes - 1]  class edges on those values
    state: np.ndarray  # int64[2]  edges ready (0/1), writes ranked


class HotConfig(NamedTuple):
    """The parameters, as the kernel reads them."""

    n_classes: int  # classes to give
    half_life: float  # ns of trace time without reuse that halve a score
    inherit: bool  # a new object starts from its parent's score
    adaptive: bool  # classes at the running quantiles (else floor(log2(1 + score)), capped)
    refresh: int  # move the adaptive edges every this many writes


@kernel(nogil=True)
def _hot_kernel(start, j, ev, objs, ranking, cfg, out):
    """Events [start, ...) with ``j`` writes classified so far, their classes into ``out`` (int16, one per
    write); returns (stop, j) - stop < len: grow."""
    op, obj, parent, ts, actions = ev.op, ev.obj, ev.parent, ev.ts, ev.actions
    kv, meta, free, score, last = objs.kv, objs.meta, objs.free, objs.score, objs.last
    hist, edges, state = ranking.hist, ranking.edges, ranking.state
    n_classes, half_life, inherit = cfg.n_classes, cfg.half_life, cfg.inherit
    adaptive, refresh = cfg.adaptive, cfg.refresh
    for i in range(start, len(op)):
        o = op[i]
        key = obj[i]
        now = ts[i]
        s = ot_find(kv, key)
        if s < 0 and o != OP_DELETE:
            if ot_full(kv, meta, free):
                return i, j
            s, _ = ot_insert(kv, meta, free, key)
            score[s] = 0.0
            last[s] = now
            if inherit and parent[i] != 0:
                p = ot_find(kv, parent[i])
                if p >= 0:
                    score[s] = _decayed(score[p], last[p], now, half_life)
        if o == OP_HIT or o == OP_LOAD:
            score[s] = _decayed(score[s], last[s], now, half_life) + 1.0
            last[s] = now
        if actions[i] == A_WRITE:
            sc = _decayed(score[s], last[s], now, half_life)
            y = np.log2((1.0 + sc) * (1.0 + 1e-6))  # reuse that decayed by a hair still reaches its class
            if adaptive and state[0] == 1:
                c = class_of(y, edges)
            else:
                c = min(int(y), n_classes - 1)
            if adaptive:
                note_score(y, hist, edges, state, 0, 1, refresh)
            out[j] = c
            j += 1
        if o == OP_DELETE and s >= 0:
            ot_remove(kv, meta, free, key)
    return len(op), j


@HINTS.register("hotness")
class HotnessHints(HintPolicy):
    knows = ("the past only: every tier's hit/load events up to the write (decayed reuse count), and the lifetimes of "
             "its earlier writes that already died on the tier (it abstains to class 0 while they are not separated)")
    Params = HotnessParams
    columns = ("parent_id",)

    def __init__(self, n_classes, params=None, *, seed=0, tier=3):
        super().__init__(n_classes, params, seed=seed, tier=tier)
        if self.params.half_life_ns <= 0:
            raise KvbedError(f"--param half_life_ns: must be positive, got {self.params.half_life_ns}")
        if self.params.refresh < 1:
            raise KvbedError(f"--param refresh: must be >= 1, got {self.params.refresh}")
        self.table = ObjTable({"score": (np.float64, 0.0), "last": (np.int64, 0)})
        self.guard = AbstainGuard(self.n_classes, self.params, ordered=False)  # hot may live longer or shorter
        self.ranking = HotRanking(*new_state(self.guard.own_classes), np.zeros(2, np.int64))

    def _assign(self, batch, actions, writes):
        return self.guard.classes(batch, actions, self._propose(batch, actions, writes), self.device)

    def _propose(self, batch, actions, writes):
        out = np.zeros(len(writes), np.int16)
        i, j = 0, 0
        p = self.params
        ev = HotEvents(batch["op"], batch["obj_id"], batch["parent_id"], batch["ts_ns"], actions)
        cfg = HotConfig(self.guard.own_classes, float(p.half_life_ns), bool(p.inherit), bool(p.adaptive), int(p.refresh))
        while True:
            t = self.table
            objs = HotObjects(t.kv, t.meta, t.free, t.cols["score"], t.cols["last"])
            i, j = _hot_kernel(i, j, ev, objs, self.ranking, cfg, out)
            if i == batch.n:
                return out
            t.grow()

    def describe(self):
        p = self.params
        return {"half_life_ns": p.half_life_ns, "inherit": p.inherit, "adaptive": p.adaptive,
                "edges_log2": [float(e) for e in self.ranking.edges if np.isfinite(e)] if self.ranking.state[0] else [],
                "objects_tracked_at_end": self.table.count, **self.guard.describe()}

    def memory_bytes(self):
        return self.table.nbytes() + self.guard.memory_bytes()
