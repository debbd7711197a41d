"""Online quantile buckets for a policy's score (numba), so every placement id gets a share of writes.

A policy that ranks writes by a score (predicted log-lifetime, hotness) must turn
the score into ``n`` classes. A fixed scale saturates (most writes land in one
class) and quantiles of something else (e.g. observed lifetimes when the score
is a mean) use only a few classes. So the policy keeps a histogram of the scores
it has given (log2 units, 1/8-octave bins) and, every ``refresh`` scores, moves
the class edges to that histogram's quantiles k/n and then halves it: scores
drift as a trace goes on (a tier that is still filling sees no deaths, then
many), so the edges follow roughly the last two refresh windows. Counted in
trace order, inside the kernel: classes never depend on batch boundaries, and
they use only scores of past writes.
"""

from __future__ import annotations

import numpy as np

from devicemodels.jit import kernel
BINS_PER_OCTAVE = 8
OCTAVES = 64
NBINS = BINS_PER_OCTAVE * OCTAVES


@kernel(inline="always")
def score_bin(x):
    """Bin of a score in log2 units (x >= 0)."""
    b = int(x * BINS_PER_OCTAVE)
    if b < 0:
        return 0
    if b >= NBINS:
        return NBINS - 1
    return b


@kernel
def refresh_edges(hist, edges):
    """Set ``edges`` (n-1 values) to the distinct upper bounds of the bins where the histogram reaches k/n
    (+inf for the spare ones), then halve the histogram (older scores weigh less)."""
    total = 0.0
    for k in range(len(hist)):
        total += hist[k]
    m = len(edges) + 1
    acc = 0.0
    j = 0
    for k in range(len(hist)):
        acc += hist[k]
        while j < len(edges) and acc * m >= (j + 1) * total:
            edges[j] = (k + 1) / BINS_PER_OCTAVE
            j += 1
    # quantiles that fall in the same bin give the same edge: keep each edge once and put the spare ones at
    # +inf, so the classes in use are 0..d (fewer classes) instead of classes left empty between used ones
    d = 0
    for k in range(len(edges)):
        if k == 0 or edges[k] > edges[d - 1]:
            edges[d] = edges[k]
            d += 1
    for k in range(d, len(edges)):
        edges[k] = np.inf
    for k in range(len(hist)):
        hist[k] *= 0.5


@kernel(inline="always")
def class_of(x, edges):
    """Number of edges strictly below x: class k holds (edge[k-1], edge[k]]."""
    c = 0
    while c < len(edges) and x > edges[c]:
        c += 1
    return c


@kernel(inline="always")
def note_score(x, hist, edges, state, ready, count, refresh):
    """Count score ``x`` (``state[count]`` scores so far); every ``refresh`` scores, move the edges and
    set ``state[ready]`` to 1 (classes follow the edges from then on)."""
    hist[score_bin(x)] += 1
    state[count] += 1
    if state[count] % refresh == 0:
        refresh_edges(hist, edges)
        state[ready] = 1


def new_state(n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(histogram, edges) for an n-class bucketing."""
    return np.zeros(NBINS, np.float64), np.zeros(max(0, n_classes - 1), np.float64)
