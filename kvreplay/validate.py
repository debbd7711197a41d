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

* (v2) an object's ``content_key`` never changes, and no two objects with one key are live at once in one
  tier, scope and kind (:mod:`kvreplay.keycheck`, which says why that is the place); a v1 trace has no keys,
  so the report says so (``content_keys`` false) and these two are not checked

At the end, objects created but never committed are reported as a count.

The same kernel, without the checks that need parent_id/ntokens/request_id/session_id and stopping at
the first violation, runs before every replay and study (:class:`RowCheck`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import numpy as np
from devicemodels.jit import njit

from kvreplay import keycheck
from kvreplay.violation_log import flag
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
    EventBatch,
    TraceReader,
)
from kvbed.core.errors import KvbedError

VIOLATIONS = (
    ("time_backwards", "ts_ns is smaller than the previous row's"),
    ("bad_enum", "op, tier or kind code out of range"),
    ("bad_size", "nbytes must be > 0 and below 2 TiB"),
    ("bad_tokens", "ntokens must be >= 0"),
    ("zero_id", "obj_id 0 is reserved (it means 'no parent')"),
    ("bad_ids", "request_id/session_id below -1"),
    ("use_after_delete", "event on an object after its delete"),
    ("id_reused", "create/transform of an id that already exists"),
    ("transform_parent_dead", "transform from a parent that is not live"),
    ("commit_without_create", "commit without a create of the object in this tier"),
    ("unknown_object", "event on an object never created or transformed"),
    ("already_present", "persist/recover into a tier that already holds a copy"),
    ("not_present", "load/hit/evict/invalidate/delete in a tier without a copy (never persisted, or already removed)"),
    ("delete_incomplete", "event between the deletes of an object's copies"),
    ("size_changed", "nbytes differs from the object's first event"),
    ("kind_changed", "kind differs from the object's first event"),
    ("parent_unknown", "parent_id never appeared before as an object"),
    ("parent_self", "parent_id equals obj_id"),
    *keycheck.KEY_VIOLATIONS,
)
V = {name: i for i, (name, _) in enumerate(VIOLATIONS)}
NV = len(VIOLATIONS)
(V_TIME, V_ENUM, V_SIZE, V_TOKENS, V_ZERO, V_IDS, V_AFTER_DELETE, V_REUSED, V_TPARENT, V_COMMIT, V_UNKNOWN,
 V_PRESENT, V_NOT_PRESENT, V_DEL_COPIES, V_SIZE_CHANGED, V_KIND_CHANGED, V_PARENT_UNKNOWN, V_PARENT_SELF,
 V_KEY_CHANGED, V_KEY_TWICE) = range(NV)

ST_NEW, ST_LIVE, ST_DELETED, ST_DELETING = 0, 1, 2, 3
# An object's state is one int64 word, 8 bytes per object and one memory access per event (a replay runs
# the row checks before every run, so their cost counts): bits 0..7 = copy present in tier t; bits 8..15 =
# create without commit in tier t; bits 16..17 = ST_*; bits 18..21 = kind of its first event; bits 22..62 =
# its size (hence sizes below 2 TiB).
PRODUCING_SHIFT = 8
STATE_SHIFT = 16
KIND_SHIFT = 18
SIZE_SHIFT = 22
MAX_NBYTES = 1 << (63 - SIZE_SHIFT)
COPY_MASK = 0xFF
COPIES_MASK = 0xFFFF  # present and producing
assert len(KINDS) <= 16 and len(TIERS) <= 8


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
            return ids.view(np.int64)  # every id is below self.size, so the same value (no copy)
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


class CheckRows(NamedTuple):
    """One batch of n trace rows as the checker reads them (read-only). ``kind`` is empty (int8[0]) when the
    kind column is not read; ``pi``..``sess`` are empty (int64[0]) without the full checks."""

    row0: int  # global trace row of the batch's row 0
    ts: np.ndarray  # int64[n]     ts_ns
    op: np.ndarray  # int8[n]      op code (schema.OPS; checked)
    oi: np.ndarray  # int64[n]     dense object index of obj_id (IdIndex.objects)
    tier: np.ndarray  # int8[n]    tier code (schema.TIERS; checked)
    kind: np.ndarray  # int8[n]    kind code (schema.KINDS; checked)
    nbytes: np.ndarray  # int64[n]
    pi: np.ndarray  # int64[n]     dense index of parent_id: 0 none, -1 never seen (IdIndex.parents)
    ntok: np.ndarray  # int32[n]   ntokens
    req: np.ndarray  # int64[n]    request_id
    sess: np.ndarray  # int64[n]   session_id


