"""Log-linear latency histogram (HDR/fio style) that numba kernels record into.

Why this layout: kernels must record one latency per op without allocating or
calling Python, and results from many batches, RUHs or runs must merge exactly.
So a histogram is a flat ``int64`` array of ``NSLOTS`` slots:

* slots ``[0, NBUCKETS)`` are bucket counts. Values below 128 ns get one bucket
  each; every power-of-two range above that is split into 64 equal buckets (as
  fio's ``FIO_IO_U_PLAT_BITS = 6``), so a bucket is at most 1/64 of its value
  wide and a reported percentile (the bucket midpoint, as fio reports it) is
  within 0.8 % of the true sample.
* ``SLOT_MIN``, ``SLOT_MAX``, ``SLOT_SUM``, ``SLOT_N`` hold the exact minimum,
  maximum, sum and count, so ``min``/``max``/``mean``/``N`` are exact;
  ``SLOT_SUMSQ`` holds the float64 sum of squares (bit-cast into the int64
  slot) for ``stddev``.

Kernels call :func:`hist_record` on a row of a 2-D ``(k, NSLOTS)`` array (one
row per op type, RUH, ...); Python wraps a row in :class:`LatencyHistogram`.
Negative values are recorded as 0. Values up to 2**63-1 fit.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np
from devicemodels.jit import njit

SUB_BITS = 6  # 64 linear sub-buckets per power of two
SUB = 1 << SUB_BITS  # 64
EXACT = SUB << 1  # values < 128 get their own bucket
# highest value 2**63-1 has bit length 63 -> shift 56 -> last index 128 + 55*64 + 63
NBUCKETS = EXACT + (63 - SUB_BITS - 1) * SUB
SLOT_MIN = NBUCKETS
SLOT_MAX = NBUCKETS + 1
SLOT_SUM = NBUCKETS + 2
SLOT_N = NBUCKETS + 3
SLOT_SUMSQ = NBUCKETS + 4  # float64 bits
NSLOTS = NBUCKETS + 5
_I64_MAX = np.iinfo(np.int64).max

#: fio's default completion-latency percentile list
FIO_PERCENTILES = (1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0,
                   99.5, 99.9, 99.95, 99.99)


@njit(inline="always")
def _bit_length(v):
    n = 0
    if v >= (1 << 32):
        v >>= 32
        n += 32
    if v >= (1 << 16):
        v >>= 16
        n += 16
    if v >= (1 << 8):
        v >>= 8
        n += 8
    if v >= (1 << 4):
        v >>= 4
        n += 4
    if v >= (1 << 2):
        v >>= 2
        n += 2
    if v >= (1 << 1):
        v >>= 1
        n += 1
    return n + v


@njit(inline="always")
def bucket_index(v):
    """Bucket of a non-negative int64 value."""
    if v < EXACT:
        return v
    shift = _bit_length(v) - SUB_BITS - 1  # >= 1
    return EXACT + (shift - 1) * SUB + ((v >> shift) - SUB)


@njit
def bucket_low(i):
    """Smallest value that falls in bucket ``i``."""
    if i < EXACT:
        return i
    shift = (i - EXACT) // SUB + 1
    return (SUB + (i - EXACT) % SUB) << shift


@njit
def bucket_width(i):
    if i < EXACT:
        return 1
    return 1 << ((i - EXACT) // SUB + 1)


@njit(inline="always")
def hist_record(h, v):
    """Record value ``v`` (ns) into the flat histogram row ``h``."""
    if v < 0:
        v = 0
    h[bucket_index(v)] += 1
    if v < h[SLOT_MIN]:
        h[SLOT_MIN] = v
    if v > h[SLOT_MAX]:
        h[SLOT_MAX] = v
    h[SLOT_SUM] += v
    h[SLOT_N] += 1
    sq = h[SLOT_SUMSQ:SLOT_SUMSQ + 1].view(np.float64)
    sq[0] += float(v) * float(v)


@njit
def hist_record_many(h, values):
    for i in range(values.shape[0]):
        hist_record(h, values[i])


def new_rows(k: int) -> np.ndarray:
    """``k`` empty histogram rows, shape ``(k, NSLOTS)``."""
    h = np.zeros((k, NSLOTS), np.int64)
    h[:, SLOT_MIN] = _I64_MAX
    return h


def clear_rows(h: np.ndarray) -> None:
    h[...] = 0
    h[..., SLOT_MIN] = _I64_MAX


def merge_rows(dst: np.ndarray, src: np.ndarray) -> None:
    """Merge histogram row ``src`` into ``dst`` in place (exact)."""
    mn = min(dst[SLOT_MIN], src[SLOT_MIN])
    mx = max(dst[SLOT_MAX], src[SLOT_MAX])
    dst[:NBUCKETS] += src[:NBUCKETS]
    dst[SLOT_SUM] += src[SLOT_SUM]
    dst[SLOT_N] += src[SLOT_N]
    dst[SLOT_SUMSQ:SLOT_SUMSQ + 1].view(np.float64)[0] += src[SLOT_SUMSQ:SLOT_SUMSQ + 1].view(np.float64)[0]
    dst[SLOT_MIN] = mn
    dst[SLOT_MAX] = mx


def percentile_key(p: float) -> str:
    """fio's JSON key for a percentile: ``"99.900000"``."""
    return f"{p:f}"


