"""The fault model's state (see :mod:`kvreplay.faults.model`) and the operations fault kinds apply to it.

Why NamedTuples of flat arrays (as :mod:`devicemodels.ftl_state` and :mod:`kvreplay.tiers.state`): the
events kernel takes five arguments instead of 48 positional ones, every array is declared once here with
its dtype, shape and meaning, and numba caches kernels that take them. The arrays belong to
:class:`FaultState` (the Python side, which fault kinds act on between kernel calls); none is ever
rebound, so the tuples built once stay valid for the whole pass.

Sizes: ``n`` rows of a trace batch, ``NT`` = len(schema.TIERS) tiers, ``O`` object ids (largest id + 1),
``Sc`` scopes, ``U`` mapping units of the replayed tier's namespace, ``W`` write sequences (the tier's writes
+ 2: sequence 0 means zeros), ``L`` ops in the op log, ``F`` faults, ``Nw`` time-series windows.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from kvreplay import schema as S
from kvreplay.faults.model import K_N, OUTCOMES, S_N, lose_inflight, media_units, torn_and_lost

#: tiers whose copies live in volatile memory (a power loss takes them)
VOLATILE_TIERS = ("gpu", "cpu", "cxl")


class FaultEvents(NamedTuple):
    """One batch of trace rows (read-only in the kernel): the trace's columns, schema dtypes."""

    row0: int  # global trace row of the batch's row 0
    ts: np.ndarray  # int64[n]     ts_ns: trace time (ns)
    op: np.ndarray  # int8[n]      op code (schema.OPS)
    obj: np.ndarray  # uint64[n]   obj_id
    tier: np.ndarray  # int8[n]    tier code (schema.TIERS)
    nbytes: np.ndarray  # int64[n] bytes of the object
    ntokens: np.ndarray  # int32[n] tokens of the object
    scope: np.ndarray  # int32[n]  scope code (the reader's string table)
    kind: np.ndarray  # int8[n]    kind code (schema.KINDS)
    key: np.ndarray  # uint64[n]   content_key (0: none known; every row of a v1 trace)


class FaultConfig(NamedTuple):
    """What configures a pass of the events kernel (read-only in it). The last three change between calls,
    as faults happen (the driver passes ``cfg._replace(...)``)."""

    lut: np.ndarray  # int8[len(OPS), NT] action (layout.actions A_*) of (op, tier) on the replayed tier
    t0: int  # trace time (ns) of the trace's first event: rel = ts - t0
    window_ns: int  # time-series window (trace time, ns)
    dev_tier: int  # tier code of the replayed tier
    page_bytes: int  # bytes of one mapping unit
    header_bytes: int  # the contract's header stored with every object
    checks: int  # the contract's checks (contract.CHECK_* bits)
    seed: int  # the replay's seed (media error draws)
    fault_slot: int  # where outcomes are counted: 0 before any fault, f + 1 after fault f
    media_rate: float  # media error probability per bit read (0.0: none)
    media_from: int  # trace time (ns from t0) from which media errors are drawn


class FaultLog(NamedTuple):
    """The replayed tier's user write and trim ops in trace order (:class:`OpLog`), read-only but ``w`` and
    ``kp`` (filled as the kernel passes their rows)."""

    row: np.ndarray  # int64[L]     trace row of the op's event (non-decreasing)
    op: np.ndarray  # int8[L]       OP_WRITE or OP_TRIM (devicemodels.base)
    lba: np.ndarray  # int64[L]     first mapping unit
    npages: np.ndarray  # int64[L]  mapping units
    arr: np.ndarray  # int64[L]     arrival at the device (device time, ns)
    done: np.ndarray  # int64[L]    completion (device time, ns)
    w: np.ndarray  # int64[L]       write sequence a write op belongs to (0: not yet / a trim)
    kp: np.ndarray  # int64[1]      cursor: the next op not yet passed


class Versions(NamedTuple):
    """The payload: an object's content is a function of (obj_id, version of its scope when computed)."""

    o_ver: np.ndarray  # int64[O]        scope version the object's content was computed at
    scope_ver: np.ndarray  # int64[max(1, Sc)] current version of each scope (version_drift raises it)


class TraceTiers(NamedTuple):
    """Copies in every tier but the replayed one, per (tier, object)."""

    cp_ver: np.ndarray  # int64[NT, O]  version the copy holds (-1: no copy)
    cp_bad: np.ndarray  # int8[NT, O]   1: the copy is torn or corrupt
    cp_ts: np.ndarray  # int64[NT, O]   when it was written (trace time, ns from t0)


class DeviceIndex(NamedTuple):
    """The host-side index of the replayed tier (what faults lose or roll back), per *key slot*: the index is
    keyed by content (``slot``: objects of one content_key, scope and kind share a slot, as a store keyed by
    prefix-chain hash looks them up), or by object id when the trace has no keys (``slot[o] == o``)."""

    slot: np.ndarray  # int64[O]      the key slot of each object: an object id (model.assign_slots; -1: not seen)
    ix_seq: np.ndarray  # int64[O]    per slot: write sequence the entry points at (0: no entry)
    restored: np.ndarray  # int8[O]   per slot: 1: recomputed after a detected/missing load (next loads reuse it)
    true_seq: np.ndarray  # int64[O]  per slot: the entry a fault-free index holds (0: the trace has no copy on
    #                                 the tier); ix_seq != true_seq: a stale entry


