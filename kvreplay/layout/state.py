"""Inputs, configuration and state of the layout kernels (extent and zone), as NamedTuples of arrays.

Why NamedTuples (as :mod:`devicemodels.ftl_state` and :mod:`kvreplay.tiers.state`): a kernel takes a
handful of arguments instead of dozens of positional ones, every array is declared once here with its
dtype, shape and meaning, and numba caches kernels that take them (jitclasses are not cached). The
scalars that configure a kernel are a NamedTuple of scalars, passed by value.

The arrays belong to the Python layouts (:mod:`kvreplay.layout.extent`, :mod:`kvreplay.layout.zone`),
which grow some of them between kernel calls (the object table, the extent pool): the tuples are
therefore rebuilt for every call (:meth:`kvreplay.layout.common.LayoutState.arrays`), never kept
across a grow.

Sizes: ``E`` tier events of a batch, ``T`` object-table key entries (a power of two), ``S`` object
slots, ``X`` extents in the pool, ``N`` zones, ``C`` writable units (pages) per zone, ``M`` open
streams, ``W`` 64-unit words of the free bitmap.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# columns of a zone row (Zones.zs[z, :])
ZS_WP, ZS_VALID, ZS_STATE, ZS_STREAM, ZS_RESETS = range(5)
ZS_WIDTH = 5
# zone states (Zones.zs[z, ZS_STATE])
Z_EMPTY, Z_OPEN, Z_FULL = 0, 1, 2
ZONE_STATE_NAMES = ("empty", "open", "full")


class LayoutEvents(NamedTuple):
    """One batch of the replayed tier's events (read only; a kernel call covers a range of them)."""

    obj: np.ndarray  # uint64[E]  object id
    act: np.ndarray  # int8[E]    storage action (kvreplay.layout.actions A_*)
    pages: np.ndarray  # int32[E]  mapping units of the object (writes)
    pid: np.ndarray  # int16[E]   placement id of a write (the extent layout tags its write ops with it)
    cls: np.ndarray  # int16[E]   placement class of a write (the zone layout groups zones by it)


class ObjectState(NamedTuple):
    """What both layouts keep: resident objects, their extents, scalars and counters.

    Constants for the columns and indices are in :mod:`kvreplay.layout.common` (OC_*, EX_*, ST_*, LC_*)."""

    kv: np.ndarray  # int64[T, 2]  object table: (object id, slot), slot -1 = empty entry (objtable.py)
    meta: np.ndarray  # int64[3]   object table: keys, free slots on the stack, slots ever handed out
    free: np.ndarray  # int32[S]   object table: stack of free slots
    oc: np.ndarray  # int32[S, 5]  object row per slot: first extent (-1 none), pages, class, LRU prev, LRU next
    okey: np.ndarray  # uint64[S]  object id of a slot (an eviction picks by slot, removes by key)
    ex: np.ndarray  # int64[X, 3]  extent: lba, length, next extent of the same object (-1 last)
    exfree: np.ndarray  # int32[X] stack of released extents (ST_EX_NFREE of them; ST_EX_HIGH ever used)
    st: np.ndarray  # int64[ST_COMMON (+2 zone)]  scalars: free pages, bitmap cursor, LRU head/tail, extent
    #                 pool fill, resident pages/objects; the zone layout adds its empty-zone FIFO head and count
    lc: np.ndarray  # int64[len(COUNTER_NAMES) (+ 4 per zone stream)]  counters reported in result.json


class Zones(NamedTuple):
    """The zone layout's own state (built by :func:`new_zones`)."""

    zs: np.ndarray  # int64[N, ZS_WIDTH]  per zone: write pointer, valid units, state (Z_*), stream (-1 none),
    #                 resets so far
    zq: np.ndarray  # int64[N]  ring of empty zones, oldest reset first; its head and count are
    #                 ObjectState.st[ST_Q_HEAD] and st[ST_Q_COUNT] (kvreplay.layout.zone)
    owner: np.ndarray  # int32[N * C]  extent that owns writable unit k of zone z (index z * C + k), -1 invalid
    sz: np.ndarray  # int64[M]  open zone of each stream (user streams 0..n_user-1, then GC), -1 none
    ext_cls: np.ndarray  # int16[X]  placement class of an extent (host GC keeps per-class GC streams apart)


class ZoneConfig(NamedTuple):
    """Scalars that configure the zone kernel."""

    zone_pages: int  # units per zone (LBA stride between zones)
    cap: int  # writable units per zone (<= zone_pages)
    n_user: int  # user streams (placement classes); GC streams follow them
    per_class: bool  # one GC stream per class (else one shared GC stream)
    gc_free: int  # host GC runs until this many zones are empty
    writable_pages: int  # writable units of the namespace (a bigger object can never be placed)
    lru: bool  # reads move an object to the LRU tail (else FIFO eviction)


class FreeMap(NamedTuple):
    """The extent layout's free-space map (built by :func:`new_free_map`)."""

    bitmap: np.ndarray  # uint64[W]  bit b of word w set = unit 64*w + b is used (units past the end: always set)


class ExtentConfig(NamedTuple):
    """Scalars that configure the extent kernel."""

    total_pages: int  # units of the namespace
    lru: bool  # reads move an object to the LRU tail (else FIFO eviction)
    in_place: bool  # a same-size rewrite of a resident object overwrites its extents


def new_zones(n_zones: int, cap_pages: int, n_streams: int, n_extents: int) -> Zones:
    """All zones empty (write pointer 0, no stream) and queued in index order; no stream open, no unit owned."""
    zs = np.zeros((n_zones, ZS_WIDTH), np.int64)
    zs[:, ZS_STREAM] = -1
    return Zones(
        zs=zs,
        zq=np.arange(n_zones, dtype=np.int64),
        owner=np.full(n_zones * cap_pages, -1, np.int32),
        sz=np.full(n_streams, -1, np.int64),
        ext_cls=np.zeros(n_extents, np.int16),
    )


def grow_ext_cls(zones: Zones, n_extents: int) -> Zones:
    """``zones`` with ``ext_cls`` covering an extent pool grown to ``n_extents`` (the classes kept)."""
    if len(zones.ext_cls) >= n_extents:
        return zones
    grown = np.zeros(n_extents, np.int16)
    grown[: len(zones.ext_cls)] = zones.ext_cls
    return zones._replace(ext_cls=grown)


def new_free_map(total_pages: int) -> FreeMap:
    """Every unit of ``total_pages`` free; the tail of the last word (past the namespace) marked used."""
    nw = (total_pages + 63) // 64
    bitmap = np.zeros(nw, np.uint64)
    tail = nw * 64 - total_pages
    if tail:  # units past the end are permanently "used"
        bitmap[-1] = np.uint64(((1 << tail) - 1) << (64 - tail))
    return FreeMap(bitmap=bitmap)
