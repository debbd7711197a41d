"""Layout kernel state (kvreplay.layout.state): what the constructors hand the kernels, and runs that show
the kernels use it as documented (zones freed and reused in ring order, the bitmap's tail and cursor)."""

from __future__ import annotations

import numpy as np

from devicemodels.base import OP_TRIM, OP_WRITE, OP_ZONE_RESET
from kvreplay.layout import ExtentLayout, OpBuffer, ZoneLayout
from kvreplay.layout.actions import A_FREE, A_WRITE
from kvreplay.layout.common import OC_WIDTH, S_DONE, SRC_USER, ST_FREE_PAGES, LayoutState
from kvreplay.layout.state import (
    ZS_RESETS, ZS_STATE, ZS_STREAM, ZS_VALID, ZS_WIDTH, ZS_WP, Z_EMPTY, Z_FULL, Z_OPEN, ExtentConfig, FreeMap,
    LayoutEvents, ObjectState, ZoneConfig, grow_ext_cls, new_free_map, new_zones,
)
from kvreplay.layout.zone import ST_Q_COUNT, ST_Q_HEAD
from tests.support.replay_fixtures import layout_ops as run

W = A_WRITE


def test_new_zones_are_empty_queued_and_unowned():
    z = new_zones(5, 3, 4, 10)
    assert z.zs.shape == (5, ZS_WIDTH) and z.zs.dtype == np.int64
    assert z.zs[:, ZS_STREAM].tolist() == [-1] * 5  # no stream holds a zone
    for col in (ZS_WP, ZS_VALID, ZS_STATE, ZS_RESETS):
        assert z.zs[:, col].tolist() == [0] * 5
    assert Z_EMPTY == 0  # the zeroed state column means "empty"
    assert z.zq.dtype == np.int64 and z.zq.tolist() == [0, 1, 2, 3, 4]  # reused in index order at first
    assert z.owner.dtype == np.int32 and z.owner.shape == (15,) and (z.owner == -1).all()  # 5 zones x 3 units
    assert z.sz.dtype == np.int64 and z.sz.tolist() == [-1, -1, -1, -1]
    assert z.ext_cls.dtype == np.int16 and z.ext_cls.tolist() == [0] * 10


def test_grow_ext_cls_keeps_the_classes_of_existing_extents():
    z = new_zones(2, 2, 2, 3)
    z.ext_cls[:] = [4, 5, 6]
    g = grow_ext_cls(z, 6)
    assert g.ext_cls.tolist() == [4, 5, 6, 0, 0, 0] and g.ext_cls.dtype == np.int16
    assert g.zs is z.zs and g.owner is z.owner  # only ext_cls is replaced
    assert grow_ext_cls(g, 4) is g  # big enough: unchanged


def test_new_free_map_marks_units_past_the_end_used():
    fm = new_free_map(100)  # 2 words; units 100..127 do not exist
    assert isinstance(fm, FreeMap) and fm.bitmap.dtype == np.uint64 and fm.bitmap.shape == (2,)
    assert int(fm.bitmap[0]) == 0
    assert int(fm.bitmap[1]) == ((1 << 28) - 1) << 36  # bits 36..63 of word 1 = units 100..127
    assert new_free_map(128).bitmap.tolist() == [0, 0]  # a whole number of words: no tail
    assert int(new_free_map(1).bitmap[0]) == (1 << 64) - 2  # only unit 0 free


def test_layout_state_arrays_are_the_live_arrays():
    ls = LayoutState()
    a = ls.arrays()
    assert isinstance(a, ObjectState)
    assert a.ex is ls.ex and a.exfree is ls.exfree and a.st is ls.st and a.lc is ls.lc
    assert a.kv is ls.objs.kv and a.oc is ls.objs.cols["oc"] and a.okey is ls.objs.cols["okey"]
    assert a.oc.dtype == np.int32 and a.oc.shape[1] == OC_WIDTH and a.okey.dtype == np.uint64
    assert a.ex.dtype == np.int64 and a.ex.shape == (4096, 3) and a.exfree.dtype == np.int32
    ls.reserve_extents(5000)  # a grow replaces the pool: a fresh tuple sees it, the old one does not
    assert ls.arrays().ex is ls.ex and len(ls.arrays().ex) == 8192 and len(a.ex) == 4096


def test_zone_layout_config_and_initial_ring():
    lay = ZoneLayout(6, 4, 3, 2, evict_policy="fifo", gc_free_zones=2, gc_per_class=True)
    assert lay.cfg == ZoneConfig(zone_pages=4, cap=3, n_user=2, per_class=True, gc_free=2, writable_pages=18,
                                 lru=False)
    assert lay.zones.sz.tolist() == [-1] * 4  # 2 user streams + 2 per-class GC streams
    assert lay.owner.shape == (18,)
    assert (int(lay.state.st[ST_Q_HEAD]), int(lay.state.st[ST_Q_COUNT])) == (0, 6)  # all 6 zones empty, queued


