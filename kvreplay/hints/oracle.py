"""``oracle``: the exact remaining lifetime of each write, from the future of the trace.

Offline by construction: the replay's first pass records when every copy
written to the tier dies (its evict/delete/invalidate on the tier, or the
rewrite that replaces it). Lifetimes are measured on a clock - by default the
bytes written to the tier in between (the "write clock", which is what decides
whether a flash block is still mixed when GC reaches it), or trace time - and
bucketed into as many classes as the device separates, with edges at the
lifetime quantiles weighted by size (in mapping units) so every class carries a
similar share of the written bytes. A copy that never dies gets an infinite lifetime (the last class).
The whole pass is vectorised: a sort for the quantiles and a searchsorted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvreplay.hints.registry import HINTS
from kvreplay.hints.base import Future, HintPolicy, classes_from_edges, lifetime_edges
from kvbed.core.params import param

CLOCKS = ("bytes", "time")
#: the unit of a lifetime on each clock (suffix of the result.json keys that hold lifetimes)
CLOCK_UNIT = {"bytes": "bytes", "time": "ns"}


@dataclass(frozen=True)
class OracleParams:
    clock: str = param("bytes", "lifetime clock: bytes written to the tier meanwhile, or trace time (ns)",
                       choices=CLOCKS)


def future_lifetimes(future: Future) -> np.ndarray:
    lt = future.lifetime.astype(np.float64)
    lt[future.lifetime < 0] = np.inf
    return lt


@HINTS.register("oracle")
class OracleHints(HintPolicy):
    knows = "the future: when every copy written to the tier will die (exact remaining lifetime)"
    needs_future = True
    Params = OracleParams

    def __init__(self, n_classes, params=None, *, seed=0, tier=3):
        super().__init__(n_classes, params, seed=seed, tier=tier)
        self.clock = self.params.clock
        self.classes: np.ndarray | None = None
        self.edges = np.zeros(0)

    def prepare(self, future: Future) -> None:
        lt = future_lifetimes(future)
        self.edges = lifetime_edges(lt, future.weight, self.n_classes)
        self.classes = classes_from_edges(lt, self.edges)

    def _assign(self, batch, actions, writes):
        if self.classes is None:
            raise RuntimeError("oracle used before prepare()")
        lo, hi = self.writes_seen, self.writes_seen + len(writes)
        if hi > len(self.classes):
            raise RuntimeError("more writes in replay than in the first pass")
        return self.classes[lo:hi]

    def describe(self):
        counts = np.bincount(self.classes, minlength=self.n_classes) if self.classes is not None else []
        return {
            "clock": self.clock,
            f"edges_{CLOCK_UNIT[self.clock]}": [None if not np.isfinite(e) else int(e) for e in self.edges],
            "writes_per_class": [int(c) for c in counts],
        }

    def memory_bytes(self):
        return 0 if self.classes is None else int(self.classes.nbytes)
