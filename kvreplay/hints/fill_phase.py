"""``fill-phase``: a cache-aware abstaining policy - writes made while the tier is still filling get their own class.

What the KV store itself knows at write time: whether any copy on this tier has ended yet (evicted, invalidated
or deleted there). Until then the tier only fills, and what it holds stays until eviction begins to reach it:
those writes are long-lived on the write clock (on the Mooncake trace with an S3-FIFO SSD tier the oracle's mean
class falls from 6.3 of 7 in the first tenth of the writes to 1.1 in the last). So writes before the first end of
a copy on the tier get the last class; every later write abstains to class 0, the stream a drive without hints
would use - it cannot collapse into a wrong class, and after the fill it is no hints. A tier whose copies end by
the application's deletes or invalidations while it fills (the synthetic multi-tenant trace) breaks the premise
at its first such end, so the policy is no hints there almost from the start: counting only evictions, as it
first did, it kept tagging those writes and was up to 1.9% worse than none on the practical-hints study. Two
classes at most; the state is one flag, updated per batch with a numpy cumulative sum (classes never depend on
batch boundaries).

Measured with ``--hint-lab`` (fdp, end-to-end WAF, none -> fill-phase, oracle): Mooncake (S3-FIFO SSD tier 1 TiB,
copies end there only by eviction) at fill 1.0 1.115 -> 1.103, oracle 1.000 (10.5% of the oracle's cut).
Not guarded by :mod:`kvreplay.hints.abstain` like the other practical policies: its only decision (the last
class, before the first end of a copy) is made before any copy on the tier has died, so there is nothing to
judge it by in time; after the fill it is no hints anyway (``abstained_writes_share`` in describe()).

Knows: the past only - the ends of copies on the tier (evict, invalidate, delete events) up to the write.
"""

from __future__ import annotations

import numpy as np

from kvreplay.hints.base import HintPolicy
from kvreplay.hints.registry import HINTS
from kvreplay.layout.actions import A_FREE


@HINTS.register("fill-phase")
class FillPhaseHints(HintPolicy):
    knows = ("the past only: whether any copy on the tier has ended yet - evicted, invalidated or deleted (the KV "
             "store's own state); writes before the first end get the last class, every later write class 0 (as no "
             "hints)")

    def __init__(self, n_classes, params=None, *, seed=0, tier=3):
        super().__init__(n_classes, params, seed=seed, tier=tier)
        self.first_end_write = -1  # writes classified before the first end of a copy on the tier (-1: none yet)
        self.abstained = 0  # writes given class 0 (after that)

    def _assign(self, batch, actions, writes):
        ev = actions == A_FREE  # evict, invalidate or delete on the tier: a copy there ends
        seen = np.cumsum(ev) - ev > 0  # an end earlier in this batch
        full = seen[writes] | (self.first_end_write >= 0)
        if self.first_end_write < 0 and ev.any():
            self.first_end_write = self.writes_seen + int(np.searchsorted(writes, int(np.argmax(ev))))
        self.abstained += int(full.sum())
        return np.where(full, 0, self.n_classes - 1).astype(np.int16)

    def describe(self):
        # abstaining after the fill is this policy's own rule; the shared guard (kvreplay.hints.abstain) cannot
        # judge it: its only decision (the last class) is made before any copy on the tier has died
        n = self.writes_seen
        return {"writes_before_first_end": self.first_end_write if self.first_end_write >= 0 else None,
                "abstained_writes_share": round(self.abstained / n, 4) if n else 0.0}
