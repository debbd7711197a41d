"""``kvbed trace validate``: check every invariant of a lifecycle trace, streaming row groups.

Invariants (violation codes below), checked per event by one numba kernel whose
per-object state survives across row groups:

* time never goes backwards; enum codes known; ``nbytes > 0``; ``ntokens >= 0``;
  ``obj_id != 0``; ids -1 or more for request/session
* an object's size and kind never change; its parent (if any) appeared before it
  and is not itself
* ``create`` and ``transform`` introduce a new id (ids are never reused);
  ``transform``'s parent is live; ``commit`` follows a ``create`` in that tier
* ``persist``/``recover`` need a live object and no copy already in that tier
* ``load``/``hit`` need a copy in that tier: persisted (or committed) before it
  is loaded, and not evicted/deleted/invalidated since
* ``evict``/``invalidate``/``delete`` remove an existing copy; ``delete`` ends the
  object everywhere: one ``delete`` per tier that holds a copy, with nothing in
  between; after the first ``delete`` only the deletes of its remaining copies may
  follow (anything else is use after delete), and a deleted object must not keep
  copies at the end of the trace

At the end, objects created but never committed are reported as a count.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from devicemodels.jit import njit

from kvreplay.schema import (
    KINDS,
    OP_COMMIT,
    OP_CREATE,
    OP_DELETE,
    OP_EVICT,
    OP_HIT,
    OP_INVALIDATE,
    OP_LOAD,
    OP_PERSIST,
    OP_RECOVER,
    OP_TRANSFORM,
    OPS,
    TIERS,
    TraceReader,
)
from testbed.core.errors import KvbedError

VIOLATIONS = (
    ("time_backwards", "ts_ns is smaller than the previous row's"),
    ("bad_enum", "op, tier or kind code out of range"),
    ("bad_size", "nbytes must be > 0"),
    ("bad_tokens", "ntokens must be >= 0"),
    ("zero_id", "obj_id 0 is reserved (it means 'no parent')"),
    ("bad_ids", "request_id/session_id below -1"),
    ("use_after_delete", "event on an object after its delete"),
    ("id_reused", "create/transform of an id that already exists"),
    ("transform_parent_dead", "transform from a parent that is not live"),
    ("commit_without_create", "commit without a create of the object in this tier"),
    ("unknown_object", "persist/recover/load/hit of an object never created or transformed"),
    ("already_present", "persist/recover into a tier that already holds a copy"),
    ("not_present", "load/hit/evict/invalidate/delete in a tier without a copy (never persisted, or already removed)"),
    ("delete_incomplete", "event between the deletes of an object's copies"),
    ("size_changed", "nbytes differs from the object's first event"),
    ("kind_changed", "kind differs from the object's first event"),
    ("parent_unknown", "parent_id never appeared before as an object"),
    ("parent_self", "parent_id equals obj_id"),
)
V = {name: i for i, (name, _) in enumerate(VIOLATIONS)}
NV = len(VIOLATIONS)
(V_TIME, V_ENUM, V_SIZE, V_TOKENS, V_ZERO, V_IDS, V_AFTER_DELETE, V_REUSED, V_TPARENT, V_COMMIT, V_UNKNOWN,
 V_PRESENT, V_NOT_PRESENT, V_DEL_COPIES, V_SIZE_CHANGED, V_KIND_CHANGED, V_PARENT_UNKNOWN, V_PARENT_SELF) = range(NV)

ST_NEW, ST_LIVE, ST_DELETED, ST_DELETING = 0, 1, 2, 3
PRODUCING_SHIFT = 8  # bits 0..7 = copy present in tier t; bits 8..15 = create without commit in tier t


class IdIndex:
    """obj_id/parent_id -> dense index into per-object state arrays.

    Traces written by kvbed have dense ids (1..N), used directly; otherwise
    (e.g. engine block hashes) a sorted id table maps them, extended per batch.
    """

    def __init__(self, reader: TraceReader):
        max_id = 0
        md = reader._pf.metadata
        col = reader._pf.schema_arrow.get_field_index("obj_id")
        stats_ok = True
        for rg in range(md.num_row_groups):
            st = md.row_group(rg).column(col).statistics
            if st is None or not st.has_min_max:
                stats_ok = False
                break
            max_id = max(max_id, int(st.max))
        self.dense = stats_ok and max_id <= max(4 * reader.num_rows, 1 << 20)
        self.size = max_id + 1 if self.dense else 1
        self._where = str(reader.path)
        self._ids = np.zeros(0, np.uint64)  # sparse: sorted known ids
        self._idx = np.zeros(0, np.int64)  # their dense index

    def objects(self, ids: np.ndarray) -> np.ndarray:
        """Index of every obj_id (new ids get new indices)."""
        if self.dense:
            # the state arrays are sized from the row-group statistics and the kernels do no bounds
            # check: a file whose statistics understate its ids must be refused, not indexed past
            if len(ids) and int(ids.max()) >= self.size:
                raise KvbedError(f"obj_id {int(ids.max())} exceeds the maximum {self.size - 1} its Parquet "
                                 "statistics state (statistics written wrongly)", where=self._where)
            return ids.astype(np.int64)
        u = np.unique(ids)
        pos = np.searchsorted(self._ids, u)
        known = (pos < len(self._ids)) & (self._ids[np.minimum(pos, len(self._ids) - 1)] == u) if len(self._ids) else np.zeros(len(u), bool)
        new = u[~known]
        if len(new):
            new_idx = np.arange(self.size, self.size + len(new), dtype=np.int64)
            self.size += len(new)
            ids_all = np.concatenate([self._ids, new])
            idx_all = np.concatenate([self._idx, new_idx])
            order = np.argsort(ids_all, kind="stable")
            self._ids, self._idx = ids_all[order], idx_all[order]
        return self._lookup(ids)

    def parents(self, ids: np.ndarray) -> np.ndarray:
        """Index of every parent_id: 0 for none, -1 for an id never seen as an object."""
        if self.dense:
            out = ids.astype(np.int64)
            out[out >= self.size] = -1
            return out
        out = self._lookup(ids)
        out[ids == 0] = 0
        return out

    def _lookup(self, ids: np.ndarray) -> np.ndarray:
        if not len(self._ids):
            return np.full(len(ids), -1, np.int64)
        pos = np.minimum(np.searchsorted(self._ids, ids), len(self._ids) - 1)
        hit = self._ids[pos] == ids
        return np.where(hit, self._idx[pos], -1)


@njit
def _check(ts, op, oi, pi, tier, kind, nbytes, ntok, req, sess, row0,
           state, copies, size0, kind0, last_ts, vrow, vcode, vcount, nops, ntiers, nkinds):
    n = ts.shape[0]
    for i in range(n):
        row = row0 + i
        if ts[i] < last_ts[0]:
            _flag(vrow, vcode, vcount, row, V_TIME)
        last_ts[0] = ts[i]
        o = oi[i]
        p = pi[i]
        t = tier[i]
        c = op[i]
        if c < 0 or c >= nops or t < 0 or t >= ntiers or kind[i] < 0 or kind[i] >= nkinds:
            _flag(vrow, vcode, vcount, row, V_ENUM)
            continue
        if nbytes[i] <= 0:
            _flag(vrow, vcode, vcount, row, V_SIZE)
        if ntok[i] < 0:
            _flag(vrow, vcode, vcount, row, V_TOKENS)
        if req[i] < -1 or sess[i] < -1:
            _flag(vrow, vcode, vcount, row, V_IDS)
        if o == 0:
            _flag(vrow, vcode, vcount, row, V_ZERO)
            continue
        st = state[o]
        bit = np.int64(1) << t
        pbit = np.int64(1) << (t + PRODUCING_SHIFT)
        if st == ST_DELETING:
            if c == OP_DELETE and (copies[o] & (bit | pbit)):
                copies[o] &= ~(bit | pbit)
                if copies[o] == 0:
                    state[o] = ST_DELETED
                continue
            _flag(vrow, vcode, vcount, row, V_DEL_COPIES)
            state[o] = ST_DELETED
            copies[o] = 0
            continue
        if st == ST_DELETED:
            _flag(vrow, vcode, vcount, row, V_AFTER_DELETE)
            continue
        if st == ST_NEW:
            if c != OP_CREATE and c != OP_TRANSFORM:
                _flag(vrow, vcode, vcount, row, V_UNKNOWN)
                continue
            if p == o and p != 0:
                _flag(vrow, vcode, vcount, row, V_PARENT_SELF)
            elif p < 0 or (p > 0 and state[p] == ST_NEW):
                _flag(vrow, vcode, vcount, row, V_PARENT_UNKNOWN)
            elif c == OP_TRANSFORM and (p == 0 or state[p] != ST_LIVE):
                _flag(vrow, vcode, vcount, row, V_TPARENT)
            state[o] = ST_LIVE
            size0[o] = nbytes[i]
            kind0[o] = kind[i]
            if c == OP_CREATE:
                copies[o] = pbit
            continue
        # live object
        if nbytes[i] != size0[o]:
            _flag(vrow, vcode, vcount, row, V_SIZE_CHANGED)
        if kind[i] != kind0[o]:
            _flag(vrow, vcode, vcount, row, V_KIND_CHANGED)
        cp = copies[o]
        if c == OP_CREATE or c == OP_TRANSFORM:
            _flag(vrow, vcode, vcount, row, V_REUSED)
        elif c == OP_COMMIT:
            if cp & pbit:
                copies[o] = (cp & ~pbit) | bit
            else:
                _flag(vrow, vcode, vcount, row, V_COMMIT)
        elif c == OP_PERSIST or c == OP_RECOVER:
            if cp & (bit | pbit):
                _flag(vrow, vcode, vcount, row, V_PRESENT)
            else:
                copies[o] = cp | bit
        elif c == OP_LOAD or c == OP_HIT:
            if not (cp & bit):
                _flag(vrow, vcode, vcount, row, V_NOT_PRESENT)
        elif c == OP_EVICT or c == OP_INVALIDATE or c == OP_DELETE:
            if not (cp & (bit | pbit)):
                _flag(vrow, vcode, vcount, row, V_NOT_PRESENT)
            cp = cp & ~(bit | pbit)
            copies[o] = cp
            if c == OP_DELETE:
                state[o] = ST_DELETED if cp == 0 else ST_DELETING
    return 0


@njit(inline="always")
def _flag(vrow, vcode, vcount, row, code):
    n = vcount.sum()
    if n < vrow.shape[0]:
        vrow[n] = row
        vcode[n] = code
    vcount[code] += 1


@njit
def _never_committed(state, copies):
    n = 0
    mask = np.int64(0xFF) << PRODUCING_SHIFT
    for o in range(state.shape[0]):
        if state[o] == ST_LIVE and (copies[o] & mask) != 0:
            n += 1
    return n


@njit
def _half_deleted(state):
    n = 0
    for o in range(state.shape[0]):
        if state[o] == ST_DELETING:
            n += 1
    return n


@njit
def _live_copies(state, copies):
    n = 0
    for o in range(state.shape[0]):
        if state[o] == ST_LIVE:
            c = copies[o] & 0xFF
            while c:
                n += c & 1
                c >>= 1
    return n


@dataclass
class Violation:
    row: int
    code: str
    message: str
    op: str
    tier: str
    obj_id: int
    ts_ns: int


@dataclass
class ValidationReport:
    path: str
    rows: int
    ok: bool
    counts: dict[str, int] = field(default_factory=dict)
    first: list[Violation] = field(default_factory=list)
    objects: int = 0
    live_copies_at_end: int = 0
    never_committed: int = 0
    half_deleted: int = 0  # deleted in some tiers, copies left in others at the end

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "rows": self.rows,
            "ok": self.ok,
            "violations": self.counts,
            "first_violations": [v.__dict__ for v in self.first],
            "objects": self.objects,
            "live_copies_at_end": self.live_copies_at_end,
            "never_committed": self.never_committed,
            "half_deleted": self.half_deleted,
        }


class _Grow:
    def __init__(self) -> None:
        self.state = np.zeros(0, np.int8)
        self.copies = np.zeros(0, np.int64)
        self.size0 = np.zeros(0, np.int64)
        self.kind0 = np.zeros(0, np.int8)

    def ensure(self, n: int) -> None:
        if n <= len(self.state):
            return
        m = max(n, 2 * len(self.state), 1024)
        for name in ("state", "copies", "size0", "kind0"):
            old = getattr(self, name)
            new = np.zeros(m, old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)


def validate_trace(
    path: str | os.PathLike,
    *,
    max_report: int = 20,
    progress: Callable[[int, int], None] | None = None,
) -> ValidationReport:
    """Stream the trace through the checker; raises KvbedError only if the file is unreadable."""
    reader = TraceReader(path)
    ids = IdIndex(reader)
    g = _Grow()
    g.ensure(ids.size)
    last_ts = np.array([np.iinfo(np.int64).min], np.int64)
    vrow = np.zeros(max_report, np.int64)
    vcode = np.zeros(max_report, np.int64)
    vcount = np.zeros(NV, np.int64)
    row0 = 0
    first: list[Violation] = []
    for rg, b in enumerate(reader.iter_batches()):
        oi = ids.objects(b["obj_id"])
        pi = ids.parents(b["parent_id"])
        g.ensure(ids.size)
        before = int(vcount.sum())
        _check(b["ts_ns"], b["op"].astype(np.int64), oi, pi, b["tier"].astype(np.int64), b["kind"].astype(np.int64),
               b["nbytes"], b["ntokens"].astype(np.int64), b["request_id"], b["session_id"], row0,
               g.state, g.copies, g.size0, g.kind0, last_ts, vrow, vcode, vcount, len(OPS), len(TIERS), len(KINDS))
        after = min(int(vcount.sum()), max_report)
        for j in range(min(before, max_report), after):
            i = int(vrow[j]) - row0
            code = VIOLATIONS[int(vcode[j])]
            op, tier = int(b["op"][i]), int(b["tier"][i])
            first.append(Violation(
                row=int(vrow[j]), code=code[0], message=code[1],
                op=OPS[op] if 0 <= op < len(OPS) else str(op),
                tier=TIERS[tier] if 0 <= tier < len(TIERS) else str(tier),
                obj_id=int(b["obj_id"][i]), ts_ns=int(b["ts_ns"][i]),
            ))
        row0 += b.n
        if progress is not None:
            progress(rg + 1, reader.num_row_groups)
    counts = {VIOLATIONS[i][0]: int(vcount[i]) for i in range(NV) if vcount[i]}
    half = int(_half_deleted(g.state))
    if half:
        counts["delete_incomplete"] = counts.get("delete_incomplete", 0) + half
    objects = int(np.count_nonzero(g.state))
    return ValidationReport(
        path=str(path),
        rows=row0,
        ok=not counts,
        counts=counts,
        first=first,
        objects=objects,
        live_copies_at_end=int(_live_copies(g.state, g.copies)),
        never_committed=int(_never_committed(g.state, g.copies)),
        half_deleted=half,
    )
