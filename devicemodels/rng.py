"""A tiny per-device PRNG (splitmix64) that numba kernels can own.

Why not numpy's Generator or numba's np.random: the former cannot be used inside
a kernel and the latter is process-global state, so two devices in one process
would perturb each other's victim choices. Each device keeps its own uint64
state array, seeded from ``FlashParams.seed``; runs are reproducible.
"""

from __future__ import annotations

import numpy as np
from devicemodels.jit import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)


def new_state(seed: int) -> np.ndarray:
    return np.array([np.uint64(seed & 0xFFFFFFFFFFFFFFFF)], dtype=np.uint64)


@njit(inline="always")
def next_u64(state):
    x = state[0] + _GOLDEN
    state[0] = x
    z = (x ^ (x >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(inline="always")
def below(state, n):
    """Uniform int in [0, n) (n > 0; modulo bias is < n / 2**64)."""
    return np.int64(next_u64(state) % np.uint64(n))
