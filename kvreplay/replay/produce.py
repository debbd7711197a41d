"""Trace -> ops: the replay's producer side (read, select the tier's events, hints, layout), independent of
any target.

Per row group: the (op, tier) lookup table gives each event its storage action; the hint policy classifies
the tier's writes (seeing every tier's events, in order); the layout kernel turns the tier's events into
device ops, which are cut into segments that never cross a time-series window. A :class:`Mark` follows
whenever every event before a row has been turned into ops, carrying the producer's counters as they were
then, so the producer may run ahead of the consumer (in another thread: its kernels release the GIL) and a
run stopped at a Mark still reports a consistent prefix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from kvreplay.hints.base import HintPolicy, checked_classes, policy_label
from kvreplay.layout import OpBuffer
from kvreplay.layout.actions import A_READ, A_WRITE, ACTION_NAMES, action_table, pages_of, select
from kvreplay.layout.common import (
    OB_EV, OB_LBA, OB_NPAGES, OB_OP, OB_PID, OB_SRC, S_BUFFER_FULL, S_DONE, S_GROW, S_NO_PROGRESS, S_TOO_BIG,
    ObjectLayout,
)
from kvreplay.replay.prefetch import prefetched
from kvbed.core.errors import KvbedError

OP_BUFFER_MIN = 1 << 16


@dataclass
class BatchEvents:
    """The tier events of one row group that ops point back to (``event`` column)."""

    act: np.ndarray  # int8 action
    arrival: np.ndarray  # int64 arrival ns (trace time, scaled)
    window: np.ndarray  # int64 time-series window
    done: np.ndarray  # int64 completion of the event's last op, filled by the consumer (-1 = none yet)
    first: np.ndarray  # int64 arrival of the event's first op as submitted (max int64 = none yet)
    row: np.ndarray  # int64 the event's row in the trace (a multi-tier run joins loads to requests by it)
    obj: np.ndarray  # uint64/int64 the event's object id
    rel: np.ndarray  # int64 trace time from the first event, unscaled (a fault's instant is in it)


@dataclass
class Segment:
    """Ops of consecutive tier events that fall in one time-series window."""

    window: int
    ops: dict[str, np.ndarray]  # op, lba, npages, pid, arrival_ns (+ event, src)
    events: BatchEvents


@dataclass
class Mark:
    """Every event before ``row`` has been turned into ops; the producer's counters at that point."""

    row: int
    ts_ns: int  # trace time of the last event before ``row``
    layout: dict[str, Any]
    class_writes: np.ndarray
    class_bytes: np.ndarray
    action_counts: np.ndarray

    @classmethod
    def start(cls, ts_ns: int, layout: dict[str, Any], n_classes: int) -> "Mark":
        return cls(0, ts_ns, layout, np.zeros(n_classes, np.int64), np.zeros(n_classes, np.int64),
                   np.zeros(len(ACTION_NAMES), np.int64))


