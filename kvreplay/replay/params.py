"""Parameters of a replay run (a frozen dataclass; CLI options and config.json derive from it).

Fields declared ``cli=True`` get their own ``--option``; every field is a ``--param k=v``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay import schema as S
from kvreplay.layout.params import LayoutParams  # noqa: F401  (a replay's other parameter set)
from kvbed.core.errors import KvbedError
from kvbed.core.params import check_fields, param


@dataclass(frozen=True)
class ReplayParams:
    tier: str = param("ssd", "tier of the trace to replay on the device", choices=S.TIERS, cli=True)
    classes: int = param(0, "placement classes the hint policy uses; 0 = what the device separates "
                            "(fdp: nruh x nrg, zns: up to 8 zone groups, conv: 1); more than the device's "
                            "placement ids: adjacent classes share one (noted in the sizing)")
    fill_ratio: float = param(0.9, "peak live bytes of the tier / logical capacity, when the capacity is sized "
                                   "from the trace (an explicit logical_bytes overrides it)", cli=True)
    precondition: float = param(0.0, "fill this share of the device before the replay (counted apart); 0 = fresh",
                                cli=True)
    time_scale: float = param(1.0, "replay X times faster than the trace's clock", cli=True)
    as_fast_as_possible: bool = param(False, "ignore trace timing: keep queue_depth ops in flight", cli=True)
    queue_depth: int = param(32, "ops in flight with --as-fast-as-possible")
    seed: int = param(0, "seed of every random choice (noisy-oracle, device GC tie breaks, preconditioning)",
                      cli=True)
    window_ns: int = param(0, "time-series window in trace time; 0 = the trace span / 256, rounded to 1-2-5")
    write_utilization: float = param(0.8, "when channels/dies are not given: raise them until the tier's busiest "
                                          "second of writes uses at most this share of the device's program "
                                          "bandwidth; 0 = keep the flash defaults")
    strict_capacity: bool = param(True, "refuse a device smaller than the tier's peak live data; false = let the "
                                        "layout evict by the tier's policy when full")
    saturation_wait_ns: int = param(
        2_000_000_000,
        "an op in flight longer than this (arrival to now) means the device is backlogged: it is behind the "
        "arrivals, and latency past this is queueing (result.json job 'saturation'). Default 2 s: above the longest "
        "single foreground-GC stall of the demo's runs, which keep up (tests/testbed/report/test_figure_labels.py checks it)",
        quiet_default=True)
    saturation_backlog_ratio: float = param(
        0.01, "flag the run 'saturated' when the device was backlogged (saturation_wait_ns) for at least this "
              "share of the replay span (first arrival to last completion); open loop only", quiet_default=True)

    hint_lab: bool = param(False, "after the replay, measure the hints against the oracle's on the same trace "
                                  "(classes, lifetime ranks, and the share of the oracle's WAF cut: two more "
                                  "replays, with hints none and oracle); result.json jobs[].hint_policy.lab",
                           cli=True, quiet_default=True)

    def validate(self) -> "ReplayParams":
        check_fields(self)
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
        if self.saturation_wait_ns < 0:
            raise KvbedError(f"saturation_wait_ns must be >= 0, got {self.saturation_wait_ns}")
        if not (0.0 <= self.saturation_backlog_ratio <= 1.0):
            raise KvbedError(f"saturation_backlog_ratio must be in [0, 1], got {self.saturation_backlog_ratio}")
        if self.window_ns < 0:
            raise KvbedError(f"window_ns must be >= 0, got {self.window_ns}")
        return self

    @property
    def tier_code(self) -> int:
        return S.TIER[self.tier]


