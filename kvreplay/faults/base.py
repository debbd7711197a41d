"""What a fault kind is: a parameter set (``at_ns`` plus its own fields), what it checks against the trace,
and what it does to the fault model's state at its time.

A fault is given as ``KIND@TIME[,key=value...]`` (``--fault``, repeatable), ``[[fault]]`` tables in a TOML
file (``--fault-file``), or ``fault = "...;..."`` (``--param``, study axes); all three become the same text in
config.json, parsed here field by field with the same units and checks as every other parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kvbed.core.errors import KvbedError
from kvbed.core.params import check_fields, param, to_dict


@dataclass(frozen=True)
class FaultTime:
    """The field every fault kind has: when it strikes (trace time from the trace's first event)."""

    at_ns: int = param(0, "when the fault strikes, trace time from the first event (the KIND@TIME part)")


@dataclass
class TraceFacts:
    """What a fault may be checked against: the trace's span, tiers, scopes and the replayed tier."""

    span_ns: int
    tiers: dict[str, int]  # events per tier present
    scopes: list[str]
    replayed_tier: str


class Fault:
    """One injected fault: ``params`` (its kind's ``Params``) and the text it was given as."""

    name: ClassVar[str]
    Params: ClassVar[type]

    def __init__(self, params: Any, text: str):
        self.p = params
        self.text = text
        self.key = 0  # its index among the run's faults (set by the driver; names its index checkpoint)

    @property
    def at_ns(self) -> int:
        return int(self.p.at_ns)

    def error(self, message: str) -> KvbedError:
        return KvbedError(f"--fault {self.text!r}: {message}")

    def validate(self) -> None:
        """Checks that need no trace (ranges); the kind adds its own."""
        check_fields(self.p, label=f"fault {self.name}")
        if self.p.at_ns < 0:
            raise self.error(f"at_ns: the time must be >= 0, got {self.p.at_ns}")

    def check_trace(self, facts: TraceFacts) -> None:
        """Checks against the trace (the time is checked for every kind by the caller)."""

    def checkpoint_ns(self) -> int | None:
        """A trace time at which the host-side index must be saved for this fault (a stale index), or None."""
        return None

    def apply(self, state: Any) -> dict[str, Any]:
        """Act on :class:`~kvreplay.faults.state.FaultState` at the fault's time; returns what it did."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"kind": self.name, "spec": self.text, **to_dict(self.p)}

    def tier_checked(self, tier: str, facts: TraceFacts) -> None:
        if tier and tier not in facts.tiers:
            present = ", ".join(f"{k} ({v} events)" for k, v in facts.tiers.items()) or "none"
            raise self.error(f"tier={tier}: the trace has no {tier} events (tiers present: {present})")
