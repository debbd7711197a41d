"""``media-error``: reads of the replayed tier return corrupt data - at ``rate_per_bit`` per bit read from the
fault's time on (each load is hit with 1 - (1 - rate)^bits, drawn from the run's seed and the load's row), or
the current copies of chosen ``objects`` (until they are rewritten).

The corruption is *silent* (the device's ECC missed or miscorrected it): a reported uncorrectable read
would be an error every contract sees, so only silent corruption separates them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay.faults.base import Fault, FaultTime
from kvreplay.faults.registry import FAULTS
from kvbed.core.params import param


@FAULTS.register("media-error")
class MediaError(Fault):
    @dataclass(frozen=True)
    class Params(FaultTime):
        rate_per_bit: float = param(0.0, "probability that a bit read is corrupt, in [0, 1] (replaces an earlier "
                                         "fault's rate)")
        objects: str = param("", "object ids whose copies get an uncorrectable unit, separated by '/' "
                                 "(e.g. 3/17/42)")

    def object_ids(self) -> list[int]:
        try:
            return [int(x) for x in self.p.objects.split("/") if x.strip()]
        except ValueError:
            raise self.error(f"objects: expected object ids separated by '/', got {self.p.objects!r}") from None

    def validate(self) -> None:
        super().validate()
        if not (0.0 <= self.p.rate_per_bit <= 1.0):
            raise self.error(f"rate_per_bit must be in [0, 1], got {self.p.rate_per_bit}")

    def apply(self, state) -> dict:
        out = state.corrupt_objects(self.object_ids())
        if self.p.rate_per_bit > 0:
            state.media_rate = float(self.p.rate_per_bit)
            state.media_from = self.at_ns
        return out
