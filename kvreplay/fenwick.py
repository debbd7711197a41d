"""Fenwick (binary indexed) trees over positions, for numba kernels: ``tree`` is an int64 array of n + 1
entries holding n positions 0..n-1 (entry 0 unused). :mod:`kvreplay.stats` (reuse distance over the
streamed trace) and :mod:`kvreplay.contentstats` (per tier reuse distance) count marked positions with them."""

from __future__ import annotations

from devicemodels.jit import njit


@njit(inline="always")
def fw_add(tree, i, v):
    """Add ``v`` at position ``i``."""
    n = tree.shape[0]
    i += 1
    while i < n:
        tree[i] += v
        i += i & (-i)


@njit(inline="always")
def fw_sum(tree, i):
    """Sum of positions [0, i] (0 for i < 0)."""
    s = 0
    i += 1
    while i > 0:
        s += tree[i]
        i -= i & (-i)
    return s
