"""The log-linear latency histogram: bucket maths, fio-shaped output, exact merging."""

import numpy as np
import pytest
from numba import njit

from devicemodels.histogram import (EXACT, FIO_PERCENTILES, NBUCKETS, NSLOTS, LatencyHistogram, bucket_index,
                                    bucket_low, bucket_width, hist_record, new_rows)


def test_small_values_are_exact_and_buckets_tile_the_range():
    for v in range(EXACT):
        assert bucket_index(v) == v
    # consecutive buckets are contiguous: each starts where the previous ended
    for i in range(1, NBUCKETS):
        assert bucket_low(i) == bucket_low(i - 1) + bucket_width(i - 1)
    assert bucket_index(2**63 - 1) == NBUCKETS - 1


def test_bucket_relative_width_is_at_most_one_64th():
    rng = np.random.default_rng(0)
    for v in rng.integers(EXACT, 2**62, 2000):
        i = bucket_index(int(v))
        lo, w = bucket_low(i), bucket_width(i)
        assert lo <= v < lo + w
        assert w / lo <= 1 / 64


def test_percentiles_match_numpy_within_bucket_error():
    rng = np.random.default_rng(1)
    v = rng.lognormal(12, 1.5, 200_000).astype(np.int64)
    h = LatencyHistogram.from_values(v)
    for p in FIO_PERCENTILES:
        exact = np.percentile(v, p, method="inverted_cdf")
        assert abs(h.value_at(p) - exact) <= exact / 64 + 1, p
    assert h.min == v.min() and h.max == v.max() and h.n == v.size
    assert h.mean == pytest.approx(v.mean(), rel=1e-12)
    assert h.stddev == pytest.approx(v.std(ddof=1), rel=1e-9)


def test_merge_is_exact():
    rng = np.random.default_rng(2)
    a = rng.integers(0, 10**9, 5000)
    b = rng.integers(0, 10**6, 7000)
    ha, hb = LatencyHistogram.from_values(a), LatencyHistogram.from_values(b)
    both = LatencyHistogram.from_values(np.concatenate([a, b]))
    merged = ha + hb
    assert np.array_equal(merged.h[:NBUCKETS], both.h[:NBUCKETS])
    assert (merged.n, merged.min, merged.max, merged.mean) == (both.n, both.min, both.max, both.mean)
    assert merged.stddev == pytest.approx(both.stddev, rel=1e-9)
    assert merged.percentiles() == both.percentiles()
    assert ha.n == 5000  # + does not modify its operands


def test_fio_shape():
    h = LatencyHistogram.from_values([1000, 2000, 3000, -5])
    d = h.to_dict()
    assert set(d) == {"min", "max", "mean", "stddev", "N", "percentile"}
    assert d["min"] == 0 and d["max"] == 3000 and d["N"] == 4  # negative recorded as 0
    assert list(d["percentile"]) == ["1.000000", "5.000000", "10.000000", "20.000000", "30.000000", "40.000000",
                                     "50.000000", "60.000000", "70.000000", "80.000000", "90.000000", "95.000000",
                                     "99.000000", "99.500000", "99.900000", "99.950000", "99.990000"]
    assert abs(d["percentile"]["99.990000"] - 3000) <= 3000 / 64  # the bucket midpoint, as fio reports
    one = LatencyHistogram.from_values([3000]).to_dict()
    assert set(one["percentile"].values()) == {3000}  # midpoints are clamped to [min, max]
    assert LatencyHistogram().to_dict() == {"min": 0, "max": 0, "mean": 0.0, "stddev": 0.0, "N": 0}


def test_kernels_record_into_rows():
    @njit
    def record_all(h, vals):
        for i in range(vals.size):
            hist_record(h[i % 2], vals[i])

    rows = new_rows(2)
    assert rows.shape == (2, NSLOTS)
    record_all(rows, np.arange(10, dtype=np.int64) * 1000)
    assert LatencyHistogram(rows[0]).n == 5 and LatencyHistogram(rows[1]).max == 9000
    with pytest.raises(ValueError):
        LatencyHistogram(np.zeros(10, np.int64))


def test_percentile_is_fios_bucket_value_low_plus_half_width():
    # fio's plat_idx_to_val: base + (k + 0.5) * 2**error_bits, i.e. low + width/2 of the bucket.
    # 200 and 201 share the bucket [200, 202) (width 2): fio reports 201 for every percentile.
    h = LatencyHistogram.from_values([200, 201, 200, 201])
    assert set(h.percentiles().values()) == {201}
    # a 4-wide bucket [256, 260): low + 2
    assert LatencyHistogram.from_values([256, 259]).value_at(50) == 258
