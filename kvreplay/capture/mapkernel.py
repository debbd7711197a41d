"""The capture's per-block loop (:class:`kvreplay.capture.lifecycle.LifecycleMapper`) as a numba kernel.

The mapper resolves what is per event in Python (tier, table, block size, named tenant and scope, session,
key mix) into :class:`EventCols`; :func:`map_events` then walks the batch's block hashes in order, exactly
as the rules in :mod:`kvreplay.capture.lifecycle` say, and appends lifecycle rows to :class:`MapState`.

State: an open-addressing table (place, block hash) -> the object last made for that hash there (a place is
one instance's KV cache group; entries are never removed: a dead object's entry still gives a placeholder
store its geometry and a parent its chain), the per-object columns, and the rows not yet taken. The
caller grows the arrays (:func:`ensure`) before a batch could overflow them.

A scope is made in the order the stores ask for it, so the kernel returns at a store whose scope has no
code yet (:data:`NEEDS_SCOPE`); the mapper makes it and calls again from that event.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from devicemodels.jit import kernel

from kvreplay.schema import OP_COMMIT, OP_CREATE, OP_DELETE, OP_EVICT, OP_PERSIST

NCOLS = 11  # row columns: ts, op, obj, parent, tier, nbytes, ntokens, tenant, scope, session, key
EMPTY = -1  # TP of an unused table slot
NEEDS_SCOPE = -2  # EventCols.scope / MapState.default scope: not made yet
ALL_DONE = -1  # map_events' return when the whole batch is mapped
# MapState.cnt entries
C_ROWS, C_OBJS, C_USED, C_REPEAT, C_ABSENT, C_DEFAULT_SIZE = range(6)
O_MASK, O_NB, O_PAR, O_TEN, O_SCO, O_KEY = range(6)  # MapState.obj columns
T_KEY, T_PLACE, T_OBJ = range(3)  # MapState.tab columns
STORED_K, REMOVED_K = 0, 1  # EventCols.kind (wire.STORED, wire.REMOVED)

_GOLD = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xFF51AFD7ED558CCD)


class EventCols(NamedTuple):
    """One batch's events of one instance with a known tier (read-only). E events, H block hashes."""

    ts: int  # the batch's time, ns
    kind: np.ndarray  # int64[E]   STORED_K | REMOVED_K
    place: np.ndarray  # int64[E]  table place of the event's (instance, KV cache group)
    tier: np.ndarray  # int64[E]   tier code (schema.TIER)
    h0: np.ndarray  # int64[E+1]   the event's hashes are hs[h0[e]:h0[e+1]]
    hs: np.ndarray  # uint64[H]    block hashes, in event order
    bs: np.ndarray  # int64[E]     tokens per block (0: placeholder store)
    parent: np.ndarray  # int64[E]  parent_block_hash (stores; the uint64's bits)
    has_parent: np.ndarray  # int64[E]  1 if the event names a parent
    tenant: np.ndarray  # int64[E]  the tenant the event names, -1: none (the chain's, else 0)
    scope: np.ndarray  # int64[E]   the scope the event names (NEEDS_SCOPE: not made yet), -1: none
    session: np.ndarray  # int64[E]  session code (schema.NO_ID: none)
    mix: np.ndarray  # int64[E]    the content-key mix of the event's group (key = hash ^ mix; the uint64's bits)
    places: np.ndarray  # int64[G]  the instance's places in the order its groups were seen (chain lookup)


class MapState(NamedTuple):
    """Carried across batches (changed in place). M table slots (a power of two), O objects, R rows."""

    tab: np.ndarray  # int64[M, 3]  table slot: block hash (the uint64's bits), place (EMPTY: unused slot), the
    #                                object last made for (place, hash); one slot is one cache line's third
    obj: np.ndarray  # int64[O, 6]  per object: O_MASK (bit t set while tier t holds a copy), O_NB (bytes),
    #                                O_PAR (parent object, 0: none), O_TEN, O_SCO (tenant, scope codes), O_KEY
    #                                (content key, the uint64's bits); object 0: none
    rows: np.ndarray  # int64[NCOLS, R]  lifecycle rows not yet taken (cnt[C_ROWS] of them), column-major
    cnt: np.ndarray  # int64[6]   rows, objects made, table slots used, repeat stores, removes of absent
    #                                blocks, placeholder stores sized by the model's default block
    blocks: np.ndarray  # int64[2, 8]  blocks stored (row 0) / removed (row 1) per tier
    default_scope: np.ndarray  # int64[1]  the instance's scope without LoRA (NEEDS_SCOPE: not made yet)


