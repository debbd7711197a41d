"""kvreplay.belady held against libCacheSim's ``Belady`` (PyPI ``libcachesim``): libCacheSim computes the next
accesses itself (its oracleGeneral converter, from a plain-text trace of the keys) and runs its own Belady over
them; both count hits of a demand cache of unit objects. Plus sequences counted by hand."""

from __future__ import annotations

import numpy as np
import pytest

import libcachesim as lcs

from kvreplay.belady import belady, next_use, slots_for


def libcachesim_belady_hits(keys, slots: int, tmp_path) -> int:
    keys = [int(k) + 1 for k in keys]  # libCacheSim keys from 1
    # the oracleGeneral converter sometimes drops a trace's last request (short traces): a sentinel of a new key
    # goes last; kept or not, it is a miss that changes no other access's outcome
    txt, out = tmp_path / "keys.txt", tmp_path / "keys.oracleGeneral.bin"
    txt.write_text("\n".join(map(str, [*keys, max(keys) + 1])) + "\n")
    lcs.Util.convert_to_oracleGeneral(lcs.TraceReader(str(txt), lcs.TraceType.PLAIN_TXT_TRACE)._reader, str(out))
    rec = np.fromfile(out, np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")]))
    assert rec["id"][: len(keys)].tolist() == keys and len(rec) in (len(keys), len(keys) + 1)
    miss_ratio, _ = lcs.Belady(slots).process_trace(lcs.TraceReader(str(out), lcs.TraceType.ORACLE_GENERAL_TRACE))
    return len(rec) - round(miss_ratio * len(rec))


def test_next_use():
    assert next_use(np.array([5, 7, 5, 5, 9])).tolist() == [2, 6, 3, 8, 9]


@pytest.mark.parametrize("keys,slots,hits", [
    # the textbook string: 3 frames, 7 faults of 12 (Belady's MIN)
    ([1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5], 3, 5),
    ([1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5], 4, 6),
    # 1 slot: 2 is admitted (demand cache) and evicts 1, which then misses
    ([1, 2, 1], 1, 0),
    # 2 slots, cyclic over 3 keys: LRU hits nothing; MIN keeps 1 (next use soonest) and hits every other time
    ([1, 2, 3] * 4, 2, 5),
    ([4, 4, 4], 1, 2),
    ([1, 2, 3], 0, 0),
    ([], 3, 0),
])
def test_hand_counted(keys, slots, hits, tmp_path):
    assert belady(np.array(keys, np.int64), slots).hits == hits
    if keys and slots > 0:
        assert libcachesim_belady_hits(keys, slots, tmp_path) == hits


def test_cyclic_by_hand():
    """[1, 2, 3] x 4 with 2 slots, by hand (cache as key(next use)): 1 m {1(3)}, 2 m {1(3) 2(4)}, 3 m evicts 2
    {1(3) 3(5)}, 1 h {1(6) 3(5)}, 2 m evicts 1 {3(5) 2(7)}, 3 h {3(8) 2(7)}, 1 m evicts 3 {2(7) 1(9)}, 2 h, 3 m evicts
    2 {1(9) 3(11)}, 1 h, 2 m evicts 1 (never used again), 3 h: 5 hits; unbounded: 12 - 3 first accesses = 9."""
    r = belady(np.array([1, 2, 3] * 4), 2)
    assert (r.accesses, r.hits, r.unbounded_hits) == (12, 5, 9)
    assert r.hit_ratio == pytest.approx(5 / 12) and r.unbounded_hit_ratio == pytest.approx(9 / 12)


def _sequences():
    rng = np.random.default_rng(21)
    yield "uniform", rng.integers(0, 300, 6000), (1, 10, 50, 150, 299, 400)
    yield "zipf", rng.zipf(1.2, 8000) % 2000, (1, 16, 128, 1024)
    # adversarial: a cycle one longer than the cache (LRU's worst case), scans mixed into a hot set, all distinct
    yield "cycle", np.tile(np.arange(101), 40), (100, 50, 1)
    hot = rng.integers(0, 20, 5000)
    scan = np.arange(1000, 1000 + 5000)
    mixed = np.where(rng.random(5000) < 0.5, hot, scan)
    yield "hot+scan", mixed, (5, 19, 20, 21)
    yield "distinct", np.arange(3000), (10,)
    yield "one key", np.zeros(500, np.int64), (1, 3)
    # many keys never reused at the end: their positions past n decide evictions
    yield "tail", np.r_[rng.integers(0, 50, 3000), np.arange(100, 2100)], (7, 49)


@pytest.mark.parametrize("name,keys,caps", list(_sequences()), ids=lambda x: x if isinstance(x, str) else "")
def test_same_hits_as_libcachesim(name, keys, caps, tmp_path):
    for slots in caps:
        ours = belady(keys, slots)
        assert ours.hits == libcachesim_belady_hits(keys, slots, tmp_path), (name, slots)
        assert ours.hits <= ours.unbounded_hits


def test_heap_compaction_keeps_the_answer(tmp_path):
    """A long sequence with few slots makes the kernel compact its heap many times (scratch of 1024 entries)."""
    keys = np.random.default_rng(3).integers(0, 40, 30000)
    assert belady(keys, 8).hits == libcachesim_belady_hits(keys, 8, tmp_path)


def test_slots_for():
    assert slots_for(100, np.array([10, 10])) == (10, "exact")
    slots, how = slots_for(100, np.array([30, 10, 30]))
    assert slots == 3 and how.startswith("upper size estimate: 1 of 3 accesses")