class CheckState(NamedTuple):
    """What the checker carries across batches (changed in place). O objects, R violations kept."""

    obj: np.ndarray  # int64[O]      per object its state word (bits: see PRODUCING_SHIFT .. SIZE_SHIFT)
    last_ts: np.ndarray  # int64[1]  ts_ns of the last row checked
    vrow: np.ndarray  # int64[R]     row of the first R violations
    vcode: np.ndarray  # int64[R]    their code (V_*)
    vcount: np.ndarray  # int64[NV+1] violations per code; [NV]: all of them


class CheckConfig(NamedTuple):
    """Which checks run (scalars)."""

    with_kind: bool  # ``kind`` is read (else every object counts as kind 0)
    full: bool  # also the checks that need parent_id, ntokens, request_id and session_id
    stop_first: bool  # return at the first violation (vcount[NV] counts them all)
    nops: int  # len(OPS): op codes below it are known
    ntiers: int  # len(TIERS)
    nkinds: int  # len(KINDS)


@njit(nogil=True)
def _check(rows, st, cfg):
    """Check events ``rows`` (CheckRows) in order against the objects' state ``st.obj`` (CheckState), the
    checks that ``cfg`` (CheckConfig) selects."""
    ts, op, oi, tier, kind, nbytes = rows.ts, rows.op, rows.oi, rows.tier, rows.kind, rows.nbytes
    pi, ntok, req, sess, row0 = rows.pi, rows.ntok, rows.req, rows.sess, rows.row0
    obj, last_ts, vrow, vcode, vcount = st.obj, st.last_ts, st.vrow, st.vcode, st.vcount
    with_kind, full, stop_first = cfg.with_kind, cfg.full, cfg.stop_first
    nops, ntiers, nkinds = cfg.nops, cfg.ntiers, cfg.nkinds
    n = ts.shape[0]
    lt = last_ts[0]
    nf = 0  # violations flagged by this call
    for i in range(n):
        if stop_first and nf > 0:
            break
        row = row0 + i
        if ts[i] < lt:
            nf += flag(vrow, vcode, vcount, row, V_TIME, NV)
        lt = ts[i]
        o = oi[i]
        t = tier[i]
        c = op[i]
        k = kind[i] if with_kind else 0
        if c < 0 or c >= nops or t < 0 or t >= ntiers or k < 0 or k >= nkinds:
            nf += flag(vrow, vcode, vcount, row, V_ENUM, NV)
            continue
        nb = nbytes[i]
        if nb <= 0 or nb >= MAX_NBYTES:
            nf += flag(vrow, vcode, vcount, row, V_SIZE, NV)
            nb &= MAX_NBYTES - 1  # (stored in its bits: the size check below still sees a change)
        if full:
            if ntok[i] < 0:
                nf += flag(vrow, vcode, vcount, row, V_TOKENS, NV)
            if req[i] < -1 or sess[i] < -1:
                nf += flag(vrow, vcode, vcount, row, V_IDS, NV)
        if o == 0:
            nf += flag(vrow, vcode, vcount, row, V_ZERO, NV)
            continue
        w = obj[o]
        st = (w >> STATE_SHIFT) & 3
        bit = np.int64(1) << t
        pbit = np.int64(1) << (t + PRODUCING_SHIFT)
        if st == ST_DELETING:
            if c == OP_DELETE and (w & (bit | pbit)):
                w &= ~(bit | pbit)
                if (w & COPIES_MASK) == 0:
                    w = _with_state(w, ST_DELETED)
                obj[o] = w
                continue
            nf += flag(vrow, vcode, vcount, row, V_DEL_COPIES, NV)
            obj[o] = _with_state(w & ~COPIES_MASK, ST_DELETED)
            continue
        if st == ST_DELETED:
            nf += flag(vrow, vcode, vcount, row, V_AFTER_DELETE, NV)
            continue
        if st == ST_NEW:
            if c != OP_CREATE and c != OP_TRANSFORM:
                nf += flag(vrow, vcode, vcount, row, V_UNKNOWN, NV)
                continue
            if full:
                p = pi[i]
                if p == o and p != 0:
                    nf += flag(vrow, vcode, vcount, row, V_PARENT_SELF, NV)
                elif p < 0 or (p > 0 and (obj[p] >> STATE_SHIFT) & 3 == ST_NEW):
                    nf += flag(vrow, vcode, vcount, row, V_PARENT_UNKNOWN, NV)
                elif c == OP_TRANSFORM and (p == 0 or (obj[p] >> STATE_SHIFT) & 3 != ST_LIVE):
                    nf += flag(vrow, vcode, vcount, row, V_TPARENT, NV)
            w = (np.int64(ST_LIVE) << STATE_SHIFT) | (np.int64(k) << KIND_SHIFT) | (np.int64(nb) << SIZE_SHIFT)
            if c == OP_CREATE:
                w |= pbit
            obj[o] = w
            continue
        # live object (a reused id first: its size and kind differing follow from it)
        reused = c == OP_CREATE or c == OP_TRANSFORM
        if reused:
            nf += flag(vrow, vcode, vcount, row, V_REUSED, NV)
        if nb != w >> SIZE_SHIFT:
            nf += flag(vrow, vcode, vcount, row, V_SIZE_CHANGED, NV)
        if k != (w >> KIND_SHIFT) & 15:
            nf += flag(vrow, vcode, vcount, row, V_KIND_CHANGED, NV)
        if reused:
            pass
        elif c == OP_COMMIT:
            if w & pbit:
                obj[o] = (w & ~pbit) | bit
            else:
                nf += flag(vrow, vcode, vcount, row, V_COMMIT, NV)
        elif c == OP_PERSIST or c == OP_RECOVER:
            if w & (bit | pbit):
                nf += flag(vrow, vcode, vcount, row, V_PRESENT, NV)
            else:
                obj[o] = w | bit
        elif c == OP_LOAD or c == OP_HIT:
            if not (w & bit):
                nf += flag(vrow, vcode, vcount, row, V_NOT_PRESENT, NV)
        elif c == OP_EVICT or c == OP_INVALIDATE or c == OP_DELETE:
            if not (w & (bit | pbit)):
                nf += flag(vrow, vcode, vcount, row, V_NOT_PRESENT, NV)
            w &= ~(bit | pbit)
            if c == OP_DELETE:
                w = _with_state(w, ST_DELETED if (w & COPIES_MASK) == 0 else ST_DELETING)
            obj[o] = w
    last_ts[0] = lt


