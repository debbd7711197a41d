"""Closed-form WAF of uniform random writes with one write frontier (validation references).

Over-provisioning ``rho = (physical - logical) / logical`` and ``alpha = 1 + rho``.
FIFO (LRU) cleaning: a victim's valid fraction ``x`` solves ``x = exp(-alpha (1 - x))`` and
``WAF = 1 / (1 - x)``, i.e. ``alpha / (alpha + W0(-alpha e^-alpha))``. A uniformly random
victim is valid in proportion to the logical fill, so ``WAF = 1 / spare_factor`` with
``spare_factor = (physical - logical) / physical``. Greedy has no closed form (it tends to
the FIFO value as pages per block grow); see ../shared/notes/reference-figures.md.
"""

from __future__ import annotations

import math


def _check(op_ratio: float) -> None:
    if not op_ratio > 0:
        raise ValueError(f"op_ratio must be > 0, got {op_ratio}")


def fifo_valid_fraction(op_ratio: float) -> float:
    """Solve x = exp(-alpha (1 - x)) for the root in [0, 1) by bisection (monotone, no scipy)."""
    _check(op_ratio)
    a = 1.0 + op_ratio
    # f(x) = exp(-a(1-x)) - x is > 0 at 0 and < 0 just below the trivial root x = 1 (a > 1)
    lo, hi = 0.0, 1.0 - 1e-9
    for _ in range(200):
        mid = (lo + hi) / 2
        if math.exp(-a * (1 - mid)) - mid > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def fifo_waf(op_ratio: float) -> float:
    return 1.0 / (1.0 - fifo_valid_fraction(op_ratio))


def random_waf(op_ratio: float) -> float:
    _check(op_ratio)
    return (1.0 + op_ratio) / op_ratio  # 1 / ((P - L) / P)
