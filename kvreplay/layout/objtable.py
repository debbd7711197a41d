"""Object id -> dense slot map for numba kernels, plus per-slot state columns.

Trace object ids are arbitrary uint64s; kernels want dense indices into flat
state arrays. The map is open addressing with linear probing and backward-shift
deletion (no tombstones, so a long replay with millions of create/delete cycles
never degrades). Key and slot sit side by side (``kv[i] = (key, slot)``), so a
probe touches one cache line. Freed slots go on a stack and are reused: memory
follows the number of *live* objects, not the number ever seen.

Kernels receive ``kv, meta, free`` and call :func:`ot_find`, :func:`ot_insert`
and :func:`ot_remove`. Before an insert they check :func:`ot_full`; when it is
true they return early with a "grow" status, Python calls :meth:`ObjTable.grow`
and calls the kernel again from the same event. Tables therefore stay between
two and four times the live count (load factor <= 1/2) instead of being sized
for a whole batch, which keeps them in cache.
"""

from __future__ import annotations

import numpy as np
from devicemodels.jit import njit

# meta[] layout (an int64 array so kernels can update the counters in place)
M_COUNT = 0  # keys in the table
M_NFREE = 1  # entries on the free-slot stack
M_HIGH = 2  # slots ever handed out (high-water mark)

_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


@njit(inline="always")
def _mix(key):
    # murmur3 fmix64: good avalanche for sequential ids
    k = np.uint64(key)
    k ^= k >> _S33
    k *= _C1
    k ^= k >> _S33
    k *= _C2
    k ^= k >> _S33
    return k


@njit(inline="always")
def _home(kv, key):
    return np.int64(_mix(key) & np.uint64(kv.shape[0] - 1))


@njit(inline="always")
def _probe(kv, key):
    """Index of ``key``'s entry, or of the empty entry where its probe sequence ends."""
    k = np.int64(key)
    mask = kv.shape[0] - 1
    i = _home(kv, key)
    while kv[i, 1] >= 0 and kv[i, 0] != k:
        i = (i + 1) & mask
    return i


@njit
def ot_find(kv, key):
    """Slot of ``key`` or -1."""
    return kv[_probe(kv, key), 1]


@njit(inline="always")
def ot_full(kv, meta, free):
    """True if one more insert could exceed the load factor or the slot columns."""
    return meta[M_COUNT] + 1 > (kv.shape[0] >> 1) or (meta[M_NFREE] == 0 and meta[M_HIGH] >= free.shape[0])


@njit
def ot_insert(kv, meta, free, key):
    """Slot of ``key``, inserting it with a fresh slot if absent. Returns (slot, inserted).

    The caller checked ``ot_full`` (there is room)."""
    i = _probe(kv, key)
    if kv[i, 1] >= 0:
        return kv[i, 1], False
    if meta[M_NFREE] > 0:
        meta[M_NFREE] -= 1
        slot = np.int64(free[meta[M_NFREE]])
    else:
        slot = meta[M_HIGH]
        meta[M_HIGH] += 1
    kv[i, 0] = np.int64(key)
    kv[i, 1] = slot
    meta[M_COUNT] += 1
    return slot, True


@njit
def ot_remove(kv, meta, free, key):
    """Remove ``key``; its slot goes back on the free stack. Returns the slot or -1."""
    i = _probe(kv, key)
    slot = kv[i, 1]
    if slot < 0:
        return -1
    mask = kv.shape[0] - 1
    j = i
    while True:  # backward-shift deletion
        j = (j + 1) & mask
        if kv[j, 1] < 0:
            break
        h = _home(kv, kv[j, 0])
        # entry j may move into the hole at i only if its home h is not cyclically within (i, j]
        if i <= j:
            if i < h <= j:
                continue
        elif h > i or h <= j:
            continue
        kv[i, 0] = kv[j, 0]
        kv[i, 1] = kv[j, 1]
        i = j
    kv[i, 1] = -1
    free[meta[M_NFREE]] = slot
    meta[M_NFREE] += 1
    meta[M_COUNT] -= 1
    return slot


@njit(nogil=True)
def _rehash(kv, new_kv):
    mask = new_kv.shape[0] - 1
    for i in range(kv.shape[0]):
        if kv[i, 1] >= 0:
            j = _home(new_kv, kv[i, 0])
            while new_kv[j, 1] >= 0:
                j = (j + 1) & mask
            new_kv[j, 0] = kv[i, 0]
            new_kv[j, 1] = kv[i, 1]


def _new_kv(cap: int) -> np.ndarray:
    kv = np.zeros((cap, 2), np.int64)
    kv[:, 1] = -1
    return kv


class ObjTable:
    """A uint64 -> slot map with named per-slot columns (struct of arrays).

    ``columns`` maps a name to ``(dtype, fill)`` for a 1-D column or
    ``(dtype, fill, width)`` for a (slots, width) one. New slots beyond the
    high-water mark read as ``fill``; a reused slot keeps its old values, so
    kernels initialise what they rely on when they insert.
    """

    def __init__(self, columns: dict[str, tuple], initial: int = 1 << 10):
        cap = 1 << max(4, int(initial - 1).bit_length())
        self.kv = _new_kv(2 * cap)
        self.meta = np.zeros(3, np.int64)
        self.free = np.zeros(cap, np.int32)
        self._spec = {name: tuple(spec) + ((None,) if len(spec) == 2 else ()) for name, spec in columns.items()}
        self.cols = {name: self._new_col(name, cap) for name in self._spec}

    def _new_col(self, name: str, cap: int) -> np.ndarray:
        dtype, fill, width = self._spec[name]
        return np.full(cap if width is None else (cap, width), fill, dtype)

    @property
    def count(self) -> int:
        return int(self.meta[M_COUNT])

    @property
    def high(self) -> int:
        return int(self.meta[M_HIGH])

    @property
    def slot_capacity(self) -> int:
        return len(self.free)

    def full(self) -> bool:
        return bool(ot_full(self.kv, self.meta, self.free))

    def grow(self) -> None:
        """Double whatever limits the next insert (the key array and/or the slot columns)."""
        self.reserve(max(16, self.count))

    def reserve(self, n_new: int) -> bool:
        """Make room for ``n_new`` more inserts (load factor <= 1/2). True if arrays were replaced."""
        grew = False
        need_keys = 2 * (self.count + n_new)
        if need_keys > len(self.kv):
            cap = 1 << int(need_keys - 1).bit_length()
            new_kv = _new_kv(cap)
            _rehash(self.kv, new_kv)
            self.kv = new_kv
            grew = True
        need_slots = self.high + max(0, n_new - int(self.meta[M_NFREE]))
        if need_slots > len(self.free):
            cap = max(need_slots, 2 * len(self.free))
            free = np.zeros(cap, np.int32)
            free[: len(self.free)] = self.free
            self.free = free
            for name in self._spec:
                old = self.cols[name]
                col = self._new_col(name, cap)
                col[: len(old)] = old
                self.cols[name] = col
            grew = True
        return grew

    def nbytes(self) -> int:
        return int(self.kv.nbytes + self.free.nbytes + sum(c.nbytes for c in self.cols.values()))

    # Convenience for Python-side callers and tests (kernels use the functions directly).
    def find(self, key: int) -> int:
        return int(ot_find(self.kv, np.uint64(key)))

    def insert(self, key: int) -> int:
        if self.full():
            self.grow()
        return int(ot_insert(self.kv, self.meta, self.free, np.uint64(key))[0])

    def remove(self, key: int) -> int:
        return int(ot_remove(self.kv, self.meta, self.free, np.uint64(key)))
