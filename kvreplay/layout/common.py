"""State and numba helpers shared by the extent and zone layouts.

Both layouts keep the same three pieces of state:

- an :class:`~kvreplay.layout.objtable.ObjTable` of resident objects with an
  int32 row per slot (``oc``: first extent, pages, class, LRU prev/next) and the
  object id (``okey``) so an eviction can remove the key it picked by slot;
- an extent pool (``ex``: lba, length, next extent) with a free stack, so an
  object is a chain of (lba, npages) runs of any length;
- a doubly linked resident list in write order. With LRU eviction a read moves
  the object to the tail; with FIFO it does not. When the namespace is full the
  head is evicted (deallocated, counted as a forced eviction): a KV store that
  runs out of room evicts by its own policy, it never drops a write.

Ops are emitted into ``ob``, an int64 (6, capacity) array with rows op, lba,
npages, pid, the index of the tier event that caused the op, and its origin
(``SRC_USER``: the event itself; ``SRC_GC``: host GC relocation or reset;
``SRC_EVICT``: a forced eviction), so statistics never mix GC reads into the
latency of the KV store's own reads.

Kernels and helpers here are compiled with :func:`devicemodels.jit.kernel` (no reference
counting): with numba's refcounting, every array handed to a helper costs runtime calls, which
made the shared helpers below (and the kernels) measurably slower; without it they are free.
The helpers that work on whole objects take the kernels' state as one
:class:`~kvreplay.layout.state.ObjectState` (built by :meth:`LayoutState.arrays` for every call).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from devicemodels.base import OP_READ
from devicemodels.jit import kernel
from kvreplay.layout.actions import A_FREE, A_WRITE
from kvreplay.layout.objtable import ObjTable, ot_find, ot_full, ot_insert, ot_remove
from kvreplay.layout.state import LayoutEvents, ObjectState
from kvbed.core.registry import Registry

#: the layouts, by name; :func:`kvreplay.layout.layout_for` picks the one a device's namespace needs
LAYOUTS: Registry[type] = Registry("layout")

# object row (oc[slot, k])
OC_HEAD, OC_NPAGES, OC_CLS, OC_PREV, OC_NEXT = range(5)
OC_WIDTH = 5
# extent row (ex[e, k])
EX_LBA, EX_LEN, EX_NEXT = range(3)
# op buffer rows (ob[k, i])
OB_OP, OB_LBA, OB_NPAGES, OB_PID, OB_EV, OB_SRC = range(6)
OB_ROWS = 6
SRC_USER, SRC_GC, SRC_EVICT = 0, 1, 2
SRC_NAMES = ("user", "gc", "evict")

# scalar state (st[k]); the zone layout appends its own after ST_COMMON
ST_FREE_PAGES, ST_CURSOR, ST_LRU_HEAD, ST_LRU_TAIL, ST_EX_NFREE, ST_EX_HIGH, ST_RES_PAGES, ST_RES_OBJS = range(8)
ST_COMMON = 8

# kernel return status (S_GROW: the extent pool is low; grow it and call again from the returned event)
S_DONE, S_BUFFER_FULL, S_TOO_BIG, S_NO_PROGRESS, S_GROW = range(5)

# layout counters (lc[k]); names are the keys reported in result.json
COUNTER_NAMES = (
    "objects_written",
    "pages_written",  # user (host) pages; relocations are counted apart
    "objects_rewritten",  # a persist of an object already resident
    "objects_read",
    "pages_read",
    "read_misses",  # a load/hit of an object not resident (evicted by the layout, or never written)
    "objects_freed",
    "pages_freed",
    "free_misses",  # evict/delete of an object not resident here (e.g. deleted from other tiers only)
    "forced_evictions",  # objects the layout evicted itself because the namespace was full
    "forced_evicted_pages",
    "gc_runs",  # host-side GC victims (zns)
    "gc_relocated_pages",
    "zone_resets",
    "zones_opened",
    "peak_resident_pages",
    "ops_write",
    "ops_read",
    "ops_trim",
    "ops_zone_reset",
)
LC = {name: i for i, name in enumerate(COUNTER_NAMES)}
(
    LC_WRITES,
    LC_WRITE_PAGES,
    LC_REWRITES,
    LC_READS,
    LC_READ_PAGES,
    LC_READ_MISSES,
    LC_FREES,
    LC_FREE_PAGES,
    LC_FREE_MISSES,
    LC_FORCED,
    LC_FORCED_PAGES,
    LC_GC_RUNS,
    LC_GC_PAGES,
    LC_ZONE_RESETS,
    LC_ZONES_OPENED,
    LC_PEAK_RES,
    LC_OPS_WRITE,
    LC_OPS_READ,
    LC_OPS_TRIM,
    LC_OPS_RESET,
) = range(len(COUNTER_NAMES))


class LayoutState:
    """The arrays every layout kernel works on (grown from Python between kernel calls)."""

    def __init__(self, n_state: int = ST_COMMON):
        self.objs = ObjTable({"oc": (np.int32, -1, OC_WIDTH), "okey": (np.uint64, 0)})
        self.ex = np.zeros((1 << 12, 3), np.int64)
        self.exfree = np.zeros(1 << 12, np.int32)
        self.st = np.zeros(n_state, np.int64)
        self.st[ST_LRU_HEAD] = -1
        self.st[ST_LRU_TAIL] = -1
        self.lc = np.zeros(len(COUNTER_NAMES), np.int64)

    def arrays(self) -> ObjectState:
        """The arrays as the kernels take them; build anew for every kernel call (a grow replaces arrays)."""
        o = self.objs
        return ObjectState(kv=o.kv, meta=o.meta, free=o.free, oc=o.cols["oc"], okey=o.cols["okey"],
                           ex=self.ex, exfree=self.exfree, st=self.st, lc=self.lc)

    def ex_room(self) -> int:
        return len(self.ex) - int(self.st[ST_EX_HIGH]) + int(self.st[ST_EX_NFREE])

    def grow(self, bound: int) -> None:
        """After a kernel returned S_GROW: make room for one more event (an insert, ``bound`` extents)."""
        if self.objs.full():
            self.objs.grow()
        if self.ex_room() < bound:
            self.reserve_extents(max(bound, len(self.ex)))

    def reserve_extents(self, n_extents: int) -> None:
        """Room for ``n_extents`` extents beyond the free ones."""
        need = int(self.st[ST_EX_HIGH]) + max(0, n_extents - int(self.st[ST_EX_NFREE]))
        if need > len(self.ex):
            cap = max(need, 2 * len(self.ex))
            ex = np.zeros((cap, 3), np.int64)
            ex[: len(self.ex)] = self.ex
            exfree = np.zeros(cap, np.int32)
            exfree[: len(self.exfree)] = self.exfree
            self.ex, self.exfree = ex, exfree

    def counters(self) -> dict[str, int]:
        return {name: int(self.lc[i]) for i, name in enumerate(COUNTER_NAMES)}

    def nbytes(self) -> int:
        return self.objs.nbytes() + self.ex.nbytes + self.exfree.nbytes


@kernel(inline="always")
def ex_room(ex, st):
    """Extents that can still be handed out without growing the pool."""
    return len(ex) - st[ST_EX_HIGH] + st[ST_EX_NFREE]


@kernel(inline="always")
def emit(ob, n, op, lba, npages, pid, ev, src):
    if n >= ob.shape[1]:  # kernels reserve room per event; this is the safety net, never a silent overrun
        raise IndexError("layout op buffer overflow")
    ob[OB_OP, n] = op
    ob[OB_LBA, n] = lba
    ob[OB_NPAGES, n] = npages
    ob[OB_PID, n] = pid
    ob[OB_EV, n] = ev
    ob[OB_SRC, n] = src
    return n + 1


@kernel
def ex_new(objs, lba, length):
    """A new extent (a released one if any) of ``length`` units at ``lba``, chained to nothing."""
    ex, exfree, st = objs.ex, objs.exfree, objs.st
    if st[ST_EX_NFREE] > 0:
        st[ST_EX_NFREE] -= 1
        e = exfree[st[ST_EX_NFREE]]
    else:
        e = st[ST_EX_HIGH]
        st[ST_EX_HIGH] += 1
    ex[e, EX_LBA] = lba
    ex[e, EX_LEN] = length
    ex[e, EX_NEXT] = -1
    return e


@kernel(inline="always")
def ex_release(objs, e):
    exfree, st = objs.exfree, objs.st
    exfree[st[ST_EX_NFREE]] = e
    st[ST_EX_NFREE] += 1


@kernel
def lru_unlink(oc, st, s):
    p = oc[s, OC_PREV]
    q = oc[s, OC_NEXT]
    if p >= 0:
        oc[p, OC_NEXT] = q
    else:
        st[ST_LRU_HEAD] = q
    if q >= 0:
        oc[q, OC_PREV] = p
    else:
        st[ST_LRU_TAIL] = p
    oc[s, OC_PREV] = -1
    oc[s, OC_NEXT] = -1


@kernel
def lru_push(oc, st, s):
    t = st[ST_LRU_TAIL]
    oc[s, OC_PREV] = t
    oc[s, OC_NEXT] = -1
    if t >= 0:
        oc[t, OC_NEXT] = s
    else:
        st[ST_LRU_HEAD] = s
    st[ST_LRU_TAIL] = s


@kernel
def emit_extents(objs, ob, n, s, op, pid, ev, src):
    """One op per extent of object ``s``."""
    oc, ex = objs.oc, objs.ex
    e = oc[s, OC_HEAD]
    while e >= 0:
        n = emit(ob, n, op, ex[e, EX_LBA], ex[e, EX_LEN], pid, ev, src)
        e = ex[e, EX_NEXT]
    return n


@kernel
def count_extents(oc, ex, s):
    k = 0
    e = oc[s, OC_HEAD]
    while e >= 0:
        k += 1
        e = ex[e, EX_NEXT]
    return k


@kernel(inline="always")
def lru_touch(oc, st, s):
    """Move object ``s`` to the tail (most recently used) of the resident list."""
    lru_unlink(oc, st, s)
    lru_push(oc, st, s)


@kernel(inline="always")
def room_status(objs, n, cap, ob_bound, a):
    """Before an event: S_BUFFER_FULL if ``ob`` may not hold its ops, S_GROW if a write may not
    find an extent or a table slot, else -1 (go on)."""
    if n + ob_bound > cap:
        return S_BUFFER_FULL
    if a == A_WRITE and (ex_room(objs.ex, objs.st) < ob_bound or ot_full(objs.kv, objs.meta, objs.free)):
        return S_GROW
    return -1


@kernel(inline="always")
def new_obj(objs, key, npages, cls):
    """Insert ``key`` (not resident) as an object of ``npages`` in class ``cls``; returns its slot."""
    oc, okey = objs.oc, objs.okey
    s, _ = ot_insert(objs.kv, objs.meta, objs.free, key)
    okey[s] = key
    oc[s, OC_NPAGES] = npages
    oc[s, OC_CLS] = cls
    return s


@kernel(inline="always")
def note_written(objs, s, npages):
    """A write of object ``s`` has been placed: it becomes the most recently used resident."""
    oc, st, lc = objs.oc, objs.st, objs.lc
    lru_push(oc, st, s)
    st[ST_RES_PAGES] += npages
    st[ST_RES_OBJS] += 1
    if st[ST_RES_PAGES] > lc[LC_PEAK_RES]:
        lc[LC_PEAK_RES] = st[ST_RES_PAGES]
    lc[LC_WRITES] += 1
    lc[LC_WRITE_PAGES] += npages


@kernel(inline="always")
def forget_obj(objs, s):
    """Drop object ``s`` (its extents already released) from the resident list and the table."""
    oc, st = objs.oc, objs.st
    st[ST_RES_PAGES] -= oc[s, OC_NPAGES]
    st[ST_RES_OBJS] -= 1
    oc[s, OC_HEAD] = -1
    lru_unlink(oc, st, s)
    ot_remove(objs.kv, objs.meta, objs.free, objs.okey[s])


@kernel(inline="always")
def read_obj(objs, ob, n, key, ev, lru):
    """A read event: one read op per extent of a resident object (LRU: it becomes the most
    recently used), a miss counted otherwise. Returns the op count."""
    oc, st, lc = objs.oc, objs.st, objs.lc
    s = ot_find(objs.kv, key)
    if s < 0:
        lc[LC_READ_MISSES] += 1
        return n
    n0 = n
    n = emit_extents(objs, ob, n, s, OP_READ, 0, ev, SRC_USER)
    lc[LC_OPS_READ] += n - n0
    lc[LC_READS] += 1
    lc[LC_READ_PAGES] += oc[s, OC_NPAGES]
    if lru:
        lru_touch(oc, st, s)
    return n


@kernel(inline="always")
def find_freed(objs, key, a):
    """A free/drop event: the slot of the object to free (counted), or -1 (a free of an object
    that is not resident counts as a miss; a drop does not)."""
    oc, lc = objs.oc, objs.lc
    s = ot_find(objs.kv, key)
    if s < 0:
        if a == A_FREE:
            lc[LC_FREE_MISSES] += 1
        return -1
    lc[LC_FREES] += 1
    lc[LC_FREE_PAGES] += oc[s, OC_NPAGES]
    return s


class ObjectLayout:
    """What the extent and zone layouts share on the Python side: the kernel call loop that grows
    the state when a kernel asks for it, read-outs of the common state, and what the replay asks a
    layout about the device it places objects on (the class methods), so the replay engine holds no
    knowledge of particular devices."""

    name: ClassVar[str]
    #: the namespace this layout places objects on (``DeviceModel.zoned``); ``layout_for`` matches them
    zoned: ClassVar[bool] = False
    #: why the device may not be preconditioned before a replay with this layout (None: it may)
    precondition_refusal: ClassVar[str | None] = None
    state: LayoutState

    @classmethod
    def default_classes(cls, device_cls: type, groups: dict[str, Any], params: Any) -> int:
        """Placement classes the hint policy uses when the replay does not say: the placement ids the
        device can address (FDP: nruh x nrg; 1 on a device without placement)."""
        return device_cls.placement_classes(groups)

    @classmethod
    def open_streams(cls, n_classes: int, groups: dict[str, Any], params: Any) -> int:
        """Units the layout keeps open at once outside the live data (zones; 0 for extents), checked
        against the device's limits; the sizing holds them back."""
        return 0

    @classmethod
    def for_device(cls, device: Any, groups: dict[str, Any], n_classes: int, params: Any,
                   evict_policy: str) -> "ObjectLayout":
        """The layout for a built device (``groups``: its parameter groups; ``params``: LayoutParams)."""
        raise NotImplementedError

    def job_fields(self, stats: dict[str, Any], page_bytes: int) -> dict[str, Any]:
        """Layout-specific entries of result.json's job (besides ``layout``), from ``stats()``."""
        return {}

    def _kernel(self, events: LayoutEvents, start, end, ob, ob_bound):
        """One kernel call over tier events [start, end); returns (next event, ops, status)."""
        raise NotImplementedError

    def run(self, ev_obj, ev_act, ev_pages, ev_pid, ev_cls, start, end, ob, ob_bound):
        """Process tier events [start, end) into ``ob``; returns (next event, ops, status)."""
        events = LayoutEvents(obj=ev_obj, act=ev_act, pages=ev_pages, pid=ev_pid, cls=ev_cls)
        while True:
            res = self._kernel(events, start, end, ob, ob_bound)
            if res[2] != S_GROW or res[1]:
                return res
            self.state.grow(ob_bound)  # nothing emitted yet: grow and retry from the same event

    @property
    def resident_pages(self) -> int:
        return int(self.state.st[ST_RES_PAGES])

    @property
    def resident_objects(self) -> int:
        return int(self.state.st[ST_RES_OBJS])

    def counters(self) -> dict[str, int]:
        return self.state.counters()

    def extents_of(self, obj_id: int) -> list[tuple[int, int]]:
        """(lba, npages) runs of a resident object (tests and debugging)."""
        s = self.state.objs.find(obj_id)
        if s < 0:
            return []
        out, e = [], int(self.state.objs.cols["oc"][s, OC_HEAD])
        while e >= 0:
            out.append((int(self.state.ex[e, EX_LBA]), int(self.state.ex[e, EX_LEN])))
            e = int(self.state.ex[e, EX_NEXT])
        return out