def _bucket_bounds() -> tuple[np.ndarray, np.ndarray]:
    """Lowest value and width of every bucket (numpy mirror of bucket_low/bucket_width)."""
    i = np.arange(NBUCKETS, dtype=np.int64)
    j = np.maximum(i - EXACT, 0)
    shift = j // SUB + 1
    low = np.where(i < EXACT, i, (SUB + j % SUB).astype(np.float64) * 2.0 ** shift)
    width = np.where(i < EXACT, 1.0, 2.0 ** shift)
    return low.astype(np.float64), width


_LOW, _WIDTH = _bucket_bounds()
# the value fio reports for a bucket (plat_idx_to_val): itself below EXACT, else low + width/2
_MID = np.where(_WIDTH > 1.0, _LOW + _WIDTH / 2.0, _LOW)


class LatencyHistogram:
    """A view on one flat histogram row (or a fresh one) with fio-shaped summaries."""

    __slots__ = ("h",)

    def __init__(self, row: np.ndarray | None = None):
        if row is None:
            row = new_rows(1)[0]
        if row.shape != (NSLOTS,) or row.dtype != np.int64:
            raise ValueError(f"histogram row must be int64[{NSLOTS}], got {row.dtype}{row.shape}")
        self.h = row

    @classmethod
    def from_values(cls, values: Iterable[int] | np.ndarray) -> "LatencyHistogram":
        out = cls()
        out.record(values)
        return out

    def record(self, values: Iterable[int] | np.ndarray | int) -> None:
        arr = np.ascontiguousarray(np.atleast_1d(np.asarray(values)), dtype=np.int64)
        hist_record_many(self.h, arr)

    def copy(self) -> "LatencyHistogram":
        return LatencyHistogram(self.h.copy())

    def merge(self, other: "LatencyHistogram") -> "LatencyHistogram":
        """Merge ``other`` into this histogram in place; returns self."""
        merge_rows(self.h, other.h)
        return self

    def __add__(self, other: "LatencyHistogram") -> "LatencyHistogram":
        return self.copy().merge(other)

    def clear(self) -> None:
        clear_rows(self.h)

    @property
    def n(self) -> int:
        return int(self.h[SLOT_N])

    @property
    def min(self) -> int:
        return int(self.h[SLOT_MIN]) if self.n else 0

    @property
    def max(self) -> int:
        return int(self.h[SLOT_MAX]) if self.n else 0

    @property
    def mean(self) -> float:
        return float(self.h[SLOT_SUM]) / self.n if self.n else 0.0

    @property
    def stddev(self) -> float:
        """Sample standard deviation (n - 1 denominator, as fio)."""
        n = self.n
        if n < 2:
            return 0.0
        sumsq = float(self.h[SLOT_SUMSQ:SLOT_SUMSQ + 1].view(np.float64)[0])
        s = float(self.h[SLOT_SUM])
        var = (sumsq - s * s / n) / (n - 1)
        return math.sqrt(var) if var > 0 else 0.0

    def value_at(self, p: float) -> int:
        """Value at percentile ``p`` (0-100) the way fio computes it: the midpoint of the
        first bucket whose cumulative count reaches ``p/100 * N``, clamped to [min, max]."""
        return self.values_at((p,))[0]

    def values_at(self, plist: Sequence[float]) -> list[int]:
        """:meth:`value_at` of every percentile in ``plist``, from one cumulative sum of the buckets (a
        replay asks for three per series per time window, a job for fio's 17)."""
        n = self.n
        if n == 0:
            return [0] * len(plist)
        cum = np.cumsum(self.h[:NBUCKETS])
        target = np.maximum(np.asarray(plist, np.float64) / 100.0 * n, 1.0)
        idx = np.minimum(np.searchsorted(cum, target - 1e-9, side="left"), NBUCKETS - 1)
        lo, hi = self.min, self.max
        return [min(max(int(round(v)), lo), hi) for v in _MID[idx].tolist()]

    def percentiles(self, plist: Sequence[float] = FIO_PERCENTILES) -> dict[str, int]:
        """``{"1.000000": ns, ..., "99.990000": ns}`` (fio's ``percentile`` object)."""
        return dict(zip(map(percentile_key, plist), self.values_at(plist)))

    def to_dict(self, plist: Sequence[float] = FIO_PERCENTILES) -> dict:
        """fio's ``lat_ns``/``clat_ns`` shape."""
        out = {"min": self.min, "max": self.max, "mean": self.mean, "stddev": self.stddev, "N": self.n}
        if self.n:
            out["percentile"] = self.percentiles(plist)
        return out

    @classmethod
    def merged(cls, hists: Iterable["LatencyHistogram"]) -> "LatencyHistogram":
        out = cls()
        for h in hists:
            out.merge(h)
        return out

    def __repr__(self) -> str:
        return f"LatencyHistogram(N={self.n}, min={self.min}, mean={self.mean:.1f}, max={self.max})"
