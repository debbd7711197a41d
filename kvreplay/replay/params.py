"""Parameters of a replay run (frozen dataclasses; CLI options and config.json derive from them).

Field ``metadata["help"]`` is the CLI help text; ``metadata["cli"]`` marks the
fields that get their own ``--option`` (the rest are ``--param k=v`` only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvreplay import schema as S
from testbed.core.errors import KvbedError


def _f(default, help: str, cli: bool = False):
    return field(default=default, metadata={"help": help, "cli": cli})


@dataclass(frozen=True)
class ReplayParams:
    tier: str = _f("ssd", "tier of the trace to replay on the device", cli=True)
    classes: int = _f(0, "placement classes the hint policy uses; 0 = what the device separates "
                         "(fdp: nruh, zns: up to 8 zone groups, conv: 1)")
    fill_ratio: float = _f(0.9, "peak live bytes of the tier / logical capacity, when the capacity is sized "
                                "from the trace (an explicit logical_bytes overrides it)", cli=True)
    precondition: float = _f(0.0, "fill this share of the device before the replay (counted apart); 0 = fresh",
                             cli=True)
    time_scale: float = _f(1.0, "replay X times faster than the trace's clock", cli=True)
    as_fast_as_possible: bool = _f(False, "ignore trace timing: keep queue_depth ops in flight", cli=True)
    queue_depth: int = _f(32, "ops in flight with --as-fast-as-possible")
    seed: int = _f(0, "seed of every random choice (noisy-oracle, device GC tie breaks, preconditioning)",
                   cli=True)
    window_ns: int = _f(0, "time-series window in trace time; 0 = the trace span / 256, rounded to 1-2-5")
    write_utilization: float = _f(0.8, "when channels/dies are not given: raise them until the tier's busiest "
                                       "second of writes uses at most this share of the device's program "
                                       "bandwidth; 0 = keep the flash defaults")
    strict_capacity: bool = _f(True, "refuse a device smaller than the tier's peak live data; false = let the "
                                     "layout evict by the tier's policy when full")

    def validate(self) -> "ReplayParams":
        if self.tier not in S.TIERS:
            raise KvbedError(f"--tier: unknown tier {self.tier!r} (choose from: {', '.join(S.TIERS)})")
        if self.classes < 0 or self.classes > 32767:
            raise KvbedError(f"classes must be in [0, 32767], got {self.classes}")
        if not (0.0 < self.fill_ratio <= 1.0):
            raise KvbedError(f"fill_ratio must be in (0, 1], got {self.fill_ratio}")
        if not (0.0 <= self.precondition <= 1.0):
            raise KvbedError(f"--precondition must be in [0, 1], got {self.precondition}")
        if not self.time_scale > 0:
            raise KvbedError(f"--time-scale must be positive, got {self.time_scale}")
        if self.as_fast_as_possible and self.time_scale != 1.0:  # however each was given (option or --param)
            raise KvbedError("--time-scale and --as-fast-as-possible exclude each other")
        if self.queue_depth < 1:
            raise KvbedError(f"queue_depth must be >= 1, got {self.queue_depth}")
        if not (0.0 <= self.write_utilization <= 1.0):
            raise KvbedError(f"write_utilization must be in [0, 1], got {self.write_utilization}")
        if self.window_ns < 0:
            raise KvbedError(f"window_ns must be >= 0, got {self.window_ns}")
        return self

    @property
    def tier_code(self) -> int:
        return S.TIER[self.tier]


EVICT_POLICIES = ("tier", "lru", "fifo")
GC_STREAMS = ("shared", "per-class")


@dataclass(frozen=True)
class LayoutParams:
    evict_policy: str = _f("tier", "what the layout evicts when the namespace is full: lru, fifo, or tier "
                                   "(the replayed tier's policy from the trace metadata; lru-like policies "
                                   "map to lru, fifo-like ones to fifo)")
    rewrite_in_place: bool = _f(True, "conv/fdp: a rewrite of a resident object of the same size overwrites "
                                      "its extents")
    gc_free_zones: int = _f(0, "zns: host GC keeps this many zones empty (at least 2); 0 = max(2, zones / 20)")
    gc_stream: str = _f("shared", "zns: relocated data goes to one shared GC zone, or one per class")

    def validate(self) -> "LayoutParams":
        if self.evict_policy not in EVICT_POLICIES:
            raise KvbedError(f"evict_policy: expected one of {', '.join(EVICT_POLICIES)}, got {self.evict_policy!r}")
        if self.gc_stream not in GC_STREAMS:
            raise KvbedError(f"gc_stream: expected one of {', '.join(GC_STREAMS)}, got {self.gc_stream!r}")
        if self.gc_free_zones < 0:
            raise KvbedError(f"gc_free_zones must be >= 0, got {self.gc_free_zones}")
        return self
