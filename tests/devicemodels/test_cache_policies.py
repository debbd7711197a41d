"""The CXL-SSD cache kernel against an independent plain-Python cache (tests/cache_reference.py), per policy."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devicemodels import CACHE_POLICIES, DEVICES
from devicemodels.base import OP_READ, OP_TRIM, OP_WRITE, op_batch

from tests.support import cache_reference as ref

PAGE = 4096
POLICIES = ("lru", "fifo", "clock", "s3fifo")


def test_the_registry_holds_the_four_policies_with_distinct_codes():
    assert CACHE_POLICIES.names() == sorted(POLICIES)
    assert len({CACHE_POLICIES.get(n).code for n in POLICIES}) == 4
    s3 = CACHE_POLICIES.get("s3fifo")
    assert [(s3.small_ways(w), s3.ghost_ways(w)) for w in (1, 4, 8, 15, 16)] == [(1, 0), (1, 3), (1, 7), (2, 13),
                                                                                 (2, 14)]
    assert ref.READ == OP_READ and ref.WRITE == OP_WRITE and ref.TRIM == OP_TRIM


def _device(policy, sets, ways, unit_pages, logical_pages):
    return DEVICES.get("cxl-ssd").from_params([
        f"logical_bytes={logical_pages * PAGE}", "pages_per_block=16", "channels=2", "dies_per_channel=2",
        "op_ratio=0.5", f"cache_bytes={sets * ways * unit_pages * PAGE}", f"cache_ways={ways}",
        f"cache_unit_bytes={unit_pages * PAGE}", f"cache_policy={policy}"])


def _run_both(policy, sets, ways, unit_pages, logical_pages, rows):
    dev = _device(policy, sets, ways, unit_pages, logical_pages)
    o, x, n = (np.array(c) for c in zip(*rows))
    dev.submit(op_batch(o, x, n, arrival_ns=np.arange(len(rows), dtype=np.int64) * 10_000))
    got = dev.counters()
    want = ref.simulate(policy, sets, ways, unit_pages, rows)
    cache = dev.stats()["cache"]
    assert (got["cache_read_hits"], got["cache_read_misses"], got["cache_write_hits"], got["cache_write_misses"],
            got["cache_fills"], got["cache_writebacks"], cache["read_hit_latency"]["ios"]) == \
        (want.read_hits, want.read_misses, want.write_hits, want.write_misses, want.fills, want.writebacks,
         want.read_ops_all_hit)
    # the write-backs reached the flash: one whole unit each
    assert got["flash_pages_written"] == want.writebacks * unit_pages
    reads = sum(1 for r in rows if r[0] == OP_READ)
    assert cache["read_hit_latency"]["ios"] + cache["read_miss_latency"]["ios"] == reads
    return want


def _random_rows(rng, n_ops, span, max_pages, unit_pages, hot=0.3):
    rows = []
    for _ in range(n_ops):
        o = rng.choice([OP_READ, OP_WRITE, OP_TRIM], p=[0.55, 0.4, 0.05])
        npg = int(rng.integers(1, max_pages + 1))
        # a skewed address: a hot tenth of the span takes `hot` of the accesses, so sets see reuse
        lim = span // 10 if rng.random() < hot else span
        x = int(rng.integers(0, max(1, lim - npg + 1)))
        rows.append((int(o), x, npg))
    return rows


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("sets, ways, unit_pages", [(4, 8, 1), (3, 4, 2), (2, 16, 4), (5, 1, 1)])
def test_kernel_matches_the_reference_on_random_sequences(policy, sets, ways, unit_pages):
    logical = 1024
    for seed in range(3):
        rng = np.random.default_rng(seed)
        rows = _random_rows(rng, 4000, sets * ways * unit_pages * 4, 3 * unit_pages, unit_pages)
        want = _run_both(policy, sets, ways, unit_pages, logical, rows)
        # the sequences exercise hits, evictions and dirty write-backs (else the comparison proves little)
        assert want.read_hits > 100 and want.write_hits > 50 and want.writebacks > 100
        if policy == "s3fifo" and ways > 1:
            assert want.ghost_admissions > 20


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_kernel_matches_the_reference_on_generated_sequences(policy, data):
    sets = data.draw(st.integers(1, 4), label="sets")
    ways = data.draw(st.sampled_from([1, 2, 3, 8, 10]), label="ways")
    unit_pages = data.draw(st.sampled_from([1, 2, 4]), label="unit_pages")
    span = sets * ways * unit_pages * 3
    rows = data.draw(st.lists(st.tuples(st.sampled_from([OP_READ, OP_READ, OP_WRITE, OP_TRIM]),
                                        st.integers(0, span - 1), st.integers(1, 2 * unit_pages + 1)),
                              min_size=1, max_size=300), label="ops")
    _run_both(policy, sets, ways, unit_pages, 1024, rows)


def test_policies_differ_on_the_same_sequence():
    """The dispatch really runs four policies: one scan-plus-reuse sequence, four outcomes."""
    rng = np.random.default_rng(7)
    rows = _random_rows(rng, 6000, 256, 1, 1, hot=0.6)
    hits = {p: ref.simulate(p, 4, 8, 1, rows).read_hits for p in POLICIES}
    assert len(set(hits.values())) == 4, hits
    for p in POLICIES:
        assert _run_both(p, 4, 8, 1, 1024, rows).read_hits == hits[p]


def test_a_hand_computed_lru_fifo_and_clock_set():
    """One set of 2 ways: reads of units 0, 1, 0, 2, 1 (unit = page)."""
    rows = [(OP_READ, u, 1) for u in (0, 1, 0, 2, 1)]
    # lru: 0m 1m 0h 2m(evicts 1) 1m -> 1 hit; fifo: 0m 1m 0h 2m(evicts 0) 1h -> 2 hits;
    # clock: 0m 1m 0h(ref) 2m(0 reinserted, evicts 1) 1m -> 1 hit
    for policy, hits in (("lru", 1), ("fifo", 2), ("clock", 1)):
        dev = _device(policy, 1, 2, 1, 1024)
        o, x, n = (np.array(c) for c in zip(*rows))
        dev.submit(op_batch(o, x, n))
        assert dev.counters()["cache_read_hits"] == hits, policy
        assert ref.simulate(policy, 1, 2, 1, rows).read_hits == hits


def test_an_op_does_not_evict_its_own_units():
    """One set of 3 ways (FIFO), unit = page: reads of 0, 5, 6, then one read of pages 0-1, then 0. The
    2-page op hits unit 0 and misses unit 1: a plain FIFO evicts 0 (the oldest) from under the op; pinned,
    0 stands where it is and 5 goes, so the last read hits: 2 hits, the last read op wholly a hit."""
    rows = [(OP_READ, 0, 1), (OP_READ, 5, 1), (OP_READ, 6, 1), (OP_READ, 0, 2), (OP_READ, 0, 1)]
    want = _run_both("fifo", 1, 3, 1, 1024, rows)
    assert (want.read_hits, want.read_ops_all_hit) == (2, 1)
    # when every unit of the set is the op's own, one of them goes anyway: one set of 2 ways, a 3-page read
    rows = [(OP_READ, 0, 1), (OP_READ, 1, 1), (OP_READ, 0, 3), (OP_READ, 1, 1)]
    want = _run_both("fifo", 1, 2, 1, 1024, rows)
    # 0h 1h 2m (both ways pinned: FIFO evicts 0), then 1 hits
    assert (want.read_hits, want.read_misses) == (3, 3)