@njit(inline="always")
def _with_state(w, st):
    return (w & ~(np.int64(3) << STATE_SHIFT)) | (np.int64(st) << STATE_SHIFT)


@njit
def _never_committed(obj):
    n = 0
    mask = np.int64(0xFF) << PRODUCING_SHIFT
    for o in range(obj.shape[0]):
        if (obj[o] >> STATE_SHIFT) & 3 == ST_LIVE and (obj[o] & mask) != 0:
            n += 1
    return n


@njit
def _half_deleted(obj):
    n = 0
    for o in range(obj.shape[0]):
        if (obj[o] >> STATE_SHIFT) & 3 == ST_DELETING:
            n += 1
    return n


@njit
def _live_copies(obj):
    n = 0
    for o in range(obj.shape[0]):
        if (obj[o] >> STATE_SHIFT) & 3 == ST_LIVE:
            c = obj[o] & COPY_MASK
            while c:
                n += c & 1
                c >>= 1
    return n


@njit
def _objects_seen(obj):
    n = 0
    for o in range(obj.shape[0]):
        if (obj[o] >> STATE_SHIFT) & 3 != ST_NEW:
            n += 1
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
    content_keys: bool = True  # False: a v1 trace (no content_key column), the key invariants not checked

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
            "content_keys": self.content_keys,
        }


class _Objects:
    """The per-object state words, grown as a sparse id table grows."""

    def __init__(self, n: int) -> None:
        self.obj = np.zeros(max(n, 1), np.int64)

    def ensure(self, n: int) -> None:
        if n > len(self.obj):
            new = np.zeros(max(n, 2 * len(self.obj)), np.int64)
            new[: len(self.obj)] = self.obj
            self.obj = new


