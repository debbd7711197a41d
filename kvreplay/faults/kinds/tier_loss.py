"""``tier-loss``: every copy in a tier vanishes with its index - a GPU worker crash loses gpu, a host crash
loses cpu (and a CXL pool's ownership: ``tier=cxl``); on the replayed tier the device's copies and index go."""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay import schema as S
from kvreplay.faults.base import Fault, FaultTime
from kvreplay.faults.registry import FAULTS
from kvbed.core.params import param


@FAULTS.register("tier-loss")
class TierLoss(Fault):
    @dataclass(frozen=True)
    class Params(FaultTime):
        tier: str = param("gpu", "the tier whose copies vanish", choices=S.TIERS)

    def check_trace(self, facts) -> None:
        self.tier_checked(self.p.tier, facts)

    def apply(self, state) -> dict:
        if S.TIER[self.p.tier] == state.dev_tier:
            return state.drop_device_index(data=True)
        return state.lose_tiers((self.p.tier,))
