"""Extent allocator for conventional and FDP namespaces.

The namespace is a bitmap of mapping units (device pages). A write takes free
units next-fit from a rotating cursor (at the granularity of 64-unit bitmap
words: within the cursor's word the lowest free units go first), so a fresh
namespace hands out contiguous runs and a fragmented one hands out several
extents; each extent becomes one write op carrying the object's placement id. Reads emit one read per extent,
frees one deallocate (TRIM) per extent. Rewriting a resident object of the same
size overwrites its extents in place (the FTL invalidates the old copy, as a
TRIM + write would); a size change frees the old copy and allocates anew.

Where the data lands inside the device is the FTL's business: for a page-mapped
FTL the LBA choice does not change WAF, only which LBAs are live does. So this
allocator aims for few ops per object and exact TRIMs, nothing more.
"""

from __future__ import annotations

import numpy as np

from devicemodels.base import OP_TRIM, OP_WRITE
from devicemodels.jit import kernel
from kvreplay.layout.actions import A_DROP, A_FREE, A_READ, A_WRITE
from kvreplay.layout.common import (
    EX_LBA,
    EX_LEN,
    EX_NEXT,
    LAYOUTS,
    LC_FORCED,
    LC_FORCED_PAGES,
    LC_OPS_TRIM,
    LC_OPS_WRITE,
    LC_REWRITES,
    LC_WRITE_PAGES,
    LC_WRITES,
    OC_CLS,
    OC_HEAD,
    OC_NPAGES,
    S_DONE,
    S_TOO_BIG,
    SRC_EVICT,
    SRC_USER,
    ST_CURSOR,
    ST_FREE_PAGES,
    ST_LRU_HEAD,
    LayoutState,
    ObjectLayout,
    emit,
    emit_extents,
    ex_new,
    ex_release,
    find_freed,
    forget_obj,
    lru_touch,
    new_obj,
    note_written,
    read_obj,
    room_status,
)
from kvreplay.layout.objtable import ot_find
from kvreplay.layout.state import ExtentConfig, new_free_map

_FULL = np.uint64(0xFFFFFFFFFFFFFFFF)
_ONE = np.uint64(1)
_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DEBRUIJN_POS = np.array([0, 1, 48, 2, 57, 49, 28, 3, 61, 58, 50, 42, 38, 29, 17, 4, 62, 55, 59, 36, 53, 51, 43, 22,
                          45, 39, 33, 30, 24, 18, 12, 5, 63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21, 44, 32, 23,
                          11, 46, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19, 9, 13, 8, 7, 6], dtype=np.int64)


@kernel(inline="always")
def _ctz(x):
    """Index of the lowest set bit of a non-zero uint64 (de Bruijn multiply)."""
    low = x & (~x + _ONE)
    return _DEBRUIJN_POS[np.int64((low * _DEBRUIJN) >> np.uint64(58))]


@kernel(inline="always")
def _mask(b, length):
    """``length`` ones starting at bit ``b`` (1 <= length <= 64 - b)."""
    if length == 64:
        return _FULL
    return ((_ONE << np.uint64(length)) - _ONE) << np.uint64(b)


@kernel
def _bits_clear(bitmap, lba, length):
    p = lba
    end = lba + length
    while p < end:
        w = p >> 6
        b = p & 63
        take = min(64 - b, end - p)
        bitmap[w] &= ~_mask(b, take)
        p += take


@kernel
def _alloc(objs, fm, s, need):
    """Take ``need`` free units next-fit from the cursor; chain the runs as extents of object ``s``."""
    bitmap, st, ex, oc = fm.bitmap, objs.st, objs.ex, objs.oc
    nw = len(bitmap)
    w = st[ST_CURSOR]
    remaining = need
    head = -1
    tail = -1
    while remaining > 0:
        word = bitmap[w]
        while word != _FULL and remaining > 0:
            free = ~word
            b = _ctz(free)
            run = 64 - b
            rest = ~(free >> np.uint64(b))  # zeros where the run continues
            if rest != 0:
                run = min(run, _ctz(rest))
            take = min(run, remaining)
            word |= _mask(b, take)
            remaining -= take
            p = (w << 6) + b
            if tail >= 0 and ex[tail, EX_LBA] + ex[tail, EX_LEN] == p:
                ex[tail, EX_LEN] += take
            else:
                e = ex_new(objs, p, take)
                if tail >= 0:
                    ex[tail, EX_NEXT] = e
                else:
                    head = e
                tail = e
        bitmap[w] = word
        if remaining > 0:
            w += 1
            if w == nw:
                w = 0
    st[ST_CURSOR] = w
    st[ST_FREE_PAGES] -= need
    oc[s, OC_HEAD] = head


@kernel
def _free_obj(objs, fm, ob, n, s, ev, src):
    """Deallocate object ``s``: one TRIM per extent, its units free in the bitmap, the object forgotten."""
    oc, ex, st, bitmap = objs.oc, objs.ex, objs.st, fm.bitmap
    e = oc[s, OC_HEAD]
    while e >= 0:
        lba = ex[e, EX_LBA]
        ln = ex[e, EX_LEN]
        n = emit(ob, n, OP_TRIM, lba, ln, 0, ev, src)
        _bits_clear(bitmap, lba, ln)
        nxt = ex[e, EX_NEXT]
        ex_release(objs, e)
        e = nxt
    st[ST_FREE_PAGES] += oc[s, OC_NPAGES]
    forget_obj(objs, s)
    return n