def test_extent_layout_config():
    lay = ExtentLayout(100, evict_policy="fifo", rewrite_in_place=False)
    assert lay.cfg == ExtentConfig(total_pages=100, lru=False, in_place=False)
    assert lay.bitmap is lay.free_map.bitmap and int(lay.state.st[ST_FREE_PAGES]) == 100


def test_zones_are_freed_and_reused_in_ring_order():
    # 4 zones of 4 units, one class + shared GC stream; every object fills a zone.
    # 1 -> zone 0, 2 -> zone 1; freeing 1 resets zone 0 (ring: 2, 3, 0); 3 -> zone 2;
    # freeing 2 resets zone 1 (ring: 3, 0, 1); 4 -> zone 3; 5 -> zone 0 again (reset first, reused first).
    lay = ZoneLayout(4, 4, 4, 1, gc_free_zones=2)
    ops = run(lay, [(1, W, 4, 0), (2, W, 4, 0), (1, A_FREE), (3, W, 4, 0), (2, A_FREE), (4, W, 4, 0),
                    (5, W, 4, 0)], max_pages=4)
    assert [(o[0], o[1], o[2], o[4]) for o in ops] == [
        (OP_WRITE, 0, 4, 0), (OP_WRITE, 4, 4, 1), (OP_ZONE_RESET, 0, 4, 2), (OP_WRITE, 8, 4, 3),
        (OP_ZONE_RESET, 4, 4, 4), (OP_WRITE, 12, 4, 5), (OP_WRITE, 0, 4, 6),
    ]
    assert all(o[5] == SRC_USER for o in ops)
    zs = lay.zs
    assert zs[:, ZS_STATE].tolist() == [Z_FULL, Z_EMPTY, Z_FULL, Z_FULL]
    assert zs[:, ZS_RESETS].tolist() == [1, 1, 0, 0]
    assert zs[:, ZS_VALID].tolist() == [4, 0, 4, 4] and zs[:, ZS_WP].tolist() == [4, 0, 4, 4]
    assert zs[:, ZS_STREAM].tolist() == [0, -1, 0, 0]
    # five pops, two pushes: the ring's head is at slot 1, which holds zone 1, the only empty zone
    assert (int(lay.state.st[ST_Q_HEAD]), int(lay.state.st[ST_Q_COUNT])) == (1, 1)
    assert int(lay.zones.zq[1]) == 1
    assert lay.owner.reshape(4, 4)[1].tolist() == [-1] * 4 and (lay.owner.reshape(4, 4)[[0, 2, 3]] >= 0).all()
    c = lay.counters()
    assert (c["zones_opened"], c["zone_resets"], c["gc_runs"], c["pages_written"]) == (5, 2, 0, 20)


def test_zone_layout_groups_by_class_extent_layout_tags_by_pid():
    # LayoutEvents carries both: zones follow ``cls``, extent write ops carry ``pid``
    obj = np.array([1, 2], np.uint64)
    act = np.array([W, W], np.int8)
    pages = np.array([2, 2], np.int32)
    pid = np.array([7, 7], np.int16)
    cls = np.array([1, 0], np.int16)
    buf = OpBuffer(1024)  # room for the zone layout's per-event bound (GC rounds included)
    zl = ZoneLayout(8, 4, 4, 2, gc_free_zones=2)
    nxt, n, status = zl.run(obj, act, pages, pid, cls, 0, 2, buf.ob, zl.op_bound(2))
    assert (nxt, n, status) == (2, 2, S_DONE)
    assert buf.columns(n)["lba"].tolist() == [0, 4]  # class 1 opened zone 0 first, class 0 zone 1
    assert zl.zones.sz.tolist() == [1, 0, -1] and zl.zs[:2, ZS_STATE].tolist() == [Z_OPEN, Z_OPEN]
    el = ExtentLayout(64)
    nxt, n, status = el.run(obj, act, pages, pid, cls, 0, 2, buf.ob, el.op_bound(2))
    cols = buf.columns(n)
    assert (nxt, n, status) == (2, 2, S_DONE) and cols["pid"].tolist() == [7, 7] and cols["lba"].tolist() == [0, 2]
    assert LayoutEvents._fields == ("obj", "act", "pages", "pid", "cls")


def test_freed_units_are_reused_next_fit_across_the_bitmap_tail():
    # 100 units: object 1 takes 0..69 (the cursor stays in word 1); freed, object 2 (40) takes
    # the rest of word 1 (64..99: 36 units, not the nonexistent 100..127) and wraps to 0..3.
    lay = ExtentLayout(100)
    ops = run(lay, [(1, W, 70, 0), (1, A_FREE), (2, W, 40, 0)], max_pages=70)
    assert [(o[0], o[1], o[2]) for o in ops] == [(OP_WRITE, 0, 70), (OP_TRIM, 0, 70), (OP_WRITE, 64, 36),
                                                 (OP_WRITE, 0, 4)]
    assert lay.extents_of(2) == [(64, 36), (0, 4)] and lay.free_pages == 60
    assert int(lay.bitmap[0]) == 0xF and int(lay.bitmap[1]) == (1 << 64) - 1