class Writes(NamedTuple):
    """Per write sequence (one per user write of an object to the replayed tier; 0: zeros)."""

    obj: np.ndarray  # uint64[W]   object written
    ver: np.ndarray  # int64[W]    its version
    pages: np.ndarray  # int64[W]  mapping units written
    lo: np.ndarray  # int64[W]     its write ops: log entries [lo, hi)
    hi: np.ndarray  # int64[W]
    bad: np.ndarray  # int8[W]     1: an uncorrectable unit (media_error)
    wn: np.ndarray  # int64[1]     cursor: the next write sequence (starts at 1)


class Media(NamedTuple):
    """The replayed tier's content map, per mapping unit."""

    lba_seq: np.ndarray  # int64[max(1, U)]  write sequence whose data the unit holds (0: zeros)
    lba_prev: np.ndarray  # int64[max(1, U)] the one before (what a write that never reached the media leaves)


class FaultCounts(NamedTuple):
    """What the kernel counts (the result's figures)."""

    acc: np.ndarray  # int64[F+1, NT, len(KINDS), len(OUTCOMES), 3] loads per fault slot, tier, kind and
    #                  outcome: objects, bytes, tokens (model.MEASURES)
    tw: np.ndarray  # int64[max(1, Nw), len(OUTCOMES)] loads per time-series window and outcome
    cost: np.ndarray  # int64[K_N]  contract costs and other counters (model.K_*)
    stale: np.ndarray  # int64[F+1, S_N, 2] loads per fault slot through an index entry a fault-free index does
    #                   not hold (model.S_STALE), those of them served correct anyway (S_LUCKY), those whose
    #                   entry's units held another content whole (S_FOREIGN) and those served wrong (S_WRONG):
    #                   objects, bytes


class FaultArrays(NamedTuple):
    """Everything the events kernel changes, persisting across its calls."""

    log: FaultLog
    ver: Versions
    tiers: TraceTiers
    dev: DeviceIndex
    writes: Writes
    media: Media
    counts: FaultCounts


class OpLog:
    """The replayed tier's user write and trim ops in trace order, with their arrival and completion (device
    time): which copies were on the media at any instant follows from them."""

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, ...]] = []

    def add(self, row: np.ndarray, op: np.ndarray, lba: np.ndarray, npages: np.ndarray, arr: np.ndarray,
            done: np.ndarray) -> None:
        self.parts.append((row.astype(np.int64), op.astype(np.int8), lba.astype(np.int64),
                           npages.astype(np.int64), arr.astype(np.int64), done.astype(np.int64)))

    def arrays(self) -> tuple[np.ndarray, ...]:
        if not self.parts:
            return (np.zeros(0, np.int64), np.zeros(0, np.int8), *(np.zeros(0, np.int64) for _ in range(4)))
        cols = tuple(np.concatenate([p[i] for p in self.parts]) for i in range(6))
        self.parts = []
        return cols


