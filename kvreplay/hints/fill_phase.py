"""``fill-phase``: a cache-aware abstaining policy - writes made while the tier is still filling get their own class.

What the KV store itself knows at write time: whether it has evicted anything from this tier yet. Until its
first eviction the tier only fills, and what it holds then stays until eviction begins to reach it: those writes
are long-lived on the write clock (on the Mooncake trace with an S3-FIFO SSD tier the oracle's mean class falls
from 6.3 of 7 in the first tenth of the writes to 1.1 in the last). So writes before the tier's first eviction
(evict event on the tier, seen in the trace so far) get the last class; every later write abstains to class 0,
the stream a drive without hints would use - it cannot collapse into a wrong class, and after the fill it is no
hints. Two classes at most; the state is one flag, updated per batch with a numpy cumulative sum (classes never
depend on batch boundaries).

Measured with ``--hint-lab`` (fdp, end-to-end WAF, none -> fill-phase, oracle): Mooncake (S3-FIFO SSD tier 1 TiB)
at fill 1.0 1.115 -> 1.103, oracle 1.000 (10.5% of the oracle's cut), at the default fill 1.034 -> 1.034; the
synthetic demo trace (``kvbed trace synth``, seeds 0, 1, 2) 1.244 -> 1.252, 1.314 -> 1.324, 1.254 -> 1.266
(+0.7%, +0.7%, +0.9%: within 1% of no hints but no gain - its SSD tier is emptied by deletes, not eviction).
A help where eviction decides death, a small loss elsewhere. Not guarded by :mod:`kvreplay.hints.abstain`
like the other practical policies: its only decision (the last class, before the first eviction) is made before
any copy on the tier has died, so there is nothing to judge it by in time; after the fill it is no hints anyway
(``abstained_writes_share`` in describe()). It is in none of the example studies.

Knows: the past only - the tier's own eviction events up to the write.
"""

from __future__ import annotations

import numpy as np

from kvreplay import schema as S
from kvreplay.hints.base import HintPolicy
from kvreplay.hints.registry import HINTS


@HINTS.register("fill-phase")
class FillPhaseHints(HintPolicy):
    knows = ("the past only: whether the tier has evicted anything yet (the KV store's own state); writes before "
             "its first eviction get the last class, every later write class 0 (as no hints)")

    def __init__(self, n_classes, params=None, *, seed=0, tier=3):
        super().__init__(n_classes, params, seed=seed, tier=tier)
        self.first_evict_write = -1  # writes classified before the tier's first eviction (-1: none yet)
        self.abstained = 0  # writes given class 0 (after the first eviction)

    def _assign(self, batch, actions, writes):
        ev = (batch["op"] == S.OP_EVICT) & (batch["tier"] == self.tier)
        seen = np.cumsum(ev) - ev > 0  # an eviction earlier in this batch
        full = seen[writes] | (self.first_evict_write >= 0)
        if self.first_evict_write < 0 and ev.any():
            self.first_evict_write = self.writes_seen + int(np.searchsorted(writes, int(np.argmax(ev))))
        self.abstained += int(full.sum())
        return np.where(full, 0, self.n_classes - 1).astype(np.int16)

    def describe(self):
        # abstaining after the fill is this policy's own rule; the shared guard (kvreplay.hints.abstain) cannot
        # judge it: its only decision (the last class) is made before any copy on the tier has died
        n = self.writes_seen
        return {"writes_before_first_eviction": self.first_evict_write if self.first_evict_write >= 0 else None,
                "abstained_writes_share": round(self.abstained / n, 4) if n else 0.0}
