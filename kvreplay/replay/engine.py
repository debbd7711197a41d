"""The replay engine: trace -> hints -> layout -> op batches -> target -> results.

Two passes over the trace, both streamed row group by row group:

1. :func:`~kvreplay.replay.scan.scan_trace` sizes the device from the tier's peak live data and, for an
   offline hint policy, records when every write dies;
2. the replay proper: the :class:`~kvreplay.replay.produce.Producer` turns the trace into op segments
   (in its own thread), :meth:`Replay.run` submits them to the *target* and records their completions.

A target is anything with the device model's ``submit``/``counters``/``stats``
(:class:`~kvreplay.replay.target.Target`): the embedded models, or a VM running the ops through a guest
kernel (:mod:`testbed.vm.replay`); the layout and hints do not know which one runs. What the engine must
know about a device it asks the layout chosen for it (:func:`~kvreplay.layout.layout_for`). A target that
fails part-way raises :class:`~kvreplay.replay.target.TargetFailed`: the run records the prefix that
completed and returns a result marked incomplete, with the one-line error.

Timing: an op arrives at its event's trace time (relative to the first event) divided by ``time_scale``;
with ``as_fast_as_possible`` the trace clock is ignored and ``queue_depth`` ops are kept in flight (the
run's ops in groups of ``queue_depth``, each op taking a slot the group before freed, the earliest first).
Results are a pure function of the trace's events, the config and the seed (not of how the trace file is
cut into row groups): no wall-clock value enters result.json. Wall-clock figures (runtime.json) keep numba's
compile and cache-load time apart from the replay's own speed.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from devicemodels import DEVICES, jit
from devicemodels import saturation as SAT
from devicemodels.histogram import LatencyHistogram, clear_rows
from kvreplay import schema as S
from kvreplay.faults import CONTRACTS
from kvreplay.hints import HINTS
from kvreplay.hints.base import DeviceFacts, HintPolicy
from kvreplay.layout import layout_for
from kvreplay.layout.actions import A_READ
from kvreplay.replay import record as R
from kvreplay.replay import result as out
from kvreplay.replay.config import RunConfig, build_config, size_run, tier_policy, trace_fingerprint
from kvreplay.replay.produce import Mark, Producer
from kvreplay.replay.prefetch import BATCH_ROWS, prefetched
from kvreplay.replay.scan import SCAN_COLUMNS, ScanResult, scan_trace
from kvreplay.replay.sizing import page_bytes_of
from kvreplay.replay.target import Target, TargetFailed
from kvreplay.validate import RowCheck
from kvbed.core.errors import Interrupted, KvbedError

__all__ = ["Replay", "RunConfig", "build_config", "replay", "Target", "TargetFailed"]

MAX_WINDOWS = 100_000  # time-series rows: each is a dict in memory until the run is written


class Progress(Protocol):
    def phase(self, name: str, total: int) -> None: ...

    def advance(self, n: int) -> None: ...


def pids_of_classes(n_classes: int, n_pids: int) -> np.ndarray:
    """The placement id of each class: its own while there are enough; else adjacent classes share one (class k
    to k * n_pids // n_classes), so a merge joins lifetime neighbours - a round-robin fold would put the longest
    lived class beside the shortest. One id (a device without any): every class on it."""
    k = np.arange(n_classes, dtype=np.int64)
    return (k if n_classes <= n_pids else k * n_pids // n_classes).astype(np.int16)


def _nice_window(span_ns: int, n: int = 256) -> int:
    raw = max(1, math.ceil(span_ns / n))
    mag = 10 ** int(math.floor(math.log10(raw)))
    for m in (1, 2, 5, 10):
        if m * mag >= raw:
            return int(m * mag)
    return int(10 * mag)


class _Stopped(Exception):
    """The target failed part-way through a batch: ``completed`` leading ops finished at ``done``."""

    def __init__(self, error: TargetFailed, completed: int, done: np.ndarray):
        super().__init__(str(error))
        self.error, self.completed, self.done = error, completed, done


class Replay:
    """One replay run. ``run()`` returns the result parts; :mod:`testbed.results` writes them.

    ``target_factory(device_model) -> Target`` replaces the embedded model as the op sink (e.g. a VM
    target that also mirrors the completed commands into the model for WAF/GC figures); by default the
    model built from the config is the target. ``fit_params(groups) -> groups`` runs after sizing and
    before the model is built, so a target with constraints of its own (a QEMU device: CXL memory in
    256 MiB granules) gets a model of exactly its geometry. ``capacity_owner`` names what fixed the
    capacity when it is not the replay's to choose (a running VM), for the "too small" errors.
    ``keep_reads`` keeps every replayed read event's trace row and completion (``self.reads``), which a
    multi-tier run joins to the requests (:mod:`kvreplay.replay.ttft`); ``req_start`` (trace time each
    request started, by request id) issues every read at its request's start (:class:`Producer`).
    ``keep_media`` keeps the fault model's media map after each power loss (``fault_run.media``), which a VM
    run holds against the guest's scan (:mod:`testbed.vm.powerloss`). ``trace_checked``: the caller ran the
    trace's row checks already (:func:`kvreplay.validate.check_trace`: a study checks each trace once, a
    multi-tier run in its first pass), so the scan does not repeat them.
    """

    def __init__(self, config: RunConfig, *, progress: Progress | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 target_factory: Callable[[Any], Target] | None = None,
                 fit_params: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 capacity_owner: str | None = None, keep_reads: bool = False,
                 req_start: np.ndarray | None = None, keep_media: bool = False, trace_checked: bool = False):
        self.cfg = config
        self.trace_checked = trace_checked
        self.keep_media = keep_media
        self.keep_reads = keep_reads
        self.req_start = req_start
        self.progress = progress
        self.should_stop = should_stop or (lambda: False)
        self.target_factory = target_factory
        self.fit_params = fit_params
        self.capacity_owner = capacity_owner

    # -------------------------------------------------------------------------------- setup
    def prepare(self) -> None:
        cfg, rp = self.cfg, self.cfg.replay
        self.reader = S.TraceReader(cfg.trace)
        fp = trace_fingerprint(Path(cfg.trace))
        if cfg.sized and cfg.trace_fingerprint and cfg.trace_fingerprint != fp:
            raise KvbedError("the trace changed since this config was written (fingerprint differs)", where=cfg.trace)
        cfg.trace_fingerprint = fp
        self.device_cls = DEVICES.get(cfg.device)
        self.layout_cls = layout_for(self.device_cls)
        self.policy_cls: type[HintPolicy] = HINTS.get(cfg.hints)
        pb = page_bytes_of(cfg.device_params)
        # classes and the streams the layout keeps open (zones) enter the sizing; the policy is built before the
        # scan, which it does not need, so any slow start it has (learned's scikit-learn import) overlaps it
        self.n_classes = rp.classes or self.layout_cls.default_classes(self.device_cls, cfg.device_params, cfg.layout)
        self.policy = self.policy_cls(self.n_classes, cfg.hint_params, seed=rp.seed, tier=rp.tier_code)
        if self.progress:
            self.progress.phase("scan", self.reader.num_rows)
        self.header_bytes = CONTRACTS.get(cfg.faults.contract).header_bytes()
        t0 = time.perf_counter()

        def scanned(n: int) -> None:  # nothing is replayed yet: a Ctrl-C here leaves nothing to keep
            if self.progress:
                self.progress.advance(n)
            if self.should_stop():
                raise Interrupted("during the scan of the trace: nothing written")

        self.scan: ScanResult = scan_trace(self.reader, rp.tier_code, pb, record_future=self.policy_cls.needs_future,
                                           clock=getattr(cfg.hint_params, "clock", "bytes"), on_batch=scanned,
                                           header_bytes=self.header_bytes, check=self.row_check())
        self.scan_s = time.perf_counter() - t0
        sc = self.scan
        if sc.tier_events == 0:
            present = ", ".join(f"{k} ({v} events)" for k, v in sc.tier_counts.items()) or "none"
            raise KvbedError(f"tier {rp.tier!r} is absent from the trace (tiers present: {present})", where=cfg.trace)
        if sc.writes == 0:
            raise KvbedError(f"tier {rp.tier!r} has no persist/recover events: nothing to place on a device",
                             where=cfg.trace)
        streams = self.layout_cls.open_streams(self.n_classes, cfg.device_params, cfg.layout)
        groups = size_run(cfg, sc, streams, fit_params=self.fit_params, owner=self.capacity_owner)
        self.device = self.device_cls(**groups)
        self.target: Target = self.target_factory(self.device) if self.target_factory else self.device
        if self.device.page_bytes != pb:
            raise KvbedError(f"device page_bytes {self.device.page_bytes} differs from the sizing's {pb}")
        self.page_bytes = pb
        self.policy.know_device(DeviceFacts(pb, self.device.placement_unit_pages, self.header_bytes,
                                            self.device.logical_pages))
        if self.policy_cls.needs_future:
            self.policy.prepare(sc.future)
            sc.future = None  # the policy keeps what it needs (one int16 per write)
        self.pid_of_class = pids_of_classes(self.n_classes, self.device.n_placement_ids)
        if self.n_classes > self.device.n_placement_ids > 1:
            cfg.sizing.setdefault("notes", []).append(
                f"{self.n_classes} hint classes on {self.device.n_placement_ids} placement ids: adjacent classes "
                f"share one (per_class[].pid says which), so a class's lifetime neighbours are merged")
        self.evict_policy_source = None
        self.evict_policy = cfg.layout.evict_policy
        if self.evict_policy == "tier":
            self.evict_policy_source = tier_policy(self.reader.meta, rp.tier)
            self.evict_policy = "fifo" if self.evict_policy_source == "fifo" else "lru"
        self.layout = self.layout_cls.for_device(self.device, groups, self.n_classes, cfg.layout, self.evict_policy)
        self.precondition_result = None
        if rp.precondition > 0 and self.layout_cls.precondition_refusal:
            raise KvbedError(self.layout_cls.precondition_refusal)
        if rp.precondition > 0:
            try:
                self.precondition_result = self.device.precondition(rp.precondition, seed=rp.seed)
            except NotImplementedError:
                raise KvbedError(f"--precondition: device {cfg.device} has no preconditioning") from None
        span = max(0, sc.t_last_ns - sc.t_first_ns)
        self.window_ns = rp.window_ns or _nice_window(span)
        n_windows = span // self.window_ns + 1
        if n_windows > MAX_WINDOWS:
            raise KvbedError(f"--param window_ns={self.window_ns}: the trace spans {span} ns, which makes "
                             f"{n_windows:,} time-series windows; at most {MAX_WINDOWS:,} (raise window_ns)")
        self.t0 = sc.t_first_ns
        self.fault_run = None
        if cfg.faults.active:
            from kvreplay.faults.analysis import FaultRun

            self.fault_run = FaultRun(cfg.faults, self)
            if self.keep_media:
                self.fault_run.probe = {i for i, f in enumerate(self.fault_run.faults) if f.name == "power-loss"}

    def row_check(self) -> RowCheck | None:
        """The trace's row checks for the scan to run (None: the caller ran them); the kind column only when
        this run reads it (the hint policy, or the fault model's per-kind outcomes)."""
        if self.trace_checked:
            return None
        return RowCheck(self.reader, kind="kind" in self.policy_cls.columns or self.cfg.faults.active)

    def columns(self) -> list[str]:
        extra = ["request_id"] if self.req_start is not None else []
        return list(dict.fromkeys([*SCAN_COLUMNS, *self.policy_cls.columns, *extra]))

    def producer(self) -> Producer:
        """The trace -> ops side of this run (after :meth:`prepare`); any target can consume it."""
        return Producer(self.reader.iter_batches(self.columns(), BATCH_ROWS), self.cfg.replay.tier_code,
                        self.policy, self.layout, self.pid_of_class, self.page_bytes, self.t0,
                        self.cfg.replay.time_scale, self.window_ns, self.scan.max_object_pages, self.cfg.trace, self.stage_s,
                        req_start=self.req_start, header_bytes=self.header_bytes)

    # -------------------------------------------------------------------------------- submission
    def _submit(self, ops: dict[str, np.ndarray], ev: Any) -> np.ndarray:
        """done_ns of every op; raises _Stopped if the target failed part-way (see TargetFailed)."""
        rp = self.cfg.replay
        if not rp.as_fast_as_possible:
            batch = {k: ops[k] for k in ("op", "lba", "npages", "pid", "arrival_ns")}
            if getattr(self.target, "wants_events", False):  # a target that writes object payloads
                e = ops["event"]
                batch.update(src=ops["src"], row=ev.row[e], obj=ev.obj[e], rel=ev.rel[e])
            try:
                return self.target.submit(batch).done_ns
            except TargetFailed as exc:
                part = exc.completed()
                if part is None:
                    raise
                raise _Stopped(exc, len(part), part) from None
        # closed loop over the whole run in consecutive groups of queue_depth ops: op j of a group arrives when the
        # j-th slot the previous group freed frees (the earliest first), never before the op before it. The groups
        # run across segments, so the arrivals do not depend on where batches, windows or op buffers end (a group
        # cut at each segment made them depend on the trace file's row groups)
        n = len(ops["op"])
        done = np.empty(n, np.int64)
        arr = np.empty(n, np.int64)
        qd = rp.queue_depth
        a = 0
        while a < n:
            j = self._group_pos
            k = min(n - a, qd - j)
            b = a + k
            part_arr = np.maximum.accumulate(np.maximum(self._slots[j:j + k], self._last_arrival))
            part = {"op": ops["op"][a:b], "lba": ops["lba"][a:b], "npages": ops["npages"][a:b],
                    "pid": ops["pid"][a:b], "arrival_ns": part_arr}
            try:
                d = self.target.submit(part).done_ns
            except TargetFailed as exc:
                got = exc.completed()
                if got is None:
                    raise
                k = len(got)
                done[a:a + k] = got
                arr[a:a + k] = part_arr[:k]
                ops["arrival_ns"] = arr
                raise _Stopped(exc, a + k, done[:a + k]) from None
            done[a:b] = d
            arr[a:b] = part_arr
            self._last_arrival = int(part_arr[-1])
            self._group_done[j:j + k] = d
            self._group_pos = j + k
            if self._group_pos == qd:
                self._slots = np.sort(self._group_done)
                self._group_pos = 0
            a = b
        ops["arrival_ns"] = arr
        return done

    def hists(self) -> dict[str, LatencyHistogram]:
        return {name: LatencyHistogram(self.H[i]) for i, name in enumerate(R.H_NAMES)}

    def run(self) -> dict[str, Any]:
        """Replay the whole trace (or until ``should_stop``); returns the parts of the result."""
        with jit.compile_clock() as compiling:
            return self._run(compiling)

    def _run(self, compiling: Any) -> dict[str, Any]:
        wall0 = time.perf_counter()
        stages = ("read_wait", "select", "observe", "hints", "classes_wait", "layout", "device", "record")
        self.stage_s = {k: 0.0 for k in stages}  # wall seconds, each written by one thread (produce.py)
        self.prepare()
        rp = self.cfg.replay
        self._slots = np.zeros(rp.queue_depth, np.int64)  # --as-fast-as-possible: when each slot frees (sorted)
        self._group_done = np.zeros(rp.queue_depth, np.int64)  # completions of the current group's ops so far
        self._group_pos = 0  # ops of the current group submitted
        self._last_arrival = 0
        self.H, W = R.new_hists()
        self.sat = SAT.new_state()  # busy/backlogged time from arrivals and completions (job "saturation")
        seg_acc = np.zeros(R.ACC_N, np.int64)
        win_acc = np.zeros(R.ACC_N, np.int64)
        self.total_acc = np.zeros(R.ACC_N, np.int64)
        rows: list[dict[str, Any]] = []
        counters0 = self.target.counters()
        last_counters = dict(counters0)
        self.t_first_arr: int | None = None
        self.t_last_done = 0
        cur_win = 0
        incomplete = False
        self.failure: str | None = None
        if self.progress:
            self.progress.phase("replay", self.reader.num_rows)

        def close_until(w: int) -> None:
            nonlocal cur_win, last_counters
            while cur_win < w:
                c = self.target.counters()
                rows.append(out.window_row(cur_win, self.window_ns, self.page_bytes, c, last_counters, W, win_acc,
                                           self.total_acc))
                last_counters = c
                clear_rows(W)
                win_acc[:] = 0
                cur_win += 1

        kept: list[Any] = []  # the BatchEvents of every segment seen, once each (keep_reads)
        t_replay = time.perf_counter()
        last_mark = Mark.start(self.t0, self.layout.stats(), self.n_classes)
        for item in prefetched(self.producer().segments(), depth=8):  # production runs one step ahead
            if isinstance(item, Mark):
                if self.progress and item.row > last_mark.row:
                    self.progress.advance(item.row - last_mark.row)
                last_mark = item
                if self.should_stop():
                    incomplete = item.row < self.reader.num_rows
                    break
                continue
            t0 = time.perf_counter()
            close_until(item.window)
            if self.keep_reads and (not kept or kept[-1] is not item.events):
                kept.append(item.events)
            ops = item.ops
            try:
                done = self._submit(ops, item.events)
            except _Stopped as stop:  # keep what completed, then stop: the result is partial
                ops = {k: v[: stop.completed] for k, v in ops.items()}
                done = stop.done
                self.failure = str(stop.error)
                incomplete = True
            t1 = time.perf_counter()
            seg_acc[:] = 0
            ev = item.events
            R.record_segment(ops["op"], ops["src"], ops["event"], done, ops["arrival_ns"], ev.act, ev.first,
                             ev.done, self.H, W, seg_acc, ops["npages"])
            SAT.record(ops["arrival_ns"], done, rp.saturation_wait_ns, self.sat)
            if self.fault_run is not None:
                self.fault_run.record(ops, done, ev.row)
            self.stage_s["device"] += t1 - t0
            self.stage_s["record"] += time.perf_counter() - t1
            win_acc += seg_acc
            self.total_acc += seg_acc
            if len(done):
                if self.t_first_arr is None:
                    self.t_first_arr = int(ops["arrival_ns"][0])
                self.t_last_done = max(self.t_last_done, int(done.max()))
            if self.failure is not None:
                break
        replay_s = time.perf_counter() - t_replay
        if self.keep_reads:
            self.reads = read_latencies(kept, last_mark.row)
        self.last_mark = last_mark
        rows_done = last_mark.row
        # windows up to the last event replayed, then that one
        close_until(max(cur_win, (last_mark.ts_ns - self.t0) // self.window_ns))
        close_until(cur_win + 1)
        self.dev_stats = self.target.stats()
        job = out.job_entry(self, rows_done)
        result = out.build_result(self, job, rows_done, incomplete)
        lab_s = lab_jit_s = 0.0
        if rp.hint_lab and not incomplete:
            from kvreplay.hints.lab import run_lab

            t_lab, j_lab = time.perf_counter(), jit.compile_seconds(compiling)
            job["hint_policy"]["lab"] = run_lab(self, job)
            lab_s = time.perf_counter() - t_lab
            lab_jit_s = jit.compile_seconds(compiling) - j_lab  # the lab's replays' kernels: within lab_s
        fault_s = 0.0
        if self.fault_run is not None:
            t_f = time.perf_counter()
            result["faults"], per_window = self.fault_run.analyse(rows_done, self.device.logical_pages,
                                                                  self.window_ns)
            out.add_outcomes(rows, per_window)
            job["faults"] = out.fault_summary(result["faults"])
            fault_s = time.perf_counter() - t_f
        wall = time.perf_counter() - wall0
        jit_s = jit.compile_seconds(compiling) - lab_jit_s
        runtime = {
            "wall_s": wall,
            "scan_s": self.scan_s,
            "replay_s": replay_s,
            "rows_per_s": rows_done / wall if wall > 0 else None,
            "jit_s": jit_s,  # numba compiling kernels or loading them from its cache, within wall_s (not hint_lab_s)
            # the run without jit_s (nor the hint lab's replays)
            "events_per_s": rows_done / (wall - jit_s - lab_s) if wall > jit_s + lab_s else None,
            "replay_stage_s": {k: round(v, 4) for k, v in self.stage_s.items()},
            **({"fault_analysis_s": fault_s} if self.fault_run is not None else {}),
            **({"hint_lab_s": lab_s} if rp.hint_lab else {}),
            "incomplete": bool(incomplete),
            "layout_memory_bytes": self.layout.state.nbytes(),
            "policy_memory_bytes": self.policy.memory_bytes(),
        }
        return {"config": self.cfg.to_dict(), "result": result, "timeseries": rows,
                "latency": out.latency_rows(self.hists()), "runtime": runtime}


def read_latencies(kept: list[Any], rows_done: int) -> tuple[np.ndarray, np.ndarray]:
    """(trace row, completion ns in replay time) of every read event replayed before ``rows_done`` whose ops
    all completed, in row order; a read the layout could not serve (its object was evicted) has no ops and no
    row."""
    rows, done = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for ev in kept:
        m = (ev.act == A_READ) & (ev.done >= 0) & (ev.row < rows_done)
        rows.append(ev.row[m])
        done.append(ev.done[m])
    return np.concatenate(rows), np.concatenate(done)


def replay(config: RunConfig, *, progress: Progress | None = None,
           should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    return Replay(config, progress=progress, should_stop=should_stop).run()