def _new_tab(m: int) -> np.ndarray:
    tab = np.zeros((m, 3), np.int64)
    tab[:, T_PLACE] = EMPTY
    return tab


def new_state(objects: int = 1 << 16, slots: int = 1 << 17, rows: int = 1 << 17) -> MapState:
    tab = _new_tab(1 << max(4, int(slots - 1).bit_length()))
    return MapState(tab=tab, obj=np.zeros((max(objects, 2), 6), np.int64),
                    rows=np.zeros((NCOLS, max(rows, 1)), np.int64), cnt=np.zeros(6, np.int64),
                    blocks=np.zeros((2, 8), np.int64), default_scope=np.full(1, NEEDS_SCOPE, np.int64))


def ensure(st: MapState, hashes: int) -> MapState:
    """A state with room for a batch of ``hashes`` more block hashes (each makes at most one object, one
    table slot and two rows); arrays grow fourfold."""
    cnt = st.cnt
    objs, rows = int(cnt[C_OBJS]) + 1 + hashes, int(cnt[C_ROWS]) + 2 * hashes
    if objs > len(st.obj):
        obj = np.zeros((max(objs, 4 * len(st.obj)), 6), np.int64)
        obj[:len(st.obj)] = st.obj
        st = st._replace(obj=obj)
    if rows > st.rows.shape[1]:
        r = np.zeros((NCOLS, max(rows, 4 * st.rows.shape[1])), np.int64)
        r[:, :st.rows.shape[1]] = st.rows
        st = st._replace(rows=r)
    need = 2 * (int(cnt[C_USED]) + hashes)
    if need > len(st.tab):
        tab = _new_tab(max(1 << int(need - 1).bit_length(), 4 * len(st.tab)))
        _rehash(st.tab, tab)
        st = st._replace(tab=tab)
    return st


@kernel(inline="always")
def _slot(tab, key, place):
    """The slot of (place, key), or the empty slot where it would go."""
    mask = np.uint64(tab.shape[0] - 1)
    h = (np.uint64(key) ^ (np.uint64(place) * _GOLD)) * _C1
    h ^= h >> np.uint64(29)
    i = np.int64(h & mask)
    while True:
        if tab[i, T_PLACE] == EMPTY or (tab[i, T_PLACE] == place and tab[i, T_KEY] == key):
            return i
        i = np.int64((np.uint64(i) + np.uint64(1)) & mask)


@kernel(nogil=True)
def _rehash(tab0, tab):
    for j in range(tab0.shape[0]):
        if tab0[j, T_PLACE] != EMPTY:
            i = _slot(tab, tab0[j, T_KEY], tab0[j, T_PLACE])
            tab[i, T_KEY], tab[i, T_PLACE], tab[i, T_OBJ] = tab0[j, T_KEY], tab0[j, T_PLACE], tab0[j, T_OBJ]


@kernel(inline="always")
def _find(st, place, key):
    """The object last made for (place, key) (key: the hash's int64 bits), or 0."""
    i = _slot(st.tab, key, place)
    return st.tab[i, T_OBJ] if st.tab[i, T_PLACE] == place else 0


@kernel(inline="always")
def _row(st, ts, op, oid, parent, tier, nbytes, ntokens, tenant, scope, session, key):  # noqa: PLR0913
    r = st.cnt[C_ROWS]
    rows = st.rows
    rows[0, r], rows[1, r], rows[2, r], rows[3, r], rows[4, r] = ts, op, oid, parent, tier
    rows[5, r], rows[6, r], rows[7, r], rows[8, r], rows[9, r], rows[10, r] = (nbytes, ntokens, tenant, scope,
                                                                                session, key)
    st.cnt[C_ROWS] = r + 1