def _violation(b: EventBatch, i: int, row: int, code: int) -> Violation:
    name, message = VIOLATIONS[code]
    op, tier = int(b["op"][i]), int(b["tier"][i])
    return Violation(row=row, code=name, message=message,
                     op=OPS[op] if 0 <= op < len(OPS) else str(op),
                     tier=TIERS[tier] if 0 <= tier < len(TIERS) else str(tier),
                     obj_id=int(b["obj_id"][i]), ts_ns=int(b["ts_ns"][i]))


def validate_trace(
    path: str | os.PathLike,
    *,
    max_report: int = 20,
    progress: Callable[[int, int], None] | None = None,
) -> ValidationReport:
    """Stream the trace through the checker; raises KvbedError only if the file is unreadable."""
    reader = TraceReader(path)
    ids = IdIndex(reader)
    g = _Objects(ids.size)
    last_ts = np.array([np.iinfo(np.int64).min], np.int64)
    vrow = np.zeros(max_report, np.int64)
    vcode = np.zeros(max_report, np.int64)
    vcount = np.zeros(NV + 1, np.int64)
    cfg = CheckConfig(with_kind=True, full=True, stop_first=False, nops=len(OPS), ntiers=len(TIERS),
                      nkinds=len(KINDS))
    row0 = 0
    first: list[Violation] = []
    keys = keycheck.new_state(ids.size) if reader.has_content_key else None
    for rg, b in enumerate(reader.iter_batches()):
        oi = ids.objects(b["obj_id"])
        pi = ids.parents(b["parent_id"])
        g.ensure(ids.size)
        before = int(vcount[NV])
        rows = CheckRows(row0=row0, ts=b["ts_ns"], op=b["op"], oi=oi, tier=b["tier"], kind=b["kind"],
                         nbytes=b["nbytes"], pi=pi, ntok=b["ntokens"], req=b["request_id"], sess=b["session_id"])
        _check(rows, CheckState(obj=g.obj, last_ts=last_ts, vrow=vrow, vcode=vcode, vcount=vcount), cfg)
        if keys is not None:
            keys = keycheck.ensure(keys, ids.size, b.n)
            krows = keycheck.KeyRows(row0=row0, op=b["op"], oi=oi, tier=b["tier"], kind=b["kind"],
                                     scope=b["scope"], key=b["content_key"])
            keycheck.check_keys(krows, keys, vrow, vcode, vcount, V_KEY_CHANGED, V_KEY_TWICE, NV)
        after = min(int(vcount[NV]), max_report)
        for j in range(min(before, max_report), after):
            first.append(_violation(b, int(vrow[j]) - row0, int(vrow[j]), int(vcode[j])))
        first.sort(key=lambda v: v.row)  # the key checks flag after the row checks of the same batch
        row0 += b.n
        if progress is not None:
            progress(rg + 1, reader.num_row_groups)
    counts = {VIOLATIONS[i][0]: int(vcount[i]) for i in range(NV) if vcount[i]}
    half = int(_half_deleted(g.obj))
    if half:
        counts["delete_incomplete"] = counts.get("delete_incomplete", 0) + half
    return ValidationReport(
        path=str(path),
        rows=row0,
        ok=not counts,
        counts=counts,
        first=first,
        objects=int(_objects_seen(g.obj)),
        live_copies_at_end=int(_live_copies(g.obj)),
        never_committed=int(_never_committed(g.obj)),
        half_deleted=half,
        content_keys=reader.has_content_key,
    )


# ------------------------------------------------------------------------------ before a replay

#: what the row checks read: the columns every replay reads, and ``kind`` (:class:`RowCheck`)
CHECK_COLUMNS = ("ts_ns", "op", "obj_id", "tier", "nbytes", "kind")
#: what the row checks read besides with ``key=True``
KEY_COLUMNS = ("kind", "scope", "content_key")
NOT_CHECKED = ("bad_tokens", "bad_ids", "transform_parent_dead", "parent_unknown", "parent_self")