@kernel(nogil=True)
def extent_kernel(events, start, end, objs, fm, cfg, ob, ob_bound):
    """Map tier events [start, end) to ops. Returns (next event, ops emitted, status).

    ``events``: LayoutEvents, ``objs``: ObjectState, ``fm``: FreeMap, ``cfg``: ExtentConfig
    (kvreplay.layout.state); ``ob``: the (OB_ROWS, capacity) op buffer, ``ob_bound``: ops one event may emit."""
    ev_obj, ev_act, ev_pages, ev_pid = events.obj, events.act, events.pages, events.pid
    oc, st, lc = objs.oc, objs.st, objs.lc
    total_pages, lru, in_place = cfg.total_pages, cfg.lru, cfg.in_place
    n = 0
    cap = ob.shape[1]
    i = start
    while i < end:
        a = ev_act[i]
        key = ev_obj[i]
        stop = room_status(objs, n, cap, ob_bound, a)
        if stop >= 0:
            return i, n, stop
        if a == A_WRITE:
            need = ev_pages[i]
            pid = ev_pid[i]
            s = ot_find(objs.kv, key)
            if s >= 0:
                lc[LC_REWRITES] += 1
                if in_place and oc[s, OC_NPAGES] == need:
                    n0 = n
                    n = emit_extents(objs, ob, n, s, OP_WRITE, pid, i, SRC_USER)
                    lc[LC_OPS_WRITE] += n - n0
                    oc[s, OC_CLS] = pid
                    lru_touch(oc, st, s)
                    lc[LC_WRITES] += 1
                    lc[LC_WRITE_PAGES] += need
                    i += 1
                    continue
                n0 = n
                n = _free_obj(objs, fm, ob, n, s, i, SRC_USER)
                lc[LC_OPS_TRIM] += n - n0
            if need > total_pages:
                return i, n, S_TOO_BIG
            while st[ST_FREE_PAGES] < need:
                v = st[ST_LRU_HEAD]
                if v < 0:
                    return i, n, S_TOO_BIG
                lc[LC_FORCED] += 1
                lc[LC_FORCED_PAGES] += oc[v, OC_NPAGES]
                n0 = n
                n = _free_obj(objs, fm, ob, n, v, i, SRC_EVICT)
                lc[LC_OPS_TRIM] += n - n0
            s = new_obj(objs, key, need, pid)
            _alloc(objs, fm, s, need)
            note_written(objs, s, need)
            n0 = n
            n = emit_extents(objs, ob, n, s, OP_WRITE, pid, i, SRC_USER)
            lc[LC_OPS_WRITE] += n - n0
        elif a == A_READ:
            n = read_obj(objs, ob, n, key, i, lru)
        elif a == A_FREE or a == A_DROP:
            s = find_freed(objs, key, a)
            if s >= 0:
                n0 = n
                n = _free_obj(objs, fm, ob, n, s, i, SRC_USER)
                lc[LC_OPS_TRIM] += n - n0
        i += 1
    return i, n, S_DONE


@LAYOUTS.register("extent")
class ExtentLayout(ObjectLayout):
    """Objects -> extents of a flat namespace of ``total_pages`` mapping units."""

    @classmethod
    def for_device(cls, device, groups, n_classes, params, evict_policy):
        return cls(device.logical_pages, evict_policy=evict_policy, rewrite_in_place=params.rewrite_in_place)

    def __init__(self, total_pages: int, *, evict_policy: str = "lru", rewrite_in_place: bool = True):
        if total_pages <= 0:
            raise ValueError("total_pages must be positive")
        self.total_pages = int(total_pages)
        self.lru = evict_policy == "lru"
        self.in_place = bool(rewrite_in_place)
        self.state = LayoutState()
        self.free_map = new_free_map(self.total_pages)
        self.cfg = ExtentConfig(total_pages=self.total_pages, lru=self.lru, in_place=self.in_place)
        self.state.st[ST_FREE_PAGES] = self.total_pages

    @property
    def bitmap(self) -> np.ndarray:
        """The free-unit bitmap (FreeMap.bitmap)."""
        return self.free_map.bitmap

    def op_bound(self, max_obj_pages: int) -> int:
        """Most ops one event can emit: TRIM of the old copy, evictions' TRIMs, the writes."""
        return 4 * int(max_obj_pages) + 4

    def _kernel(self, events, start, end, ob, ob_bound):
        return extent_kernel(events, start, end, self.state.arrays(), self.free_map, self.cfg, ob, ob_bound)

    @property
    def free_pages(self) -> int:
        return int(self.state.st[ST_FREE_PAGES])

    def stats(self) -> dict:
        c = self.counters()
        return {
            "layout": self.name,
            "total_pages": self.total_pages,
            "resident_pages": self.resident_pages,
            "resident_objects": self.resident_objects,
            **c,
        }
