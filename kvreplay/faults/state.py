"""The fault model's state (see :mod:`kvreplay.faults.model`) and the operations fault kinds apply to it."""

from __future__ import annotations

from typing import Any

import numpy as np

from kvreplay import schema as S
from kvreplay.faults.model import K_N, OUTCOMES, lose_inflight, media_units, torn_and_lost

#: tiers whose copies live in volatile memory (a power loss takes them)
VOLATILE_TIERS = ("gpu", "cpu", "cxl")


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
    """Arrays the events kernel advances and faults act on; ``n_obj`` = largest object id + 1."""

    def __init__(self, n_obj: int, n_scopes: int, logical_pages: int, n_writes: int, log: tuple[np.ndarray, ...],
                 n_faults: int, n_windows: int, dev_tier: int):
        nt = len(S.TIERS)
        self.dev_tier = dev_tier
        self.o_ver = np.zeros(n_obj, np.int64)
        self.scope_ver = np.zeros(max(1, n_scopes), np.int64)
        self.cp_ver = np.full((nt, n_obj), -1, np.int64)
        self.cp_bad = np.zeros((nt, n_obj), np.int8)
        self.cp_ts = np.zeros((nt, n_obj), np.int64)
        self.ix_seq = np.zeros(n_obj, np.int64)
        self.restored = np.zeros(n_obj, np.int8)
        self.true_res = np.zeros(n_obj, np.int8)
        self.lba_seq = np.zeros(max(1, logical_pages), np.int64)
        self.lba_prev = np.zeros(max(1, logical_pages), np.int64)
        nw = n_writes + 2  # sequence 0 = zeros
        self.w_obj = np.zeros(nw, np.uint64)
        self.w_ver = np.zeros(nw, np.int64)
        self.w_pages = np.zeros(nw, np.int64)
        self.w_lo = np.zeros(nw, np.int64)
        self.w_hi = np.zeros(nw, np.int64)
        self.w_bad = np.zeros(nw, np.int8)
        self.wn = np.ones(1, np.int64)
        self.kp = np.zeros(1, np.int64)
        self.lg_row, self.lg_op, self.lg_lba, self.lg_np, self.lg_arr, self.lg_done = log
        self.lg_w = np.zeros(len(self.lg_row), np.int64)
        self.acc = np.zeros((n_faults + 1, nt, len(S.KINDS), len(OUTCOMES), 3), np.int64)
        self.tw = np.zeros((max(1, n_windows), len(OUTCOMES)), np.int64)
        self.cost = np.zeros(K_N, np.int64)
        self.media_rate = 0.0
        self.media_from = 0
        self.snapshots: dict[int, np.ndarray] = {}
        self.scope_names: list[str] = []  # scope code -> name (the trace reader's string table)
        self.device_at_ns = 0  # the current fault's instant in device time (set by the driver)

    # ------------------------------------------------------------------ the replayed tier
    def lose_device_inflight(self, flush_ns: int) -> dict[str, Any]:
        """Writes not on the media at the fault (in flight, or acknowledged less than ``flush_ns`` before it)
        are undone unit by unit: a write with some units on the media is torn, one with none is lost."""
        hit = np.zeros(len(self.w_pages), np.int64)
        ops, pages = lose_inflight(self.lg_op, self.lg_lba, self.lg_np, self.lg_w, self.lg_arr, self.lg_done,
                                   int(self.kp[0]), int(self.device_at_ns), int(flush_ns), self.lba_seq,
                                   self.lba_prev, self.w_pages, hit)
        torn, lost = torn_and_lost(hit, self.w_pages)
        return {"write_ops_lost": int(ops), "pages_lost": int(pages), "torn_objects": torn, "lost_objects": lost}

    def media_map(self) -> dict[str, np.ndarray]:
        """Every write so far with what of it the media holds now: its trace row, object, units, and units
        still holding its data (a scan of the device after a power loss must find exactly these)."""
        k_end = int(self.kp[0])
        count = np.zeros(len(self.w_pages), np.int64)
        media_units(self.lg_op, self.lg_lba, self.lg_np, self.lg_w, k_end, self.lba_seq, count)
        ws = np.arange(1, int(self.wn[0]))
        ws = ws[self.w_pages[ws] > 0]
        return {"row": self.lg_row[self.w_lo[ws]], "obj": self.w_obj[ws].astype(np.int64),
                "pages": self.w_pages[ws], "on_media": count[ws]}

    def index_entries(self) -> int:
        return int(np.count_nonzero(self.ix_seq))

    def drop_device_index(self, *, data: bool) -> dict[str, Any]:
        """The host-side index of the replayed tier is gone (and with ``data`` the copies too)."""
        n = self.index_entries()
        self.ix_seq[:] = 0
        self.restored[:] = 0
        if data:
            self.lba_seq[:] = 0
            self.lba_prev[:] = 0
        return {"index_entries_lost": n}

    def save_index(self, key: int) -> None:
        self.snapshots[key] = self.ix_seq.copy()

    def restore_index(self, key: int) -> dict[str, Any]:
        """The index as it was at the fault's checkpoint: entries made since are missing, entries dropped
        since are back (pointing at units trimmed or rewritten since)."""
        old = self.snapshots.pop(key)
        now = self.ix_seq
        stale = int(np.count_nonzero((old != 0) & (old != now)))
        missing = int(np.count_nonzero((now != 0) & (old != now)))
        self.ix_seq = old
        self.restored[:] = 0
        return {"stale_entries": stale, "entries_missing": missing, "index_entries": int(np.count_nonzero(old))}

    def corrupt_objects(self, ids: list[int]) -> dict[str, Any]:
        """The current copies of ``ids`` on the replayed tier get an uncorrectable unit (until rewritten)."""
        hit = 0
        for o in ids:
            if 0 <= o < len(self.ix_seq) and self.ix_seq[o]:
                self.w_bad[self.ix_seq[o]] = 1
                self.restored[o] = 0
                hit += 1
        return {"objects_corrupted": hit}

    # ------------------------------------------------------------------ the trace's other tiers
    def lose_tiers(self, names: tuple[str, ...]) -> dict[str, Any]:
        out = {}
        for name in names:
            t = S.TIER[name]
            if t == self.dev_tier:
                continue
            out[f"{name}_copies_lost"] = int(np.count_nonzero(self.cp_ver[t] >= 0))
            self.cp_ver[t] = -1
        return out

    def tear_recent(self, name: str, now_ns: int, inflight_ns: int) -> dict[str, Any]:
        """Copies written into tier ``name`` within ``inflight_ns`` before ``now_ns`` were still being written."""
        t = S.TIER[name]
        m = (self.cp_ver[t] >= 0) & (self.cp_ts[t] > now_ns - inflight_ns) & (self.cp_ts[t] <= now_ns)
        self.cp_bad[t][m] = 1
        return {"torn_objects": int(np.count_nonzero(m))}
