"""``stale-index``: the replayed tier's host-side index is replaced by its state ``age_ns`` earlier (a lagging
replica or a restored checkpoint): entries made since are missing; entries dropped since are back and point
at extents that were trimmed or rewritten by other objects. The index is keyed by content (trace format v2),
so the next request for such an entry's content - a chunk recomputed under a new object id - loads that
extent; with a v1 trace it is keyed by object id and such an entry is never looked up again."""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay.faults.base import Fault, FaultTime
from kvreplay.faults.registry import FAULTS
from kvbed.core.params import param


@FAULTS.register("stale-index")
class StaleIndex(Fault):
    @dataclass(frozen=True)
    class Params(FaultTime):
        age_ns: int = param(1_000_000_000, "how old the index that comes back is")

    def validate(self) -> None:
        super().validate()
        if self.p.age_ns < 0:
            raise self.error(f"age_ns must be >= 0, got {self.p.age_ns}")

    def checkpoint_ns(self) -> int | None:
        return self.at_ns - self.p.age_ns

    def apply(self, state) -> dict:
        return state.restore_index(self.key)
