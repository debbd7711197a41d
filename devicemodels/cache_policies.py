"""Replacement policies of the CXL-SSD's set-associative DRAM cache: registry entries and their numba helpers.

As with GC victim policies, each policy is an integer code that the cache kernel dispatches on (numba does not
cache kernels specialised on a function argument), plus the constants it runs with. Every set keeps its own
state: per way a tag (-1 = invalid), a stamp (its place in its queue: smaller is older, every insertion or
reinsertion takes the next value of one counter), a saturating frequency and, for S3-FIFO, which queue it is in;
per set a ghost ring. A miss fills the lowest-numbered invalid way if there is one; only a full set evicts,
and it evicts exactly one unit:

* ``lru``: the least recently used unit (a hit makes it the newest);
* ``fifo``: the oldest inserted unit; hits change nothing;
* ``clock``: CLOCK / second chance, as FIFO with reinsertion: a hit sets the unit's reference bit; the
  oldest unit with its bit set has it cleared and becomes the newest, until the oldest has none: the victim;
* ``s3fifo``: S3-FIFO (Yang et al., SOSP'23) within the set, with the constants of kvreplay's tier ``s3fifo``:
  a small probationary FIFO of ``max(1, floor(0.1 x ways + 0.5))`` ways and a main FIFO of the rest; hits count up
  to 3. A full set evicts from the small queue while it holds at least its share: its oldest unit moves to
  the main queue (frequency reset to 0) if it was hit at least twice, else it is evicted and its tag goes to
  the set's ghost ring; otherwise from the main queue: its oldest unit is reinserted as the newest with its
  frequency lowered by one if it is above 0, else evicted. A missed unit found in the ghost ring (which holds
  the tags of the last ``ways - small`` units evicted from the small queue) is cleared from it and enters the
  main queue; any other enters the small one.

The units the current op has touched so far are pinned (an op larger than the set count maps several units
to one set, and must not evict its own units while other units could go): every policy passes over them where
they stand (stamp, frequency and queue unchanged) and takes the next unit it would; S3-FIFO turns to the other
queue when the one it evicts from holds only pinned units. When every unit of the set is pinned, the policy
evicts as if none were.

Dirty units are written back when evicted (the caller's business); TRIM invalidates units without touching
policy state. A policy code the kernel does not dispatch makes :func:`victim` return -1, which the cache
kernel reports as an error instead of running some other policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from devicemodels.jit import kernel
from kvbed.core.registry import Registry

LRU, FIFO, CLOCK, S3FIFO = range(4)


@dataclass(frozen=True)
class CachePolicy:
    code: int
    summary: str
    small_ratio: float = 0.0  # S3-FIFO: share of a set's ways for the probationary queue
    promote_freq: int = 0  # S3-FIFO: small -> main when hit at least this often while in small
    max_freq: int = 0  # saturating hit counter (CLOCK: 1, its reference bit)

    def small_ways(self, ways: int) -> int:
        return max(1, int(ways * self.small_ratio + 0.5)) if self.small_ratio else 0

    def ghost_ways(self, ways: int) -> int:
        """Ghost entries per set: as many as the main queue's ways (S3-FIFO's ghost is the size of M)."""
        return ways - self.small_ways(ways) if self.small_ratio else 0


CACHE_POLICIES: Registry[CachePolicy] = Registry("cache policy", summary_attr="summary")
CACHE_POLICIES.register("lru")(CachePolicy(LRU, "least recently used unit of the set"))
CACHE_POLICIES.register("fifo")(CachePolicy(FIFO, "oldest inserted unit of the set; hits change nothing"))
CACHE_POLICIES.register("clock")(CachePolicy(CLOCK, "CLOCK (second chance): FIFO that reinserts a unit hit since "
                                                    "its last pass", max_freq=1))
CACHE_POLICIES.register("s3fifo")(CachePolicy(
    S3FIFO, "S3-FIFO per set: 10% probationary FIFO, main FIFO with 2-bit reinsertion, ghost tags",
    small_ratio=0.10, promote_freq=2, max_freq=3))


class CacheGeo(NamedTuple):
    sets: int
    ways: int
    unit_pages: int  # flash pages per cache unit
    policy: int
    small_ways: int
    ghost_ways: int
    promote_freq: int
    max_freq: int


class CacheState(NamedTuple):
    tags: np.ndarray  # int64 [sets * ways], unit number or -1
    dirty: np.ndarray  # uint8 [sets * ways]
    stamp: np.ndarray  # int64 [sets * ways], order within the unit's queue
    freq: np.ndarray  # uint8 [sets * ways]
    main: np.ndarray  # uint8 [sets * ways], S3-FIFO: 1 = main queue
    ghost: np.ndarray  # int64 [sets * ghost_ways], -1 = empty
    gpos: np.ndarray  # int64 [sets], next ghost slot to overwrite
    misc: np.ndarray  # int64 [1]: the stamp counter


def build(policy_name: str, sets: int, ways: int, unit_pages: int) -> tuple[CacheGeo, CacheState]:
    p = CACHE_POLICIES.get(policy_name)
    cg = CacheGeo(sets=sets, ways=ways, unit_pages=unit_pages, policy=p.code, small_ways=p.small_ways(ways),
                  ghost_ways=p.ghost_ways(ways), promote_freq=p.promote_freq, max_freq=p.max_freq)
    n = sets * ways
    cs = CacheState(tags=np.full(n, -1, np.int64), dirty=np.zeros(n, np.uint8), stamp=np.zeros(n, np.int64),
                    freq=np.zeros(n, np.uint8), main=np.zeros(n, np.uint8),
                    ghost=np.full(sets * cg.ghost_ways, -1, np.int64), gpos=np.zeros(sets, np.int64),
                    misc=np.zeros(1, np.int64))
    return cg, cs


@kernel(inline="always")
def _tick(cs):
    cs.misc[0] += 1
    return cs.misc[0]


@kernel(inline="always")
def oldest_way(cs, base, ways, queue, lo, hi):
    """Way of the oldest valid unit of the set at ``base`` (in queue 0/1, or any: -1) outside the pinned
    units ``lo <= tag < hi`` (``lo = hi``: none); -1 if none."""
    best = -1
    for w in range(base, base + ways):
        tag = cs.tags[w]
        if tag >= 0 and (queue < 0 or cs.main[w] == queue) and (lo == hi or tag < lo or tag >= hi):
            if best < 0 or cs.stamp[w] < cs.stamp[best]:
                best = w
    return best


@kernel(inline="always")
def on_hit(cs, cg, w):
    if cg.policy == LRU:
        cs.stamp[w] = _tick(cs)
    elif cs.freq[w] < cg.max_freq:
        cs.freq[w] += 1


@kernel(inline="always")
def _ghost_add(cs, cg, s, tag):
    if cg.ghost_ways == 0:
        return
    p = cs.gpos[s]
    cs.ghost[s * cg.ghost_ways + p] = tag
    cs.gpos[s] = (p + 1) % cg.ghost_ways


@kernel(inline="always")
def _ghost_take(cs, cg, s, tag):
    for j in range(s * cg.ghost_ways, (s + 1) * cg.ghost_ways):
        if cs.ghost[j] == tag:
            cs.ghost[j] = -1
            return True
    return False


@kernel(inline="always")
def victim(cs, cg, s, oldest, lo, hi):
    """The way to evict from full set ``s`` (policy state updated); -1 for a policy code not dispatched here.
    Units ``lo <= tag < hi`` are pinned (the op's own, touched so far; ``lo = hi``: none). ``oldest`` is the
    set's unpinned way of smallest stamp, -1 if every way is pinned (the caller's lookup scan found it)."""
    base = s * cg.ways
    code = cg.policy
    if oldest < 0:  # every unit of the set is pinned: the policy's own choice
        lo = hi
        oldest = oldest_way(cs, base, cg.ways, -1, lo, hi)
    if code == LRU or code == FIFO:
        return oldest
    if code == CLOCK:
        w = oldest
        while cs.freq[w] != 0:
            cs.freq[w] -= 1
            cs.stamp[w] = _tick(cs)
            w = oldest_way(cs, base, cg.ways, -1, lo, hi)
        return w
    if code == S3FIFO:
        while True:
            small = 0
            for w in range(base, base + cg.ways):
                if cs.main[w] == 0:
                    small += 1
            q = 0 if small >= cg.small_ways else 1
            w = oldest_way(cs, base, cg.ways, q, lo, hi)
            if w < 0:  # only pinned units in that queue: the other one
                q = 1 - q
                w = oldest_way(cs, base, cg.ways, q, lo, hi)
            if q == 0:
                if cs.freq[w] >= cg.promote_freq:
                    cs.main[w] = 1
                    cs.freq[w] = 0
                    cs.stamp[w] = _tick(cs)
                    continue
                _ghost_add(cs, cg, s, cs.tags[w])
                return w
            if cs.freq[w] > 0:
                cs.freq[w] -= 1
                cs.stamp[w] = _tick(cs)
                continue
            return w
    return -1


@kernel(inline="always")
def on_insert(cs, cg, s, w, tag):
    """Unit ``tag`` now occupies way ``w`` of set ``s``: the newest of its queue, not yet hit."""
    cs.stamp[w] = _tick(cs)
    cs.freq[w] = 0
    cs.main[w] = 1 if (cg.policy == S3FIFO and _ghost_take(cs, cg, s, tag)) else 0
