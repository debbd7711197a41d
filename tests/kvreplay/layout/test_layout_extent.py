"""Extent allocator (conv/FDP): hand-checked placements, eviction order, and the op stream's invariants."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devicemodels.base import OP_READ, OP_TRIM, OP_WRITE
from kvreplay.layout import ExtentLayout, OpBuffer
from tests.support.replay_fixtures import layout_ops as run
from kvreplay.layout.actions import A_DROP, A_FREE, A_READ, A_WRITE
from kvreplay.layout.common import SRC_EVICT, SRC_USER


# The case below is checked by hand: 100 units, three 30-unit objects fill 0..89;
# object 1 is read (LRU: now most recent); object 2 freed (30..59 free);
# object 4 (20 units) is allocated next-fit from the cursor: 90..99 then, wrapping, 30..39;
# object 5 (30 units) needs 30 but only 20 are free: the least recently used object (3, at 60..89)
# is evicted, and next-fit from word 0 gives 40..69 in one extent.
HAND = [(1, A_WRITE, 30, 0), (2, A_WRITE, 30, 1), (3, A_WRITE, 30, 2), (1, A_READ), (2, A_FREE),
        (4, A_WRITE, 20, 3), (5, A_WRITE, 30, 0)]


def test_hand_case_lru():
    lay = ExtentLayout(100, evict_policy="lru")
    ops = run(lay, HAND)
    assert ops == [
        (OP_WRITE, 0, 30, 0, 0, SRC_USER),
        (OP_WRITE, 30, 30, 1, 1, SRC_USER),
        (OP_WRITE, 60, 30, 2, 2, SRC_USER),
        (OP_READ, 0, 30, 0, 3, SRC_USER),
        (OP_TRIM, 30, 30, 0, 4, SRC_USER),
        (OP_WRITE, 90, 10, 3, 5, SRC_USER),
        (OP_WRITE, 30, 10, 3, 5, SRC_USER),
        (OP_TRIM, 60, 30, 0, 6, SRC_EVICT),  # forced eviction of object 3 (LRU)
        (OP_WRITE, 40, 30, 0, 6, SRC_USER),
    ]
    assert lay.extents_of(4) == [(90, 10), (30, 10)]
    c = lay.counters()
    assert (c["forced_evictions"], c["forced_evicted_pages"], c["objects_written"], c["pages_written"]) == (1, 30, 5, 140)
    assert lay.free_pages == 100 - 30 - 20 - 30


def test_fifo_evicts_in_write_order_despite_reads():
    lay = ExtentLayout(100, evict_policy="fifo")
    ops = run(lay, HAND)
    evicted = [o for o in ops if o[5] == SRC_EVICT]
    assert evicted == [(OP_TRIM, 0, 30, 0, 6, SRC_EVICT)]  # object 1 was written first; its read does not count
    assert lay.extents_of(1) == [] and lay.extents_of(3) == [(60, 30)]


def test_rewrite_in_place_and_resize():
    lay = ExtentLayout(64)
    ops = run(lay, [(7, A_WRITE, 8, 1), (7, A_WRITE, 8, 2), (7, A_WRITE, 4, 3)])
    assert ops == [
        (OP_WRITE, 0, 8, 1, 0, SRC_USER),
        (OP_WRITE, 0, 8, 2, 1, SRC_USER),  # same size: overwrite in place with the new placement id
        (OP_TRIM, 0, 8, 0, 2, SRC_USER),  # new size: free, then allocate (the cursor's word is reused first)
        (OP_WRITE, 0, 4, 3, 2, SRC_USER),
    ]
    assert lay.counters()["objects_rewritten"] == 2


def test_misses_are_counted_not_fatal():
    lay = ExtentLayout(16)
    ops = run(lay, [(1, A_READ), (1, A_FREE), (2, A_DROP), (3, A_WRITE, 2), (3, A_DROP)])
    assert ops == [(OP_WRITE, 0, 2, 0, 3, SRC_USER), (OP_TRIM, 0, 2, 0, 4, SRC_USER)]
    c = lay.counters()
    assert (c["read_misses"], c["free_misses"]) == (1, 1)  # a DROP (delete elsewhere) of a stranger is no miss


def test_object_larger_than_the_namespace_is_refused():
    lay = ExtentLayout(16)
    buf = OpBuffer(1024)
    one = lambda a: np.array([a])  # noqa: E731
    nxt, n, status = lay.run(one(1).astype(np.uint64), one(A_WRITE).astype(np.int8), one(17).astype(np.int32),
                             np.zeros(1, np.int16), np.zeros(1, np.int16), 0, 1, buf.ob, lay.op_bound(17))
    assert (nxt, n, status) == (0, 0, 2)  # S_TOO_BIG at event 0, nothing emitted


EVENTS = st.lists(
    st.tuples(st.integers(1, 12), st.sampled_from([A_WRITE, A_WRITE, A_READ, A_FREE]), st.integers(1, 9),
              st.integers(0, 3)),
    min_size=1, max_size=120)


@settings(max_examples=80, deadline=None)
@given(EVENTS, st.integers(20, 70), st.sampled_from(["lru", "fifo"]), st.booleans())
def test_op_stream_is_consistent(events, total, policy, in_place):
    """Replaying the emitted ops on a unit-owner map never writes a unit someone owns, never trims or
    reads a unit the object does not own, and ends with exactly the layout's resident objects."""
    lay = ExtentLayout(total, evict_policy=policy, rewrite_in_place=in_place)
    ops = run(lay, events, max_pages=9)
    owner = np.zeros(total, np.int64)  # 0 = free, else object id
    obj_of_event = [e[0] for e in events]
    for op, lba, n, pid, ev, src in ops:
        assert 0 <= lba and lba + n <= total and n >= 1
        units = owner[lba:lba + n]
        me = obj_of_event[ev]
        if op == OP_WRITE:
            assert ((units == 0) | (units == me)).all()
            owner[lba:lba + n] = me
            assert pid == events[ev][3]
        elif op == OP_TRIM:
            victim = units[0]
            assert victim != 0 and (units == victim).all()
            assert victim == me or src == SRC_EVICT
            owner[lba:lba + n] = 0
        else:
            assert (units == me).all()
    resident = {k: n for k, n in ((o, len(lay.extents_of(o))) for o in range(1, 13)) if n}
    for o in range(1, 13):
        ext = lay.extents_of(o)
        units = sum(n for _, n in ext)
        assert units == int((owner == o).sum())
        for lba, n in ext:
            assert (owner[lba:lba + n] == o).all()
    assert lay.resident_objects == len(resident)
    assert lay.free_pages == int((owner == 0).sum())
    assert int(np.unpackbits(lay.bitmap.view(np.uint8)).sum()) == total - lay.free_pages + (len(lay.bitmap) * 64 - total)
