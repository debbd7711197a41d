"""``partial-offload``: the writer dies while objects are being written to a tier; the index entries were
already published (an asynchronous offload), so the half-written objects are indexed.

On the replayed tier "being written" comes from the device's own completions: the write ops that had not
completed at the instant never happen. Other tiers have no device timing: a copy written within
``inflight_ns`` before the instant was still in transfer.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay import schema as S
from kvreplay.faults.base import Fault, FaultTime
from kvreplay.faults.registry import FAULTS
from kvbed.core.params import param


@FAULTS.register("partial-offload")
class PartialOffload(Fault):
    @dataclass(frozen=True)
    class Params(FaultTime):
        tier: str = param("", "the tier being written (empty = the replayed tier)", choices=("",) + S.TIERS)
        inflight_ns: int = param(1_000_000, "tiers other than the replayed one: a copy written this recently "
                                            "was still in transfer")

    def validate(self) -> None:
        super().validate()
        if self.p.inflight_ns < 0:
            raise self.error(f"inflight_ns must be >= 0, got {self.p.inflight_ns}")

    def check_trace(self, facts) -> None:
        self.tier_checked(self.p.tier, facts)

    def apply(self, state) -> dict:
        if not self.p.tier or S.TIER[self.p.tier] == state.dev_tier:
            return state.lose_device_inflight(0)
        return state.tear_recent(self.p.tier, self.at_ns, self.p.inflight_ns)