class FaultState:
    """The arrays the events kernel advances and faults act on (:attr:`arrays`, its state), and the fault
    state kept on the Python side; ``n_obj`` = largest object id + 1."""

    def __init__(self, n_obj: int, n_scopes: int, logical_pages: int, n_writes: int, log: tuple[np.ndarray, ...],
                 n_faults: int, n_windows: int, dev_tier: int):
        nt = len(S.TIERS)
        self.dev_tier = dev_tier
        row, op, lba, npages, arr, done = log
        self.log = FaultLog(row=row, op=op, lba=lba, npages=npages, arr=arr, done=done,
                            w=np.zeros(len(row), np.int64), kp=np.zeros(1, np.int64))
        self.ver = Versions(o_ver=np.zeros(n_obj, np.int64), scope_ver=np.zeros(max(1, n_scopes), np.int64))
        self.tiers = TraceTiers(cp_ver=np.full((nt, n_obj), -1, np.int64), cp_bad=np.zeros((nt, n_obj), np.int8),
                                cp_ts=np.zeros((nt, n_obj), np.int64))
        self.dev = DeviceIndex(slot=np.full(n_obj, -1, np.int64), ix_seq=np.zeros(n_obj, np.int64), restored=np.zeros(n_obj, np.int8),
                               true_seq=np.zeros(n_obj, np.int64))
        self.media = Media(lba_seq=np.zeros(max(1, logical_pages), np.int64),
                           lba_prev=np.zeros(max(1, logical_pages), np.int64))
        nw = n_writes + 2  # sequence 0 = zeros
        self.writes = Writes(obj=np.zeros(nw, np.uint64), ver=np.zeros(nw, np.int64), pages=np.zeros(nw, np.int64),
                             lo=np.zeros(nw, np.int64), hi=np.zeros(nw, np.int64), bad=np.zeros(nw, np.int8),
                             wn=np.ones(1, np.int64))
        self.counts = FaultCounts(acc=np.zeros((n_faults + 1, nt, len(S.KINDS), len(OUTCOMES), 3), np.int64),
                                  tw=np.zeros((max(1, n_windows), len(OUTCOMES)), np.int64),
                                  cost=np.zeros(K_N, np.int64),
                                  stale=np.zeros((n_faults + 1, S_N, 2), np.int64))
        self.arrays = FaultArrays(log=self.log, ver=self.ver, tiers=self.tiers, dev=self.dev, writes=self.writes,
                                  media=self.media, counts=self.counts)
        self.media_rate = 0.0  # media errors from a media_error fault (FaultConfig.media_rate, .media_from)
        self.media_from = 0
        self.snapshots: dict[int, np.ndarray] = {}
        self.scope_names: list[str] = []  # scope code -> name (the trace reader's string table)
        self.device_at_ns = 0  # the current fault's instant in device time (set by the driver)

    # ------------------------------------------------------------------ the replayed tier
    def lose_device_inflight(self, flush_ns: int) -> dict[str, Any]:
        """Writes not on the media at the fault (in flight, or acknowledged less than ``flush_ns`` before it)
        are undone unit by unit: a write with some units on the media is torn, one with none is lost."""
        hit = np.zeros(len(self.writes.pages), np.int64)
        ops, pages = lose_inflight(self.log, self.media, int(self.log.kp[0]), int(self.device_at_ns), int(flush_ns),
                                   hit)
        torn, lost = torn_and_lost(hit, self.writes.pages)
        return {"write_ops_lost": int(ops), "pages_lost": int(pages), "torn_objects": torn, "lost_objects": lost}

    def media_map(self) -> dict[str, np.ndarray]:
        """Every write so far with what of it the media holds now: its trace row, object, units, and units
        still holding its data (a scan of the device after a power loss must find exactly these)."""
        k_end = int(self.log.kp[0])
        wr = self.writes
        count = np.zeros(len(wr.pages), np.int64)
        media_units(self.log, self.media, k_end, count)
        ws = np.arange(1, int(wr.wn[0]))
        ws = ws[wr.pages[ws] > 0]
        return {"row": self.log.row[wr.lo[ws]], "obj": wr.obj[ws].astype(np.int64),
                "pages": wr.pages[ws], "on_media": count[ws]}

    def index_entries(self) -> int:
        return int(np.count_nonzero(self.dev.ix_seq))

    def drop_device_index(self, *, data: bool) -> dict[str, Any]:
        """The host-side index of the replayed tier is gone (and with ``data`` the copies too)."""
        n = self.index_entries()
        self.dev.ix_seq[:] = 0
        self.dev.restored[:] = 0
        if data:
            self.media.lba_seq[:] = 0
            self.media.lba_prev[:] = 0
        return {"index_entries_lost": n}

    def save_index(self, key: int) -> None:
        self.snapshots[key] = self.dev.ix_seq.copy()

    def restore_index(self, key: int) -> dict[str, Any]:
        """The index as it was at the fault's checkpoint: entries made since are missing, entries dropped
        since are back (pointing at units trimmed or rewritten since). Keyed by content, an entry that is back
        is found by the next request for its content, whatever object id the trace gives it."""
        old = self.snapshots.pop(key)
        now = self.dev.ix_seq
        stale = int(np.count_nonzero((old != 0) & (old != now)))
        missing = int(np.count_nonzero((now != 0) & (old != now)))
        now[:] = old  # in place: the kernel's tuples hold this array
        self.dev.restored[:] = 0
        return {"stale_entries": stale, "entries_missing": missing, "index_entries": int(np.count_nonzero(old))}

    def corrupt_objects(self, ids: list[int]) -> dict[str, Any]:
        """The current copies of ``ids`` on the replayed tier get an uncorrectable unit (until rewritten)."""
        hit = 0
        ix_seq, slot = self.dev.ix_seq, self.dev.slot
        for o in ids:
            if 0 <= o < len(ix_seq) and slot[o] >= 0 and ix_seq[slot[o]]:
                self.writes.bad[ix_seq[slot[o]]] = 1
                self.dev.restored[slot[o]] = 0
                hit += 1
        return {"objects_corrupted": hit}

    # ------------------------------------------------------------------ the trace's other tiers
    def lose_tiers(self, names: tuple[str, ...]) -> dict[str, Any]:
        out = {}
        cp_ver = self.tiers.cp_ver
        for name in names:
            t = S.TIER[name]
            if t == self.dev_tier:
                continue
            out[f"{name}_copies_lost"] = int(np.count_nonzero(cp_ver[t] >= 0))
            cp_ver[t] = -1
        return out

    def tear_recent(self, name: str, now_ns: int, inflight_ns: int) -> dict[str, Any]:
        """Copies written into tier ``name`` within ``inflight_ns`` before ``now_ns`` were still being written."""
        t = S.TIER[name]
        tr = self.tiers
        m = (tr.cp_ver[t] >= 0) & (tr.cp_ts[t] > now_ns - inflight_ns) & (tr.cp_ts[t] <= now_ns)
        tr.cp_bad[t][m] = 1
        return {"torn_objects": int(np.count_nonzero(m))}
