"""The object-id hash map every kernel relies on, checked against a Python dict."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreplay.layout.objtable import ObjTable

KEYS = st.one_of(st.integers(1, 64), st.integers(0, 2**64 - 1))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), KEYS), min_size=1, max_size=400))
def test_matches_a_dict(ops):
    t = ObjTable({"x": (np.int64, 0)}, initial=4)
    ref: dict[int, int] = {}
    for insert, key in ops:
        if insert:
            s = t.insert(key)
            assert ref.setdefault(key, s) == s  # an existing key keeps its slot
        else:
            assert t.remove(key) == ref.pop(key, -1)
    assert t.count == len(ref)
    for key, slot in ref.items():
        assert t.find(key) == slot
    # live slots are distinct and below the high-water mark (freed slots are reused, never duplicated)
    assert len(set(ref.values())) == len(ref)
    assert all(0 <= s < t.high for s in ref.values())
    assert t.find(2**64 - 2) == ref.get(2**64 - 2, -1)


def test_slots_are_reused_so_memory_follows_live_objects():
    t = ObjTable({"x": (np.int64, 0)}, initial=4)
    for round_ in range(50):  # 50 generations of 100 objects, never more than 100 alive
        for k in range(100):
            t.insert(round_ * 1000 + k + 1)
        for k in range(100):
            t.remove(round_ * 1000 + k + 1)
    assert t.count == 0
    assert t.high == 100  # 5000 objects seen, 100 slots ever used
    assert len(t.kv) <= 512  # load factor <= 1/2 of the live peak, rounded to a power of two


def test_grow_keeps_every_key():
    t = ObjTable({"x": (np.int64, 0)}, initial=4)
    keys = np.random.default_rng(3).integers(1, 2**63, 5000, dtype=np.int64)
    slots = [t.insert(int(k)) for k in keys]
    assert len(t.kv) >= 2 * len(set(keys.tolist()))
    assert [t.find(int(k)) for k in keys] == slots