@kernel(nogil=True)
def map_events(ev, st, start, bpt, default_block):
    """Map events ``start``.. of ``ev`` (EventCols) into ``st`` (MapState); ALL_DONE, or the index of the first
    store whose scope is not made yet (NEEDS_SCOPE in ev.scope, or in st.default_scope when it needs that)."""
    hs, cnt, obj, tab = ev.hs, st.cnt, st.obj, st.tab
    ts = ev.ts
    for e in range(start, ev.kind.shape[0]):
        place, tier = ev.place[e], ev.tier[e]
        bit = np.int64(1) << tier
        sess = ev.session[e]
        done = 0
        if ev.kind[e] == REMOVED_K:
            for j in range(ev.h0[e], ev.h0[e + 1]):
                oid = _find(st, place, np.int64(hs[j]))
                if oid == 0 or (obj[oid, O_MASK] & bit) == 0:
                    cnt[C_ABSENT] += 1
                    continue
                m = obj[oid, O_MASK] & ~bit
                obj[oid, O_MASK] = m
                nb = obj[oid, O_NB]
                _row(st, ts, OP_EVICT if m else OP_DELETE, oid, obj[oid, O_PAR], tier, nb, nb // bpt,
                     obj[oid, O_TEN], obj[oid, O_SCO], sess, obj[oid, O_KEY])
                done += 1
            st.blocks[1, tier] += done
            continue
        # a store: its chain (parent object, here or in another group of the instance), tenant and scope
        bs = ev.bs[e]
        placeholder = bs == 0
        parent = np.int64(0)
        phash = ev.parent[e]
        if ev.has_parent[e]:
            parent = _find(st, place, phash)
        chain = parent
        if chain == 0 and ev.has_parent[e]:
            for g in range(ev.places.shape[0]):
                chain = _find(st, ev.places[g], phash)
                if chain != 0:
                    break
        scope = ev.scope[e]
        if scope == NEEDS_SCOPE:
            return e
        if scope < 0:
            if chain != 0:
                scope = obj[chain, O_SCO]
            else:
                scope = st.default_scope[0]
                if scope == NEEDS_SCOPE:
                    return e
        tenant = ev.tenant[e]
        if tenant < 0:
            tenant = obj[chain, O_TEN] if chain != 0 else 0
        nbytes = bs * bpt
        mix = ev.mix[e]
        for j in range(ev.h0[e], ev.h0[e + 1]):
            h = np.int64(hs[j])
            i = _slot(tab, h, place)
            oid = tab[i, T_OBJ] if tab[i, T_PLACE] == place else 0
            if oid == 0 or obj[oid, O_MASK] == 0:
                if placeholder:  # geometry (and chain) of the block's device-side store, if it was seen
                    if oid != 0:
                        row_nb, row_ten, row_sco = obj[oid, O_NB], obj[oid, O_TEN], obj[oid, O_SCO]
                        row_bs = row_nb // bpt
                    else:
                        cnt[C_DEFAULT_SIZE] += 1
                        row_bs, row_ten, row_sco = default_block, tenant, scope
                        row_nb = row_bs * bpt
                else:
                    row_bs, row_nb, row_ten, row_sco = bs, nbytes, tenant, scope
                if tab[i, T_PLACE] == EMPTY:
                    tab[i, T_PLACE] = place
                    tab[i, T_KEY] = h
                    cnt[C_USED] += 1
                oid = cnt[C_OBJS] + 1
                cnt[C_OBJS] = oid
                tab[i, T_OBJ] = oid
                key = h ^ mix
                obj[oid, O_MASK], obj[oid, O_NB], obj[oid, O_PAR] = bit, row_nb, parent
                obj[oid, O_TEN], obj[oid, O_SCO], obj[oid, O_KEY] = row_ten, row_sco, key
                _row(st, ts, OP_CREATE, oid, parent, tier, row_nb, row_bs, row_ten, row_sco, sess, key)
                _row(st, ts, OP_COMMIT, oid, parent, tier, row_nb, row_bs, row_ten, row_sco, sess, key)
                done += 1
            elif obj[oid, O_MASK] & bit:
                cnt[C_REPEAT] += 1
            else:
                obj[oid, O_MASK] |= bit
                nb = obj[oid, O_NB]
                _row(st, ts, OP_PERSIST, oid, obj[oid, O_PAR], tier, nb, nb // bpt, obj[oid, O_TEN],
                     obj[oid, O_SCO], sess, obj[oid, O_KEY])
                done += 1
            parent = oid
        st.blocks[0, tier] += done
    return ALL_DONE


def empty_cols(places: np.ndarray) -> EventCols:
    z = np.zeros(0, np.int64)
    return EventCols(0, z, z, z, np.zeros(1, np.int64), np.zeros(0, np.uint64), z, z, z, z, z, z, z, places)


def warm() -> None:
    """Compile or load the kernels now (a live capture calls this before it subscribes, so the first batches
    do not wait for them while messages queue up)."""
    st = new_state(2, 16, 1)
    map_events(empty_cols(np.zeros(1, np.int64)), st, 0, 1, 1)
    _rehash(st.tab, _new_tab(16))
