"""The content-key invariants of a v2 trace (``kvbed trace validate``; :mod:`kvreplay.validate` runs this kernel
beside its own, batch by batch):

* one key per object: every event of an object carries the ``content_key`` of its first event;
* one live object per content: a copy that begins (``commit``, ``persist``, ``recover``) in a tier while
  another object with the same key, scope and kind holds a live copy there is a violation. An object id is
  never reused, so two live objects of one content in one place mean a store that indexes by content would
  hold two answers for one key.

Why (tier, scope, kind) is the place, and not the sharing domain: the trace has no domain column. The tier
simulator hashes the domain's salt (and the scope) into the key itself, so two domains' equal prefixes already
have different keys; a capture's scope is the engine instance (plus LoRA), and one instance is one cache. Kind
is part of the place because a derived copy (quantized, compressed) keeps its source's key: the exact object
and its quantized copy are two representations of one content, not two answers. Key 0 means "no key known"
(a v1 trace, an engine block hash of 0) and is not checked for liveness.

State: each object's key, and an open-addressing table (tier, scope, kind, key) -> the object whose copy began
there last (cleared when that copy ends), grown before a batch could fill it past half.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from devicemodels.jit import njit

from kvreplay.schema import OP_COMMIT, OP_DELETE, OP_EVICT, OP_INVALIDATE, OP_PERSIST, OP_RECOVER
from kvreplay.violation_log import flag

KEY_VIOLATIONS = (
    ("key_changed", "content_key differs from the object's first event"),
    ("key_live_twice", "a copy begins where another live object has the same content_key (tier, scope, kind)"),
)

_GOLD = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xFF51AFD7ED558CCD)
EMPTY = -1  # TD of an unused slot


class KeyRows(NamedTuple):
    """One batch as the key checks read it (read-only)."""

    row0: int  # global trace row of the batch's row 0
    op: np.ndarray  # int8[n]
    oi: np.ndarray  # int64[n]     dense object index (validate.IdIndex.objects)
    tier: np.ndarray  # int8[n]
    kind: np.ndarray  # int8[n]
    scope: np.ndarray  # int32[n]
    key: np.ndarray  # uint64[n]   content_key


class KeyState(NamedTuple):
    """Carried across batches (changed in place). O objects, M table slots (a power of two)."""

    okey: np.ndarray  # uint64[O]  each object's key (from its first event)
    oseen: np.ndarray  # uint8[O]  1 once the object's first event is seen
    tk: np.ndarray  # uint64[M]    table: key
    td: np.ndarray  # int64[M]     table: place (tier + 8 * (kind + 16 * scope)); EMPTY: unused slot
    th: np.ndarray  # int64[M]     table: object whose copy began there last (0: none live)
    used: np.ndarray  # int64[1]   slots in use


def new_state(objects: int, slots: int = 1 << 12) -> KeyState:
    m = 1 << max(4, int(slots - 1).bit_length())
    return KeyState(okey=np.zeros(max(objects, 1), np.uint64), oseen=np.zeros(max(objects, 1), np.uint8),
                    tk=np.zeros(m, np.uint64), td=np.full(m, EMPTY, np.int64), th=np.zeros(m, np.int64),
                    used=np.zeros(1, np.int64))


def ensure(st: KeyState, objects: int, rows: int) -> KeyState:
    """A state with room for ``objects`` objects and ``rows`` more rows (each inserts at most one slot)."""
    okey, oseen = st.okey, st.oseen
    if objects > len(okey):
        n = max(objects, 2 * len(okey))
        okey = np.concatenate([okey, np.zeros(n - len(okey), np.uint64)])
        oseen = np.concatenate([oseen, np.zeros(n - len(oseen), np.uint8)])
    tk, td, th = st.tk, st.td, st.th
    need = 2 * (int(st.used[0]) + rows)
    if need > len(tk):
        m = 1 << int(need - 1).bit_length()
        tk, td, th = np.zeros(m, np.uint64), np.full(m, EMPTY, np.int64), np.zeros(m, np.int64)
        _rehash(st.tk, st.td, st.th, tk, td, th)
    return KeyState(okey=okey, oseen=oseen, tk=tk, td=td, th=th, used=st.used)


@njit(inline="always")
def _slot(tk, td, key, place, insert):
    """The slot of (place, key): found, or (insert) the empty slot it goes to, or -1."""
    mask = np.uint64(tk.shape[0] - 1)
    h = (key ^ (np.uint64(place) * _GOLD)) * _C1
    h ^= h >> np.uint64(29)
    i = np.int64(h & mask)
    while True:
        if td[i] == EMPTY:
            return i if insert else -1
        if td[i] == place and tk[i] == key:
            return i
        i = np.int64((np.uint64(i) + np.uint64(1)) & mask)


@njit
def _rehash(tk0, td0, th0, tk, td, th):
    for j in range(tk0.shape[0]):
        if td0[j] != EMPTY:
            i = _slot(tk, td, tk0[j], td0[j], True)
            tk[i], td[i], th[i] = tk0[j], td0[j], th0[j]


@njit(nogil=True)
def check_keys(rows, st, vrow, vcode, vcount, code_changed, code_twice, nv):
    """Check ``rows`` (KeyRows) in order against ``st`` (KeyState); violations recorded by
    violation_log.flag, as the row checks record theirs (``nv``: the index of the all-violations count)."""
    op, oi, tier, kind, scope, key = rows.op, rows.oi, rows.tier, rows.kind, rows.scope, rows.key
    okey, oseen, tk, td, th, used = st.okey, st.oseen, st.tk, st.td, st.th, st.used
    for i in range(op.shape[0]):
        o = oi[i]
        if o <= 0:
            continue  # obj_id 0: flagged by the row checks
        k = key[i]
        if oseen[o] == 0:
            oseen[o] = 1
            okey[o] = k
        elif okey[o] != k:
            flag(vrow, vcode, vcount, rows.row0 + i, code_changed, nv)
            continue
        if k == 0 or tier[i] < 0 or tier[i] >= 8 or kind[i] < 0 or kind[i] >= 16 or scope[i] < 0:
            continue  # no key, or an enum out of range (flagged by the row checks)
        c = op[i]
        place = np.int64(tier[i]) + 8 * (np.int64(kind[i]) + 16 * np.int64(scope[i]))
        if c == OP_COMMIT or c == OP_PERSIST or c == OP_RECOVER:
            j = _slot(tk, td, k, place, True)
            if td[j] == EMPTY:
                td[j] = place
                tk[j] = k
                used[0] += 1
            elif th[j] != 0 and th[j] != o:
                flag(vrow, vcode, vcount, rows.row0 + i, code_twice, nv)
            th[j] = o
        elif c == OP_EVICT or c == OP_DELETE or c == OP_INVALIDATE:
            j = _slot(tk, td, k, place, False)
            if j >= 0 and th[j] == o:
                th[j] = 0
