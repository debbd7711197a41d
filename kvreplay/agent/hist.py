"""Log-linear latency histograms (8 sub-buckets per power of two, <= 12.5 % wide).

The agent keeps one per op type for everything it ever ran, so the host can
collect guest-side latency distributions even for ops whose per-op records it
did not keep. Stdlib only; the host reuses ``bucket_bounds`` to turn counts
into percentiles.
"""

from __future__ import annotations

SUB_BITS = 3
SUB = 1 << SUB_BITS
LINEAR = 2 * SUB  # values below this get one bucket each


def bucket_index(v: int) -> int:
    if v < LINEAR:
        return max(v, 0)
    e = v.bit_length() - 1
    return LINEAR + (e - SUB_BITS - 1) * SUB + ((v >> (e - SUB_BITS)) & (SUB - 1))


def bucket_bounds(idx: int) -> tuple[int, int]:
    """[lower, upper) of bucket ``idx`` in the histogram's unit (ns)."""
    if idx < LINEAR:
        return idx, idx + 1
    e, sub = divmod(idx - LINEAR, SUB)
    e += SUB_BITS + 1
    return (SUB + sub) << (e - SUB_BITS), (SUB + sub + 1) << (e - SUB_BITS)


class Histogram:
    __slots__ = ("counts", "n", "total", "min", "max")

    def __init__(self):
        self.counts: dict[int, int] = {}
        self.n = 0
        self.total = 0
        self.min = None
        self.max = 0

    def add(self, v: int) -> None:
        i = bucket_index(v)
        self.counts[i] = self.counts.get(i, 0) + 1
        self.n += 1
        self.total += v
        if self.min is None or v < self.min:
            self.min = v
        if v > self.max:
            self.max = v

    def to_dict(self) -> dict:
        return {"n": self.n, "sum_ns": self.total, "min_ns": self.min or 0, "max_ns": self.max,
                "buckets": sorted(self.counts.items())}


def percentiles(buckets: list, pcts: list[float]) -> dict[str, int]:
    """Percentiles (bucket midpoints) from ``[[idx, count], ...]``."""
    total = sum(c for _, c in buckets)
    out = {}
    if not total:
        return {f"{p:g}": 0 for p in pcts}
    order = sorted(buckets)
    for p in pcts:
        rank = max(1, -(-p * total // 100))  # ceil(p% of total), at least the first sample
        acc = 0
        for idx, c in order:
            acc += c
            if acc >= rank:
                lo, hi = bucket_bounds(idx)
                out[f"{p:g}"] = (lo + hi - 1) // 2
                break
    return out
