"""``noisy-oracle``: the oracle's classes with a given misclassification rate.

Each write keeps its oracle class with probability ``1 - error_rate``; otherwise
it gets one of the *other* classes uniformly at random (seeded). Sweeping the
rate answers "how good must a lifetime predictor be before the hint pays off" -
and the answer can be "very": at high fill a few percent of long-lived copies
misplaced among short-lived ones pin reclaim units that would otherwise die
whole (Mooncake, S3-FIFO SSD tier, fill 1.0, 8 RUHs: WAF 1.000 exact, 1.001 at
1% error, 1.059 at 5%, 1.193 at 10% - worse than no hints, 1.129). The default
rate, 0.1, is a 90%-accurate predictor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvreplay.hints.registry import HINTS
from kvreplay.hints.oracle import OracleHints, OracleParams
from kvbed.core.errors import KvbedError
from kvbed.core.params import param


@dataclass(frozen=True)
class NoisyOracleParams(OracleParams):
    error_rate: float = param(0.1, "share of writes given a wrong class (seeded)")


@HINTS.register("noisy-oracle")
class NoisyOracleHints(OracleHints):
    knows = "the future (as oracle), then a seeded share error_rate of writes moved to a wrong class"
    Params = NoisyOracleParams

    def __init__(self, n_classes, params=None, *, seed=0, tier=3):
        super().__init__(n_classes, params, seed=seed, tier=tier)
        if not (0.0 <= self.params.error_rate <= 1.0):
            raise KvbedError(f"--param error_rate: must be in [0, 1], got {self.params.error_rate}")

    def prepare(self, future):
        super().prepare(future)
        exact = self.classes
        rng = np.random.default_rng([self.seed, 0x6E6F697379])  # stream of its own, independent of other draws
        flip = rng.random(len(exact)) < self.params.error_rate
        if self.n_classes > 1:
            shift = rng.integers(1, self.n_classes, size=len(exact))
            noisy = ((exact.astype(np.int64) + shift) % self.n_classes).astype(np.int16)
            self.classes = np.where(flip, noisy, exact).astype(np.int16)
        self.flipped = int(flip.sum()) if self.n_classes > 1 else 0

    def describe(self):
        out = super().describe()
        out["error_rate"] = self.params.error_rate
        out["writes_misclassified"] = getattr(self, "flipped", 0)
        return out