class RowCheck:
    """The checks of :func:`validate_trace` that need only :data:`CHECK_COLUMNS`, refusing the trace at the
    first bad row: what runs before every replay and study, so a trace a replay would misread (rows out of
    time order, an event on an object that does not exist, a reused id, a size or kind that changes, a copy
    loaded from a tier that does not hold it, ...) is never replayed into a figure.

    Left to ``kvbed trace validate``: the checks needing parent_id, ntokens, request_id or session_id
    (:data:`NOT_CHECKED`; more columns to read, no figure of a replay depends on them) and what is judged at
    the end of the trace (objects never committed, deletes left half done: a trace cut at any row, e.g. a
    prefix, is still consistent). ``kind=False``: the kind column is not read and a kind that changes is not
    seen, for a run that does not read it either (a hint policy other than type/predicted, no fault model):
    reading it costs about a third of the checks. Feed the batches in order, each holding
    :attr:`columns`.
    """

    def __init__(self, reader: TraceReader, *, kind: bool = True, key: bool = False):
        self.kind = kind
        self.columns = CHECK_COLUMNS if kind else tuple(c for c in CHECK_COLUMNS if c != "kind")
        # key=True: also the content-key invariants (kvreplay.keycheck), for a run that reads the keys; it needs
        # a v2 trace and reads scope and content_key besides (off by default: no replay figure depends on keys)
        self.key = key
        self._keys = None
        if key:
            reader.require_content_key("a run keyed by content")
            self.columns = (*self.columns, *(c for c in KEY_COLUMNS if c not in self.columns))
        self.where = str(reader.path)
        self.ids = IdIndex(reader)
        self.objects = _Objects(self.ids.size)
        self.last_ts = np.array([np.iinfo(np.int64).min], np.int64)
        self.vrow = np.zeros(1, np.int64)
        self.vcode = np.zeros(1, np.int64)
        self.vcount = np.zeros(NV + 1, np.int64)
        self.rows = 0
        self._none = np.zeros(0, np.int64)
        self._no_kind = np.zeros(0, np.int8)
        self._cfg = CheckConfig(with_kind=kind, full=False, stop_first=True, nops=len(OPS), ntiers=len(TIERS),
                                nkinds=len(KINDS))

    def feed(self, b: EventBatch) -> None:
        """Check one batch (the rows after the last one fed); KvbedError names the first bad row."""
        oi = self.ids.objects(b["obj_id"])
        self.objects.ensure(self.ids.size)
        none = self._none
        kind = b["kind"] if self.kind else self._no_kind
        rows = CheckRows(row0=self.rows, ts=b["ts_ns"], op=b["op"], oi=oi, tier=b["tier"], kind=kind,
                         nbytes=b["nbytes"], pi=none, ntok=none, req=none, sess=none)
        # the state tuple is made per batch: ensure() may have given the objects a new array
        st = CheckState(obj=self.objects.obj, last_ts=self.last_ts, vrow=self.vrow, vcode=self.vcode,
                        vcount=self.vcount)
        _check(rows, st, self._cfg)
        if self.key and not self.vcount[NV]:
            self._keys = keycheck.ensure(self._keys or keycheck.new_state(self.ids.size), self.ids.size, b.n)
            krows = keycheck.KeyRows(row0=self.rows, op=b["op"], oi=oi, tier=b["tier"], kind=b["kind"],
                                     scope=b["scope"], key=b["content_key"])
            keycheck.check_keys(krows, self._keys, self.vrow, self.vcode, self.vcount, V_KEY_CHANGED, V_KEY_TWICE, NV)
        if self.vcount[NV]:
            v = _violation(b, int(self.vrow[0]) - self.rows, int(self.vrow[0]), int(self.vcode[0]))
            order = ""
            if v.code == "time_backwards":
                order = ": rows out of time order (`kvbed trace sort` writes a copy in time order)"
            else:  # rows out of order make every other check fail first (a reversed trace starts with a delete)
                back = np.flatnonzero(np.diff(b["ts_ns"]) < 0)
                if len(back):
                    order = (f"; rows out of time order from row {self.rows + int(back[0]) + 1} (`kvbed trace sort` "
                             "writes a copy in time order)")
            raise KvbedError(f"row {v.row}: {v.message} ({v.op} in {v.tier}, obj_id {v.obj_id}, ts_ns {v.ts_ns})"
                             f"{order}: not replayed (`kvbed trace validate` lists every violation)", where=self.where)
        self.rows += b.n

    def checked(self, batches: Iterable[EventBatch]) -> Iterator[EventBatch]:
        """The batches, each checked before it is passed on."""
        for b in batches:
            self.feed(b)
            yield b


def check_trace(path: str | os.PathLike) -> int:
    """One pass of :class:`RowCheck` over the trace (where no replay pass can carry it); returns its rows."""
    reader = TraceReader(path)
    check = RowCheck(reader)
    for b in reader.iter_batches(CHECK_COLUMNS):
        check.feed(b)
    return check.rows
