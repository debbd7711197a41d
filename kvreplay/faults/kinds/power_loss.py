"""``power-loss``: the machine loses power - the device drops its volatile write buffer and in-flight writes,
volatile tiers (gpu, cpu, cxl) lose their copies, and the host-side index survives, is lost, or comes back
from an older checkpoint.

The device model acknowledges a write when it is programmed, so "acknowledged but not on the media" is
modelled explicitly: a write is on the media ``flush_ns`` after its completion (0: a drive with power-loss
protection), the units of one op in order, evenly spread from its arrival to its completion. Units that had
arrived but were not on the media at the instant are undone (``torn``: some of an object's units on the
media, ``lost``: none).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay.faults.base import Fault, FaultTime
from kvreplay.faults.registry import FAULTS
from kvreplay.faults.state import VOLATILE_TIERS
from kvbed.core.params import param


@FAULTS.register("power-loss")
class PowerLoss(Fault):
    @dataclass(frozen=True)
    class Params(FaultTime):
        index: str = param("kept", "the host-side index after the loss: kept (persisted synchronously), lost, "
                                   "or stale (restored from a checkpoint stale_ns old)",
                           choices=("kept", "lost", "stale"))
        stale_ns: int = param(1_000_000_000, "with index=stale: age of the restored index checkpoint")
        flush_ns: int = param(0, "a write reaches the media this long after it is acknowledged (volatile write "
                                 "buffer; 0 = power-loss protected)")

    def validate(self) -> None:
        super().validate()
        for k in ("stale_ns", "flush_ns"):
            if getattr(self.p, k) < 0:
                raise self.error(f"{k} must be >= 0, got {getattr(self.p, k)}")

    def checkpoint_ns(self) -> int | None:
        return self.at_ns - self.p.stale_ns if self.p.index == "stale" else None

    def apply(self, state) -> dict:
        out = state.lose_device_inflight(self.p.flush_ns)
        out.update(state.lose_tiers(VOLATILE_TIERS))
        if self.p.index == "lost":
            out.update(state.drop_device_index(data=False))
        elif self.p.index == "stale":
            out.update(state.restore_index(self.key))
        return out
