"""``fill-phase``: an abstaining policy - writes made while the tier is still filling get their own class.

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

Not guarded by :mod:`kvreplay.hints.abstain` like the other practical policies: its only decision (the last
class, before the first end of a copy) is made before any copy on the tier has died, so there is nothing to
judge it by in time; after the fill it is no hints anyway (``abstained_writes_share`` in describe()).

The unit it leaves open. The writes of the fill fill their placement id's reclaim units (zones) one after
another, and the last one stays part-written for the rest of the run: its unwritten pages are spare space the
drive cannot use (one reclaim unit of 512 MiB out of about 19 spare on the synthetic setting at op 0.07), and
the data in it is never a GC victim. That alone made the policy 2.6% worse than none on practical-hints
(synthetic trace, op 0.07, initially isolated: 1.9180 -> 1.9678, mean of 3 seeds), where the fill class carries
no information (every copy there ends by a delete). So, told the drive's placement unit
(:class:`kvreplay.hints.base.DeviceFacts`, what a host reads from the FDP configurations log page or a zone's
capacity), the policy closes it: after the first end it keeps giving the last class to writes that fit the open
unit's remaining pages, in order, until the unit is full (less than one unit of later writes; ``padded_writes``
in describe()). It counts pages as the replay's layout does and assumes the placement id's stream starts on a
fresh unit and holds host writes only (not so under ``preset=femu``, whose initially isolated GC copies go into
the last handle's frontier).

What that shows: on a fresh drive the writes of the fill fill reclaim units in write order with or without a
class of their own, so once its unit is closed the policy places data exactly as no hints, but for the unit
it shares with the first writes after the fill. Measured (fdp op_ratio 0.07, fill_ratio 1.0, end-to-end WAF,
none -> fill-phase): the Mooncake trace (S3-FIFO SSD tier 1 TiB) 1.1153 -> 1.1153 initially isolated, 1.1153
-> 1.1098 persistently isolated; its 1.103 (10.5% of the oracle's cut) before the unit was closed came from
the open unit, which pinned long-lived fill data where GC never looked. The synthetic trace (3 seeds, op 0.07
and 0.28, both handle types; the practical-hints study): at most +0.9% against none, mean of 3 seeds
(persistently isolated, op 0.07: 1.9180 -> 1.9345), where GC's copies of the fill class go to a reclaim unit
of the handle's own that the host cannot fill. The cache-aware policy that uses the
store's state is ``readmission``.

Knows: the past only - the ends of copies on the tier (evict, invalidate, delete events) up to the write - and
the drive's placement unit (pages per reclaim unit or zone) and page size.
"""

from __future__ import annotations

import numpy as np

from devicemodels.jit import kernel
from kvreplay.hints.base import HintPolicy
from kvreplay.hints.registry import HINTS
from kvreplay.layout.actions import A_FREE


@kernel(nogil=True)
def pad_kernel(pages, tag, left):
    """Tag (in order) the writes whose ``pages`` fit the open unit's ``left[0]`` pages, until none are left."""
    for i in range(len(pages)):
        if left[0] == 0:
            return
        if pages[i] <= left[0]:
            tag[i] = True
            left[0] -= pages[i]


@HINTS.register("fill-phase")
class FillPhaseHints(HintPolicy):
    knows = ("the past only: whether any copy on the tier has ended yet - evicted, invalidated or deleted (the KV "
             "store's own state); writes before the first end get the last class, every later write class 0 (as no "
             "hints), except the writes that fill the last class's open reclaim unit or zone (the drive's unit size)")

    def __init__(self, n_classes, params=None, *, seed=0, tier=3):
        super().__init__(n_classes, params, seed=seed, tier=tier)
        self.first_end_write = -1  # writes classified before the first end of a copy on the tier (-1: none yet)
        self.abstained = 0  # writes given class 0 (after that)
        self.tagged_pages = 0  # device pages given the last class (known when the drive's facts are)
        self.left = np.full(1, -1, np.int64)  # pages left in the last class's open unit after the fill (-1: filling)
        self.padded = 0  # writes after the first end given the last class to fill its open unit

    def _assign(self, batch, actions, writes):
        ev = actions == A_FREE  # evict, invalidate or delete on the tier: a copy there ends
        seen = np.cumsum(ev) - ev > 0  # an end earlier in this batch
        full = seen[writes] | (self.first_end_write >= 0)
        if self.first_end_write < 0 and ev.any():
            self.first_end_write = self.writes_seen + int(np.searchsorted(writes, int(np.argmax(ev))))
        tag = ~full
        dev = self.device
        if dev is not None and dev.unit_pages > 0 and self.n_classes > 1 and self.left[0] != 0:
            pages = dev.pages(batch["nbytes"][writes])
            if self.left[0] < 0:
                self.tagged_pages += int(pages[tag].sum())
                if full.any():  # the fill ended: what its last unit still lacks
                    self.left[0] = -self.tagged_pages % dev.unit_pages
            if self.left[0] > 0 and full.any():
                after = np.flatnonzero(full)  # full is False then True along the writes
                pad = np.zeros(len(after), np.bool_)
                pad_kernel(pages[after], pad, self.left)
                tag[after[pad]] = True
                self.padded += int(pad.sum())
        self.abstained += int((~tag).sum())
        return np.where(tag, self.n_classes - 1, 0).astype(np.int16)

    def describe(self):
        # abstaining after the fill is this policy's own rule; the shared guard (kvreplay.hints.abstain) cannot
        # judge it: its only decision (the last class) is made before any copy on the tier has died
        n = self.writes_seen
        dev = self.device
        return {"writes_before_first_end": self.first_end_write if self.first_end_write >= 0 else None,
                "abstained_writes_share": round(self.abstained / n, 4) if n else 0.0,
                "unit_pages": dev.unit_pages if dev is not None else None,
                "padded_writes": self.padded,
                "open_unit_pages_left": int(self.left[0]) if self.left[0] >= 0 else None}