@dataclass
class Producer:
    """What turns the trace into ops: the reader's batches, the policy, the layout and the run's clocks."""

    batches: Iterator[Any]  # the trace's row groups (EventBatch), with the policy's columns
    tier: int  # schema code of the replayed tier
    policy: HintPolicy
    layout: ObjectLayout
    pid_of_class: np.ndarray  # int16 placement id of each class
    page_bytes: int
    t0: int  # trace time of the first event (arrival 0)
    time_scale: float
    window_ns: int
    max_object_pages: int
    trace: str  # for located errors
    stage_s: dict[str, float]  # wall seconds per stage, accumulated
    #: int64 trace time each request started, indexed by request id: when given, a read is issued at its
    #: request's start (a KV connector asks for all of a request's chunks at once; the device's queues then
    #: serialise them) instead of when the trace's tier simulator paced it; arrivals stay non-decreasing
    req_start: np.ndarray | None = None
    #: bytes stored with every object beside its payload (a recovery contract's header, kvreplay.faults)
    header_bytes: int = 0

    def segments(self) -> Iterator[Segment | Mark]:
        """Op segments in trace order, with a :class:`Mark` whenever every event before a row is done."""
        lut = action_table(self.tier)
        n_classes = len(self.pid_of_class)
        obuf = OpBuffer(OP_BUFFER_MIN)
        bound = self.layout.op_bound(self.max_object_pages)
        obuf.ensure(max(OP_BUFFER_MIN, 8 * bound))
        row0 = 0
        scale = self.time_scale
        class_writes = np.zeros(n_classes, np.int64)
        class_bytes = np.zeros(n_classes, np.int64)
        action_counts = np.zeros(len(ACTION_NAMES), np.int64)
        clock = time.perf_counter
        tm = self.stage_s
        last_arr = np.zeros(1, np.int64)

        def mark(row: int, ts: int) -> Mark:
            return Mark(row, ts, self.layout.stats(), class_writes.copy(), class_bytes.copy(), action_counts.copy())

        # three threads besides the consumer's, each up to three batches ahead of the next: reading (and the
        # policy's observe), classifying, the layout; results do not depend on it (the policy sees batches in
        # order). Each stage time is written by one thread only: read_wait is the classifying thread waiting for
        # the reading one, classes_wait the layout waiting for classes
        observes = self.policy.observes()
        # HintPolicy.assign checks what _assign gave; a plugin that overrides assign itself is checked here
        own_assign = type(self.policy).assign is not HintPolicy.assign

        def observed() -> Iterator[tuple[Any, np.ndarray, np.ndarray, np.ndarray, Any]]:
            for batch in self.batches:
                t1 = clock()
                act, tidx = select(lut, batch["op"], batch["tier"])
                w_idx = tidx[act[tidx] == A_WRITE]
                t2 = clock()
                tm["select"] += t2 - t1
                seen = self.policy.observe_batch(batch, act, w_idx) if observes else None
                tm["observe"] += clock() - t2
                yield batch, act, tidx, w_idx, seen

        def classified() -> Iterator[tuple[Any, np.ndarray, np.ndarray, np.ndarray]]:
            t = clock()
            for batch, act, tidx, w_idx, seen in prefetched(observed()):
                t1 = clock()
                tm["read_wait"] += t1 - t
                # a plugin may override assign with the three arguments it had before observe existed
                cls = self.policy.assign(batch, act, w_idx, seen) if observes else self.policy.assign(batch, act,
                                                                                                        w_idx)
                tm["hints"] += clock() - t1
                if own_assign:
                    cls = checked_classes(policy_label(self.policy), cls, len(w_idx), n_classes)
                yield batch, act, tidx, cls
                t = clock()

        t = clock()
        for batch, act, tidx, cls in prefetched(classified()):
            tm["classes_wait"] += clock() - t
            n = batch.n
            if len(tidx) == 0:
                row0 += n
                yield mark(row0, int(batch["ts_ns"][-1]))
                t = clock()
                continue
            ev_act = act[tidx]
            ev_obj = batch["obj_id"][tidx]
            ev_nbytes = batch["nbytes"][tidx]
            ev_pages = pages_of(ev_nbytes, self.page_bytes, self.header_bytes)
            ev_ts = batch["ts_ns"][tidx]
            ev_cls = np.zeros(len(tidx), np.int16)
            is_w = ev_act == A_WRITE
            ev_cls[is_w] = cls
            ev_pid = self.pid_of_class[ev_cls]
            rel = ev_ts - self.t0
            ev_arr = rel if scale == 1.0 else np.floor(rel / scale).astype(np.int64)
            if self.req_start is not None:
                ev_arr = self._reads_at_request_start(ev_arr, ev_act, batch["request_id"][tidx], last_arr)
            ctx = BatchEvents(act=ev_act, arrival=ev_arr, window=rel // self.window_ns,
                              done=np.full(len(tidx), -1, np.int64),
                              first=np.full(len(tidx), np.iinfo(np.int64).max, np.int64), row=row0 + tidx,
                              obj=ev_obj, rel=rel)
            start = 0
            while start < len(tidx):
                t = clock()
                nxt, nops, status = self.layout.run(ev_obj, ev_act, ev_pages, ev_pid, ev_cls, start, len(tidx),
                                                    obuf.ob, bound)
                tm["layout"] += clock() - t
                if status == S_TOO_BIG:
                    i = int(tidx[nxt])
                    raise KvbedError(
                        f"row {row0 + i}: object {int(ev_obj[nxt])} ({int(ev_nbytes[nxt])} bytes) cannot be placed: "
                        f"the namespace is full of nothing evictable or too small for it", where=self.trace)
                if status == S_NO_PROGRESS:
                    i = int(tidx[nxt])
                    raise KvbedError(
                        f"row {row0 + i}: zns layout cannot free a zone (every zone is full of live data and "
                        f"nothing is left to evict); give the device more zones", where=self.trace)
                if status not in (S_DONE, S_BUFFER_FULL, S_GROW):
                    raise RuntimeError(f"layout returned status {status}")
                # count only the events the layout got through, so a Mark inside the batch agrees with the layout
                action_counts += np.bincount(ev_act[start:nxt], minlength=len(ACTION_NAMES))[: len(ACTION_NAMES)]
                w = is_w[start:nxt]
                np.add.at(class_writes, ev_cls[start:nxt][w], 1)
                np.add.at(class_bytes, ev_cls[start:nxt][w], ev_nbytes[start:nxt][w])
                if nops:
                    yield from _split(obuf.ob, nops, ctx)
                start = nxt
                if 0 < start < len(tidx):  # events before this row are fully produced
                    yield mark(row0 + int(tidx[start]), int(ev_ts[start - 1]))
            row0 += n
            yield mark(row0, int(batch["ts_ns"][-1]))
            t = clock()


    def _reads_at_request_start(self, ev_arr: np.ndarray, ev_act: np.ndarray, req: np.ndarray,
                                last_arr: np.ndarray) -> np.ndarray:
        m = (ev_act == A_READ) & (req >= 0)
        rel = self.req_start[req[m]] - self.t0
        arr = ev_arr.copy()
        arr[m] = rel if self.time_scale == 1.0 else np.floor(rel / self.time_scale).astype(np.int64)
        arr = np.maximum.accumulate(np.maximum(arr, last_arr[0]))
        last_arr[0] = arr[-1]
        return arr


def _split(ob: np.ndarray, n: int, ctx: BatchEvents) -> Iterator[Segment]:
    """The first ``n`` ops of ``ob`` as segments that each stay within one time-series window."""
    ev = ob[OB_EV, :n]
    win = ctx.window[ev]
    cuts = np.flatnonzero(win[1:] != win[:-1]) + 1
    bounds = np.concatenate(([0], cuts, [n]))
    for a, b in zip(bounds[:-1], bounds[1:]):
        a, b = int(a), int(b)
        ops = {
            "op": ob[OB_OP, a:b].astype(np.int8),
            "lba": ob[OB_LBA, a:b].copy(),
            "npages": ob[OB_NPAGES, a:b].astype(np.int32),
            "pid": ob[OB_PID, a:b].astype(np.int16),
            "arrival_ns": ctx.arrival[ev[a:b]],
            "event": ev[a:b].copy(),
            "src": ob[OB_SRC, a:b].astype(np.int8),
        }
        yield Segment(window=int(win[a]), ops=ops, events=ctx)
