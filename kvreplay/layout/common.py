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
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvreplay.layout.objtable import ObjTable

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


@njit(cache=True, inline="always")
def ex_room(ex, st):
    """Extents that can still be handed out without growing the pool."""
    return len(ex) - st[ST_EX_HIGH] + st[ST_EX_NFREE]


@njit(cache=True, inline="always")
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


@njit(cache=True)
def ex_new(ex, exfree, st, lba, length):
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


@njit(cache=True, inline="always")
def ex_release(ex, exfree, st, e):
    exfree[st[ST_EX_NFREE]] = e
    st[ST_EX_NFREE] += 1


@njit(cache=True)
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


@njit(cache=True)
def lru_push(oc, st, s):
    t = st[ST_LRU_TAIL]
    oc[s, OC_PREV] = t
    oc[s, OC_NEXT] = -1
    if t >= 0:
        oc[t, OC_NEXT] = s
    else:
        st[ST_LRU_HEAD] = s
    st[ST_LRU_TAIL] = s


@njit(cache=True)
def emit_extents(ob, n, oc, ex, s, op, pid, ev, src):
    """One op per extent of object ``s``."""
    e = oc[s, OC_HEAD]
    while e >= 0:
        n = emit(ob, n, op, ex[e, EX_LBA], ex[e, EX_LEN], pid, ev, src)
        e = ex[e, EX_NEXT]
    return n


@njit(cache=True)
def count_extents(oc, ex, s):
    k = 0
    e = oc[s, OC_HEAD]
    while e >= 0:
        k += 1
        e = ex[e, EX_NEXT]
    return k
