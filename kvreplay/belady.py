"""Belady's MIN over a key sequence: the offline optimum of a demand cache of ``slots`` equal slots.

On every miss the key is admitted (a demand cache, as libCacheSim's ``Belady`` and as a KV tier that must
hold what it just computed or loaded); when the cache is full, the cached key whose next use is farthest in
the future goes (keys never used again first). No demand policy hits more often on the same sequence.

Whole batch: :func:`next_use` finds every access's next access of the same key with numpy (a stable sort by
key); the eviction loop is a numba kernel over a max-heap of next-use positions. A cached key is represented
only by its next use: access i hits iff some cached key's next use is i (``held[i]``), so no key table is
needed. Keys never used again get distinct positions past the end (n + i), so every heap entry is unique;
entries at or before the current access are stale (their key was accessed or evicted) and skipped.

Slots for a tier of bytes: :func:`slots_for` (capacity / largest object; exact when all objects have that
size, otherwise smaller objects are counted as a whole slot: their size is estimated upward, so the figure is
that of a cache of equal slots, not a byte-exact optimum, which for mixed sizes is NP-hard).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from devicemodels.jit import njit


class BeladyResult(NamedTuple):
    accesses: int
    hits: int  # Belady's hits at ``slots``
    slots: int
    unbounded_hits: int  # accesses whose key was accessed before (an infinite cache's hits)

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.accesses if self.accesses else 0.0

    @property
    def unbounded_hit_ratio(self) -> float:
        return self.unbounded_hits / self.accesses if self.accesses else 0.0


def next_use(keys: np.ndarray) -> np.ndarray:
    """For each access i, the index of the next access of the same key, or n + i if there is none."""
    order = np.argsort(keys, kind="stable")
    return next_use_sorted(order, keys[order])


def next_use_sorted(order: np.ndarray, sorted_ids: np.ndarray) -> np.ndarray:
    """:func:`next_use` from a stable sort already made: ``order`` sorts the accesses by id, ``sorted_ids`` are
    their ids in that order (equal ids are the same key)."""
    n = len(order)
    nxt = n + np.arange(n, dtype=np.int64)
    if n > 1:
        same = sorted_ids[1:] == sorted_ids[:-1]
        nxt[order[:-1][same]] = order[1:][same]
    return nxt


@njit(inline="always")
def _sift_up(heap, i):
    v = heap[i]
    while i > 0:
        p = (i - 1) >> 1
        if heap[p] >= v:
            break
        heap[i] = heap[p]
        i = p
    heap[i] = v


@njit(inline="always")
def _pop_max(heap, size):
    """Remove and return the largest of heap[0:size] (the caller decrements its size)."""
    top = heap[0]
    last = heap[size - 1]
    m = size - 1
    i = 0
    while True:
        c = 2 * i + 1
        if c >= m:
            break
        if c + 1 < m and heap[c + 1] > heap[c]:
            c += 1
        if heap[c] <= last:
            break
        heap[i] = heap[c]
        i = c
    if m > 0:
        heap[i] = last
    return top


@njit
def _belady_kernel(nxt, slots, heap, held):
    """Hits of a demand cache of ``slots`` slots under Belady's rule; ``heap`` (n entries) and ``held``
    (2n flags) are scratch, zeroed by the caller."""
    n = nxt.shape[0]
    size = 0
    cached = 0
    hits = 0
    for i in range(n):
        if held[i]:
            held[i] = 0
            hits += 1
        else:
            if cached == slots:
                while True:  # the farthest next use still held (stale entries are <= i)
                    v = _pop_max(heap, size)
                    size -= 1
                    if v > i and held[v]:
                        held[v] = 0
                        break
                cached -= 1
            cached += 1
        v = nxt[i]
        held[v] = 1
        if size == heap.shape[0]:  # compact: keep only live entries (> i and held)
            m = 0
            for j in range(size):
                if heap[j] > i and held[heap[j]]:
                    heap[m] = heap[j]
                    _sift_up(heap, m)
                    m += 1
            size = m
        heap[size] = v
        _sift_up(heap, size)
        size += 1
    return hits


def belady(keys: np.ndarray, slots: int) -> BeladyResult:
    """Belady's hits on ``keys`` (any integer dtype) with ``slots`` slots (>= 0)."""
    return belady_next(next_use(np.asarray(keys)), slots)


def belady_next(nxt: np.ndarray, slots: int) -> BeladyResult:
    """:func:`belady` on the next uses :func:`next_use` gives."""
    n = len(nxt)
    unbounded = int((nxt < n).sum())  # every access with a next use makes that next use a reuse
    if n == 0 or slots <= 0:
        return BeladyResult(n, 0, int(slots), unbounded)
    # at most slots + 1 entries are live at once; the rest are stale and compacted away when the heap fills
    heap = np.zeros(min(n, max(2 * int(slots) + 2, 1024)), np.int64)
    held = np.zeros(2 * n, np.uint8)
    return BeladyResult(n, int(_belady_kernel(nxt, int(slots), heap, held)), int(slots), unbounded)


def slots_for(capacity_bytes: int, sizes: np.ndarray) -> tuple[int, str]:
    """Slots a tier of ``capacity_bytes`` gives objects of ``sizes`` (bytes, one per access), and how exact:
    "exact" when every object is the largest one's size, else an upper size estimate for the smaller ones."""
    if len(sizes) == 0:
        return 0, "exact"
    big = int(sizes.max())
    slots = int(capacity_bytes) // big if big > 0 else 0
    small = int((sizes < big).sum())
    if small == 0:
        return slots, "exact"
    return slots, (f"upper size estimate: {small:,} of {len(sizes):,} accesses are to objects smaller than "
                   f"the {big:,}-byte slot, each counted as a whole slot")
