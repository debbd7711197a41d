"""A plain-Python reference of the CXL-SSD cache (devicemodels/cache_policies.py, cxl_ssd.py), for tests.

Written from the policies' definitions, not from the kernel: a set is a list of queues of tags (oldest first)
instead of ways with stamps, the ghost is a history list instead of a ring, and nothing is shared with the
package. The units an op has touched so far are pinned (passed over by eviction where they stand). It
counts what the kernel counts: unit hits and misses by reads and writes, fills, write-backs, and
read ops whose every unit hit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

READ, WRITE, TRIM = 0, 1, 2  # devicemodels.base.OP_* (kept apart on purpose)


@dataclass
class Counts:
    read_hits: int = 0
    read_misses: int = 0
    write_hits: int = 0
    write_misses: int = 0
    fills: int = 0
    writebacks: int = 0
    read_ops_all_hit: int = 0
    ghost_admissions: int = 0  # s3fifo: misses that entered the main queue from the ghost
    writeback_units: list[int] = field(default_factory=list)


class RefSet:
    """One set of ``ways`` units under ``policy``."""

    def __init__(self, policy: str, ways: int):
        self.policy, self.ways = policy, ways
        self.dirty: dict[int, bool] = {}
        self.freq: dict[int, int] = {}
        self.small: list[int] = []  # s3fifo probationary queue; for the other policies the only queue
        self.main: list[int] = []
        self.history: list[int | None] = []  # s3fifo: tags evicted from small, oldest first
        if policy == "s3fifo":
            self.n_small = max(1, int(ways * 0.1 + 0.5))
            self.n_ghost = ways - self.n_small

    def __contains__(self, tag: int) -> bool:
        return tag in self.dirty

    def __len__(self) -> int:
        return len(self.dirty)

    def hit(self, tag: int) -> None:
        if self.policy == "lru":
            self.small.remove(tag)
            self.small.append(tag)
        elif self.policy == "clock":
            self.freq[tag] = 1
        elif self.policy == "s3fifo":
            self.freq[tag] = min(3, self.freq[tag] + 1)

    def _in_ghost(self, tag: int) -> bool:
        recent = self.history[-self.n_ghost:] if self.n_ghost else []
        return tag in recent

    def _forget_ghost(self, tag: int) -> None:
        start = len(self.history) - self.n_ghost
        for j in range(max(0, start), len(self.history)):
            if self.history[j] == tag:
                self.history[j] = None
                return

    def evict(self, pinned=lambda tag: False) -> int:
        """Remove one unit of a full set by the policy; returns its tag. Units ``pinned(tag)`` are passed
        over where they stand (s3fifo: the other queue if the one it evicts from holds only such units);
        if every unit is pinned, the policy chooses as if none were."""
        if all(pinned(t) for t in self.dirty):
            pinned = lambda tag: False  # noqa: E731

        def first(q: list[int]) -> int | None:
            return next((t for t in q if not pinned(t)), None)

        if self.policy in ("lru", "fifo"):
            t = first(self.small)
            self.small.remove(t)
            return t
        if self.policy == "clock":
            while True:
                t = first(self.small)
                self.small.remove(t)
                if not self.freq[t]:
                    return t
                self.freq[t] = 0
                self.small.append(t)
        while True:  # s3fifo
            q = self.small if len(self.small) >= self.n_small else self.main
            t = first(q)
            if t is None:
                q = self.main if q is self.small else self.small
                t = first(q)
            q.remove(t)
            if q is self.small:
                if self.freq[t] >= 2:
                    self.freq[t] = 0
                    self.main.append(t)
                    continue
                self.history.append(t)
                return t
            if self.freq[t] > 0:
                self.freq[t] -= 1
                self.main.append(t)
                continue
            return t

    def insert(self, tag: int, dirty: bool) -> bool:
        """Admit ``tag``; True if it came back from the ghost (s3fifo)."""
        self.dirty[tag] = dirty
        self.freq[tag] = 0
        if self.policy == "s3fifo" and self._in_ghost(tag):
            self._forget_ghost(tag)
            self.main.append(tag)
            return True
        self.small.append(tag)
        return False

    def drop(self, tag: int) -> None:
        for q in (self.small, self.main):
            if tag in q:
                q.remove(tag)
        del self.dirty[tag]
        del self.freq[tag]


def simulate(policy: str, sets: int, ways: int, unit_pages: int, ops) -> Counts:
    """Run ``ops`` (tuples ``(op, lba, npages)``, pages) through the cache; returns the counts."""
    cache = [RefSet(policy, ways) for _ in range(sets)]
    c = Counts()
    k = unit_pages
    for o, x0, n in ops:
        if o == TRIM:
            first = -(-x0 // k)
            for u in range(first, (x0 + n) // k):
                s = cache[u % sets]
                if u in s:
                    s.drop(u)
            continue
        all_hit = True
        u0 = x0 // k
        for u in range(u0, (x0 + n - 1) // k + 1):
            s = cache[u % sets]
            if u in s:
                s.hit(u)
                if o == WRITE:
                    s.dirty[u] = True
                    c.write_hits += 1
                else:
                    c.read_hits += 1
                continue
            all_hit = False
            if len(s) == ways:
                v = s.evict(lambda tag: u0 <= tag < u)  # the units this op touched so far are pinned
                if s.dirty.pop(v):
                    c.writebacks += 1
                    c.writeback_units.append(v)
                del s.freq[v]
            whole = x0 <= u * k and x0 + n >= (u + 1) * k
            if o == READ or not whole:
                c.fills += 1
            c.ghost_admissions += s.insert(u, o == WRITE)
            if o == WRITE:
                c.write_misses += 1
            else:
                c.read_misses += 1
        if o == READ and all_hit:
            c.read_ops_all_hit += 1
    return c
