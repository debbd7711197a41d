"""The replay engine: trace -> hints -> layout -> op batches -> target -> results.

Two passes over the trace, both streamed row group by row group:

1. :func:`~kvreplay.replay.scan.scan_trace` sizes the device from the tier's
   peak live data and, for an offline hint policy, records when every write dies.
2. the replay proper. Per row group: the (op, tier) lookup table gives each
   event its storage action; the hint policy classifies the tier's writes
   (seeing every tier's events, in order); the layout kernel turns the tier's
   events into device ops; ops are submitted to the *target* in segments that
   never cross a time-series window, and their completions are recorded.

Producing ops (:meth:`Replay.op_segments`) and submitting them
(:meth:`Replay.run`) are kept apart: a target is anything with the device
model's ``submit``/``counters``/``stats`` (the embedded models, or a VM running
the ops through a guest kernel: :mod:`testbed.vm.replay`), and the layout and
hints do not know which one runs.

A target that fails part-way (a VM that dies, an agent that stops answering)
raises a :class:`~testbed.core.errors.KvbedError` whose ``partial`` is the
completion of the ops that did complete; the run then records that prefix and
returns a result marked incomplete, with the one-line ``error``.

Timing: an op arrives at its event's trace time (relative to the first event)
divided by ``time_scale``; with ``as_fast_as_possible`` the trace clock is
ignored and ``queue_depth`` ops are kept in flight (each new op takes the slot
of the earliest completion). Results are a pure function of the trace, the
config and the seed: no wall-clock value enters result.json.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

import numpy as np

from devicemodels import DEVICES
from devicemodels.base import Completion
from devicemodels.histogram import NBUCKETS, LatencyHistogram, clear_rows
from kvreplay import schema as S
from kvreplay.hints import HINTS
from kvreplay.hints.base import HintPolicy
from kvreplay.layout import ExtentLayout, OpBuffer, ZoneLayout
from kvreplay.layout.actions import A_WRITE, ACTION_NAMES, action_table, pages_of, select
from kvreplay.layout.common import (
    OB_EV, OB_LBA, OB_NPAGES, OB_OP, OB_PID, OB_SRC, S_BUFFER_FULL, S_DONE, S_GROW, S_NO_PROGRESS, S_TOO_BIG,
)
from kvreplay.replay.prefetch import prefetched
from kvreplay.replay import record as R
from kvreplay.replay.params import LayoutParams, ReplayParams
from kvreplay.replay.scan import SCAN_COLUMNS, ScanResult, scan_trace
from kvreplay.replay.sizing import apply_defaults, explicit_keys, page_bytes_of, size_device
from testbed.core.errors import KvbedError
from testbed.core.params import from_dict, split_overrides, to_dict, with_overrides

FIO_VERSION_KEY = "kvbed version"
OP_BUFFER_MIN = 1 << 16
ZNS_DEFAULT_CLASSES = 8
MAX_WINDOWS = 100_000  # time-series rows: each is a dict in memory until the run is written


class Target(Protocol):
    """What the engine submits to: the embedded device models satisfy it, and so does the VM target.

    ``submit`` may raise a KvbedError with a ``partial`` attribute (a Completion of the leading ops that
    completed; with a ``status`` column only the leading status-0 ops count): the run stops there and
    keeps what completed. Any other error aborts the run.
    """

    @property
    def page_bytes(self) -> int: ...

    @property
    def logical_pages(self) -> int: ...

    def submit(self, ops: dict[str, np.ndarray]) -> Completion: ...

    def counters(self) -> dict[str, int]: ...

    def stats(self) -> dict[str, Any]: ...


class Progress(Protocol):
    def phase(self, name: str, total: int) -> None: ...

    def advance(self, n: int) -> None: ...


# ----------------------------------------------------------------------------------------------- config


def trace_fingerprint(path: Path) -> str:
    """sha256 of the Parquet footer (schema, metadata, row counts, per-chunk statistics, compressed sizes
    and offsets) and the file size, without reading a multi-GB file. It changes with almost any edit of
    the content; an edit that keeps every chunk's compressed size and min/max (e.g. two ids swapped within
    a chunk) goes unnoticed."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        if size < 8:
            return f"size:{size}"
        f.seek(size - 8)
        tail = f.read(8)
        flen = int.from_bytes(tail[:4], "little")
        f.seek(max(0, size - 8 - flen))
        footer = f.read(flen + 8)
    return "sha256:" + hashlib.sha256(footer + str(size).encode()).hexdigest()


@dataclass
class RunConfig:
    """Everything a run depends on; ``config.json`` is its ``to_dict()`` and reruns it exactly."""

    trace: str
    device: str
    hints: str
    replay: ReplayParams
    layout: LayoutParams
    hint_params: Any
    device_params: dict[str, Any]
    explicit: list[str] = field(default_factory=list)  # device fields the user set (sizing leaves them alone)
    sized: bool = False  # device_params already hold the capacity (a rerun from config.json)
    sizing: dict[str, Any] | None = None
    trace_fingerprint: str | None = None
    #: where the ops go when not to the embedded model, e.g. {"kind": "vm", ...} (testbed.vm.replay)
    target: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        from testbed.core.version import __version__

        d = {
            "kvbed_version": __version__,
            "trace": {"path": self.trace, "fingerprint": self.trace_fingerprint},
            "device": self.device,
            "hints": self.hints,
            "replay": to_dict(self.replay),
            "layout": to_dict(self.layout),
            "hint_params": to_dict(self.hint_params),
            "device_params": {g: to_dict(p) for g, p in self.device_params.items()},
            "explicit": sorted(self.explicit),
            "sizing": self.sizing,
        }
        if self.target is not None:
            d["target"] = self.target
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, where: str = "config.json") -> "RunConfig":
        try:
            device_cls = DEVICES.get(d["device"])
            policy_cls = HINTS.get(d["hints"])
            groups = {g: from_dict(c, d["device_params"][g], where=f"{where}: device_params.{g}")
                      for g, c in device_cls.param_classes.items()}
            return cls(
                trace=d["trace"]["path"], device=d["device"], hints=d["hints"],
                replay=from_dict(ReplayParams, d["replay"], where=f"{where}: replay").validate(),
                layout=from_dict(LayoutParams, d["layout"], where=f"{where}: layout").validate(),
                hint_params=from_dict(policy_cls.Params, d["hint_params"], where=f"{where}: hint_params"),
                device_params=groups, explicit=list(d.get("explicit", [])), sized=True, sizing=d.get("sizing"),
                trace_fingerprint=d["trace"].get("fingerprint"), target=d.get("target"),
            )
        except KeyError as exc:
            raise KvbedError(f"missing key {exc.args[0]!r}", where=where) from None
        except (TypeError, AttributeError) as exc:  # a value of the wrong JSON type (a number for a name...)
            raise KvbedError(f"malformed config ({exc})", where=where) from None


def build_config(trace: str | Path, device: str, hints: str, params: list[str] | tuple[str, ...] = (),
                 options: dict[str, Any] | None = None) -> RunConfig:
    """Route ``--param k=v`` pairs and CLI options to their dataclasses; fail early on anything unknown."""
    device_cls = DEVICES.get(device)
    policy_cls = HINTS.get(hints)
    classes = {"replay": ReplayParams, "layout": LayoutParams, "hint": policy_cls.Params, **device_cls.param_classes}
    routed = split_overrides(list(params), classes)
    replay = with_overrides(ReplayParams(), routed["replay"])
    if options:
        replay = with_overrides(replay, {k: v for k, v in options.items() if v is not None})
    replay.validate()
    layout = with_overrides(LayoutParams(), routed["layout"]).validate()
    hint_params = with_overrides(policy_cls.Params(), routed["hint"])
    groups = apply_defaults({g: c() for g, c in device_cls.param_classes.items()})
    for g in device_cls.param_classes:
        groups[g] = with_overrides(groups[g], routed[g])
    explicit = set()
    for g in device_cls.param_classes:
        explicit |= explicit_keys(routed[g])
    if "flash" in groups and "seed" not in explicit:  # one seed for the run unless the device's is set apart
        groups["flash"] = with_overrides(groups["flash"], {"seed": replay.seed})
    path = Path(trace).expanduser().resolve()
    return RunConfig(trace=str(path), device=device, hints=hints, replay=replay, layout=layout,
                     hint_params=hint_params, device_params=groups, explicit=sorted(explicit))


# ----------------------------------------------------------------------------------------------- engine


def _nice_window(span_ns: int, n: int = 256) -> int:
    raw = max(1, math.ceil(span_ns / n))
    mag = 10 ** int(math.floor(math.log10(raw)))
    for m in (1, 2, 5, 10):
        if m * mag >= raw:
            return int(m * mag)
    return int(10 * mag)


def _tier_policy(meta: S.TraceMeta, tier: str) -> str | None:
    """The replayed tier's eviction policy as recorded by the producer (searched in generator settings)."""
    key = f"{tier}_policy"

    def find(d: Any) -> str | None:
        if isinstance(d, dict):
            if isinstance(d.get(key), str):
                return d[key]
            for v in d.values():
                r = find(v)
                if r:
                    return r
        return None

    return find(meta.generator)


@dataclass
class BatchEvents:
    """The tier events of one row group that ops point back to (``event`` column)."""

    act: np.ndarray  # int8 action
    arrival: np.ndarray  # int64 arrival ns (trace time, scaled)
    window: np.ndarray  # int64 time-series window
    done: np.ndarray  # int64 completion of the event's last op, filled by the consumer (-1 = none yet)
    first: np.ndarray  # int64 arrival of the event's first op as submitted (max int64 = none yet)


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


class TargetStopped(Exception):
    """The target failed part-way through a batch: ``completed`` leading ops finished at ``done``."""

    def __init__(self, error: BaseException, completed: int, done: np.ndarray):
        super().__init__(str(error))
        self.error = error
        self.completed = completed
        self.done = done


def _completed_prefix(exc: BaseException) -> np.ndarray | None:
    """done_ns of the leading ops a failed submit completed (None: the error carries no partial)."""
    part = getattr(exc, "partial", None)
    if part is None:
        return None
    done = np.asarray(part.done_ns, np.int64)
    status = getattr(part, "status", None)
    if status is not None and len(status):
        bad = np.flatnonzero(np.asarray(status) != 0)
        if len(bad):
            done = done[: int(bad[0])]
    return done


class Replay:
    """One replay run. ``run()`` returns the result parts; :mod:`testbed.results` writes them.

    ``target_factory(device_model) -> Target`` replaces the embedded model as the op sink (e.g. a VM
    target that also mirrors the completed commands into the model for WAF/GC figures); by default the
    model built from the config is the target. ``fit_params(groups) -> groups`` runs after sizing and
    before the model is built, so a target with constraints of its own (a QEMU device: CXL memory in
    256 MiB granules) gets a model of exactly its geometry. ``capacity_owner`` names what fixed the
    capacity when it is not the replay's to choose (a running VM), for the "too small" errors.
    """

    def __init__(self, config: RunConfig, *, progress: Progress | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 target_factory: Callable[[Any], Target] | None = None,
                 fit_params: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 capacity_owner: str | None = None):
        self.cfg = config
        self.progress = progress
        self.should_stop = should_stop or (lambda: False)
        self.target_factory = target_factory
        self.fit_params = fit_params
        self.capacity_owner = capacity_owner

    # -------------------------------------------------------------------------------- setup
    def prepare(self) -> None:
        cfg = self.cfg
        rp = cfg.replay
        self.reader = S.TraceReader(cfg.trace)
        fp = trace_fingerprint(Path(cfg.trace))
        if cfg.sized and cfg.trace_fingerprint and cfg.trace_fingerprint != fp:
            raise KvbedError("the trace changed since this config was written (fingerprint differs)", where=cfg.trace)
        cfg.trace_fingerprint = fp
        self.device_cls = DEVICES.get(cfg.device)
        self.policy_cls: type[HintPolicy] = HINTS.get(cfg.hints)
        tier = rp.tier_code
        groups = cfg.device_params
        pb = page_bytes_of(groups)
        clock = getattr(cfg.hint_params, "clock", "bytes")
        if self.progress:
            self.progress.phase("scan", self.reader.num_rows)
        t0 = time.perf_counter()
        self.scan: ScanResult = scan_trace(self.reader, tier, pb, record_future=self.policy_cls.needs_future,
                                           clock=clock, on_batch=self.progress.advance if self.progress else None)
        self.scan_s = time.perf_counter() - t0
        sc = self.scan
        if sc.tier_events == 0:
            present = ", ".join(f"{k} ({v} events)" for k, v in sc.tier_counts.items()) or "none"
            raise KvbedError(f"tier {rp.tier!r} is absent from the trace (tiers present: {present})", where=cfg.trace)
        if sc.writes == 0:
            raise KvbedError(f"tier {rp.tier!r} has no persist/recover events: nothing to place on a device",
                             where=cfg.trace)
        # classes and (for zns) the streams the layout keeps open decide the zone count
        self.n_classes = self._n_classes(groups)
        zone_streams = 0
        if "zns" in groups:
            per_class = cfg.layout.gc_stream == "per-class"
            zone_streams = self.n_classes * (2 if per_class else 1) + (0 if per_class else 1)
            if zone_streams > groups["zns"].max_open_zones:
                raise KvbedError(
                    f"zns: {self.n_classes} classes need {zone_streams} open zones (with GC) but max_open_zones is "
                    f"{groups['zns'].max_open_zones}; lower classes or raise max_open_zones")
        if not cfg.sized:
            rate = 0.0 if rp.as_fast_as_possible else sc.peak_write_bytes_per_s * rp.time_scale
            groups, cfg.sizing = size_device(
                groups, set(cfg.explicit), peak_live_pages=sc.peak_live_pages, max_object_pages=sc.max_object_pages,
                fill_ratio=rp.fill_ratio, strict=rp.strict_capacity, zone_streams=zone_streams,
                gc_free_zones=cfg.layout.gc_free_zones, tier=rp.tier, write_bytes_per_s=rate,
                write_utilization=rp.write_utilization, owner=self.capacity_owner)
            if self.fit_params:
                fitted = self.fit_params(groups)
                if fitted != groups:  # the target moved the geometry: the sizing record says so
                    every = {f.name for p in fitted.values() for f in dataclasses.fields(p)}
                    _, rec = size_device(fitted, every, peak_live_pages=sc.peak_live_pages,
                                         max_object_pages=sc.max_object_pages, fill_ratio=rp.fill_ratio,
                                         strict=rp.strict_capacity, zone_streams=zone_streams,
                                         gc_free_zones=cfg.layout.gc_free_zones, tier=rp.tier)
                    moved = {k: (cfg.sizing.get(k), rec[k]) for k in ("logical_bytes", "usable_pages", "zones")
                             if k in rec and cfg.sizing.get(k) != rec[k]}
                    cfg.sizing.update({k: v for k, (_, v) in moved.items()},
                                      fill_ratio_effective=rec["fill_ratio_effective"])
                    cfg.sizing["notes"].append(
                        "the target needs another geometry: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in moved.items()))
                    groups = fitted
            cfg.device_params = groups
            cfg.sized = True
        else:
            size_device(groups, set(cfg.explicit) | {"logical_bytes", "cxl_bytes", "channels", "ru_bytes",
                                                     "blocks_per_line"},
                        peak_live_pages=sc.peak_live_pages, max_object_pages=sc.max_object_pages,
                        fill_ratio=rp.fill_ratio, strict=rp.strict_capacity, zone_streams=zone_streams,
                        gc_free_zones=cfg.layout.gc_free_zones, tier=rp.tier, owner=self.capacity_owner)
            if self.fit_params:
                groups = self.fit_params(groups)
                if groups != cfg.device_params:
                    raise KvbedError("the saved device parameters do not fit the target any more "
                                     "(a VM would get a different geometry): rerun without --config")
        self.device = self.device_cls(**groups)
        self.target: Target = self.target_factory(self.device) if self.target_factory else self.device
        if self.device.page_bytes != pb:
            raise KvbedError(f"device page_bytes {self.device.page_bytes} differs from the sizing's {pb}")
        self.page_bytes = pb
        self.policy = self.policy_cls(self.n_classes, cfg.hint_params, seed=rp.seed, tier=tier)
        if self.policy_cls.needs_future:
            self.policy.prepare(sc.future)
            sc.future = None  # the policy keeps what it needs (one int16 per write)
        self.pid_of_class = self._pid_map()
        self.evict_policy = self._evict_policy()
        if "zns" in groups:
            z = groups["zns"]
            zp, cp = z.zone_bytes // pb, z.zone_cap_bytes // pb
            try:
                self.layout = ZoneLayout(self.device.logical_pages // zp, zp, cp, self.n_classes,
                                         evict_policy=self.evict_policy, gc_free_zones=cfg.layout.gc_free_zones,
                                         gc_per_class=cfg.layout.gc_stream == "per-class")
            except ValueError as exc:
                raise KvbedError(f"zns layout: {exc}") from None
        else:
            self.layout = ExtentLayout(self.device.logical_pages, evict_policy=self.evict_policy,
                                       rewrite_in_place=cfg.layout.rewrite_in_place)
        self.precondition_result = None
        if rp.precondition > 0 and "zns" in groups:
            raise KvbedError("--precondition: on zns the host owns every zone's state, and a prefilled zone would "
                             "be one the layout does not know about; use --fill-ratio to load the device instead")
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

    def _n_classes(self, groups: dict[str, Any]) -> int:
        rp = self.cfg.replay
        if rp.classes:
            return rp.classes
        if "fdp" in groups:
            return groups["fdp"].nruh * groups["fdp"].nrg
        if "zns" in groups:
            per_class = self.cfg.layout.gc_stream == "per-class"
            room = groups["zns"].max_open_zones // 2 if per_class else groups["zns"].max_open_zones - 1
            return max(1, min(ZNS_DEFAULT_CLASSES, room))
        return 1

    def _pid_map(self) -> np.ndarray:
        n_pid = int(getattr(self.device, "n_placement_ids", 1))
        if "fdp" in self.cfg.device_params:
            return (np.arange(self.n_classes) % n_pid).astype(np.int16)
        return np.zeros(self.n_classes, np.int16)

    def _evict_policy(self) -> str:
        p = self.cfg.layout.evict_policy
        if p != "tier":
            return p
        recorded = _tier_policy(self.reader.meta, self.cfg.replay.tier)
        self.evict_policy_source = recorded
        return "fifo" if recorded == "fifo" else "lru"

    # -------------------------------------------------------------------------------- op production
    def columns(self) -> list[str]:
        cols = list(SCAN_COLUMNS)
        for c in self.policy_cls.columns:
            if c not in cols:
                cols.append(c)
        return cols

    def op_segments(self) -> Iterator["Segment | Mark"]:
        """Produce op segments in trace order, with a :class:`Mark` whenever every event before a row is done.

        This is the whole "trace -> ops" side (read, select, hints, layout); it never submits anything, so
        any target can consume it, and it may run ahead of the consumer in another thread: a Mark carries
        the counters as they were at its row, so a run stopped at a Mark reports a consistent prefix.
        """
        rp = self.cfg.replay
        lut = action_table(rp.tier_code)
        obuf = OpBuffer(OP_BUFFER_MIN)
        bound = self.layout.op_bound(self.scan.max_object_pages)
        obuf.ensure(max(OP_BUFFER_MIN, 8 * bound))
        row0 = 0
        scale = rp.time_scale
        class_writes = np.zeros(self.n_classes, np.int64)
        class_bytes = np.zeros(self.n_classes, np.int64)
        action_counts = np.zeros(len(ACTION_NAMES), np.int64)
        clock = time.perf_counter
        tm = self.stage_s

        def mark(row: int, ts: int) -> Mark:
            return Mark(row, ts, self.layout.stats(), class_writes.copy(), class_bytes.copy(), action_counts.copy())

        t = clock()
        for batch in prefetched(self.reader.iter_batches(self.columns())):
            t1 = clock()
            tm["read_wait"] += t1 - t
            n = batch.n
            act, tidx = select(lut, batch["op"], batch["tier"])
            w_idx = tidx[act[tidx] == A_WRITE]
            t2 = clock()
            tm["select"] += t2 - t1
            cls = self.policy.assign(batch, act, w_idx)
            tm["hints"] += clock() - t2
            if len(cls) and (cls.min() < 0 or cls.max() >= self.n_classes):
                raise RuntimeError(f"hint policy {self.cfg.hints} returned a class outside [0, {self.n_classes})")
            if len(tidx) == 0:
                row0 += n
                yield mark(row0, int(batch["ts_ns"][-1]))
                t = clock()
                continue
            ev_act = act[tidx]
            ev_obj = batch["obj_id"][tidx]
            ev_nbytes = batch["nbytes"][tidx]
            ev_pages = pages_of(ev_nbytes, self.page_bytes)
            ev_ts = batch["ts_ns"][tidx]
            ev_cls = np.zeros(len(tidx), np.int16)
            is_w = ev_act == A_WRITE
            ev_cls[is_w] = cls
            ev_pid = self.pid_of_class[ev_cls]
            rel = ev_ts - self.t0
            ev_arr = rel if scale == 1.0 else np.floor(rel / scale).astype(np.int64)
            ctx = BatchEvents(act=ev_act, arrival=ev_arr, window=rel // self.window_ns,
                              done=np.full(len(tidx), -1, np.int64),
                              first=np.full(len(tidx), np.iinfo(np.int64).max, np.int64))
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
                        f"the namespace is full of nothing evictable or too small for it", where=self.cfg.trace)
                if status == S_NO_PROGRESS:
                    i = int(tidx[nxt])
                    raise KvbedError(
                        f"row {row0 + i}: zns layout cannot free a zone (every zone is full of live data and "
                        f"nothing is left to evict); give the device more zones", where=self.cfg.trace)
                if status not in (S_DONE, S_BUFFER_FULL, S_GROW):
                    raise RuntimeError(f"layout returned status {status}")
                # count only the events the layout got through, so a Mark inside the batch agrees with the layout
                action_counts += np.bincount(ev_act[start:nxt], minlength=len(ACTION_NAMES))[: len(ACTION_NAMES)]
                w = is_w[start:nxt]
                np.add.at(class_writes, ev_cls[start:nxt][w], 1)
                np.add.at(class_bytes, ev_cls[start:nxt][w], ev_nbytes[start:nxt][w])
                if nops:
                    yield from self._split(obuf.ob, nops, ctx)
                start = nxt
                if 0 < start < len(tidx):  # events before this row are fully produced
                    yield mark(row0 + int(tidx[start]), int(ev_ts[start - 1]))
            row0 += n
            yield mark(row0, int(batch["ts_ns"][-1]))
            t = clock()

    def _split(self, ob: np.ndarray, n: int, ctx: "BatchEvents") -> Iterator[Segment]:
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

    # -------------------------------------------------------------------------------- submission
    def _submit(self, ops: dict[str, np.ndarray]) -> np.ndarray:
        """done_ns of every op; raises TargetStopped if the target failed part-way (see Target)."""
        rp = self.cfg.replay
        if not rp.as_fast_as_possible:
            batch = {k: ops[k] for k in ("op", "lba", "npages", "pid", "arrival_ns")}
            try:
                return self.target.submit(batch).done_ns
            except KvbedError as exc:
                part = _completed_prefix(exc)
                if part is None:
                    raise
                raise TargetStopped(exc, len(part), part) from None
        # closed loop: each op takes the slot that frees first, never before the previous op's arrival
        n = len(ops["op"])
        done = np.empty(n, np.int64)
        arr = np.empty(n, np.int64)
        qd = rp.queue_depth
        for a in range(0, n, qd):
            b = min(n, a + qd)
            k = b - a
            slots = self._slots[:k]
            part_arr = np.maximum.accumulate(np.maximum(slots, self._last_arrival))
            part = {"op": ops["op"][a:b], "lba": ops["lba"][a:b], "npages": ops["npages"][a:b],
                    "pid": ops["pid"][a:b], "arrival_ns": part_arr}
            try:
                d = self.target.submit(part).done_ns
            except KvbedError as exc:
                got = _completed_prefix(exc)
                if got is None:
                    raise
                k = len(got)
                done[a:a + k] = got
                arr[a:a + k] = part_arr[:k]
                ops["arrival_ns"] = arr
                raise TargetStopped(exc, a + k, done[:a + k]) from None
            done[a:b] = d
            arr[a:b] = part_arr
            self._last_arrival = int(part_arr[-1])
            self._slots = np.sort(np.concatenate((self._slots[k:], d)))
        ops["arrival_ns"] = arr
        return done

    def run(self) -> dict[str, Any]:
        """Replay the whole trace (or until ``should_stop``); returns the parts of the result."""
        wall0 = time.perf_counter()
        self.stage_s = {k: 0.0 for k in ("read_wait", "select", "hints", "layout", "device", "record")}
        self.prepare()
        rp = self.cfg.replay
        self._slots = np.zeros(rp.queue_depth, np.int64)
        self._last_arrival = 0
        H, W = R.new_hists()
        self.H = H
        seg_acc = np.zeros(R.ACC_N, np.int64)
        win_acc = np.zeros(R.ACC_N, np.int64)
        self.total_acc = np.zeros(R.ACC_N, np.int64)
        rows: list[dict[str, Any]] = []
        counters0 = self.target.counters()
        last_counters = dict(counters0)
        self._t_first_arr = None
        self._t_last_done = 0
        cur_win = 0
        incomplete = False
        self.failure: str | None = None
        if self.progress:
            self.progress.phase("replay", self.reader.num_rows)

        def close_until(w: int) -> None:
            nonlocal cur_win, last_counters
            while cur_win < w:
                c = self.target.counters()
                rows.append(self._window_row(cur_win, c, last_counters, W, win_acc))
                last_counters = c
                clear_rows(W)
                win_acc[:] = 0
                cur_win += 1

        t_replay = time.perf_counter()
        last_mark = Mark(0, self.t0, self.layout.stats(), np.zeros(self.n_classes, np.int64),
                         np.zeros(self.n_classes, np.int64), np.zeros(len(ACTION_NAMES), np.int64))
        # op production runs one step ahead in its own thread (its kernels release the GIL)
        for item in prefetched(self.op_segments(), depth=8):
            if isinstance(item, Mark):
                if self.progress and item.row > last_mark.row:
                    self.progress.advance(item.row - last_mark.row)
                last_mark = item
                if self.should_stop():
                    incomplete = item.row < self.reader.num_rows
                    break
                continue
            seg = item
            t0 = time.perf_counter()
            close_until(seg.window)
            ops = seg.ops
            try:
                done = self._submit(ops)
            except TargetStopped as stop:  # keep what completed, then stop: the result is partial
                ops = {k: v[: stop.completed] for k, v in ops.items()}
                done = stop.done
                self.failure = str(stop.error)
                incomplete = True
            t1 = time.perf_counter()
            seg_acc[:] = 0
            ev = seg.events
            R.record_segment(ops["op"], ops["src"], ops["event"], done, ops["arrival_ns"], ev.act, ev.first,
                             ev.done, H, W, seg_acc, ops["npages"])
            self.stage_s["device"] += t1 - t0
            self.stage_s["record"] += time.perf_counter() - t1
            win_acc += seg_acc
            self.total_acc += seg_acc
            if len(done):
                if self._t_first_arr is None:
                    self._t_first_arr = int(ops["arrival_ns"][0])
                self._t_last_done = max(self._t_last_done, int(done.max()))
            if self.failure is not None:
                break
        replay_s = time.perf_counter() - t_replay
        self.last_mark = last_mark
        rows_done = last_mark.row
        # windows up to the last event replayed, then that one
        close_until(max(cur_win, (last_mark.ts_ns - self.t0) // self.window_ns))
        close_until(cur_win + 1)
        return self._result(rows, counters0, rows_done, incomplete, wall0, replay_s)

    # -------------------------------------------------------------------------------- results
    def _window_row(self, w: int, c: dict[str, int], prev: dict[str, int], W: np.ndarray, acc: np.ndarray) -> dict:
        pb = self.page_bytes
        row: dict[str, Any] = {
            "window": w,
            "t_start_ns": w * self.window_ns,
            "t_end_ns": (w + 1) * self.window_ns,
            "user_bytes_written": int(acc[0]) * pb,
            "host_gc_bytes_written": int(acc[1]) * pb,
            "zone_resets": int(acc[2]),
            "read_ops": int(acc[3]),
            "write_ops": int(acc[4]),
        }
        d = {k: int(c[k]) - int(prev.get(k, 0)) for k in c}
        host = d.get("host_pages_written", int(acc[0]) + int(acc[1]))
        media = d.get("media_pages_written", host)
        row["host_bytes_written"] = host * pb
        row["media_bytes_written"] = media * pb
        row["waf"] = media / host if host else None
        host_cum = c.get("host_pages_written", 0)
        media_cum = c.get("media_pages_written", host_cum)
        row["waf_cumulative"] = media_cum / host_cum if host_cum else None
        user_cum = int(self.total_acc[0])
        row["end_to_end_waf_cumulative"] = (media_cum if "media_pages_written" in c else user_cum + int(self.total_acc[1])) / user_cum if user_cum else None
        for k in ("gc_runs", "gc_pages_moved", "gc_fg_stall_ns", "block_erases"):
            if k in d:
                row[k] = d[k]
        for r, name in enumerate(R.W_NAMES):
            h = LatencyHistogram(W[r])
            for p, tag in ((50.0, "p50"), (99.0, "p99"), (99.9, "p999")):
                row[f"{name}_lat_{tag}_ns"] = h.value_at(p) if h.n else None
        return row

    def _result(self, rows, counters0, rows_done, incomplete, wall0, replay_s) -> dict[str, Any]:
        from testbed.core.version import __version__
        from testbed.results import io_entry

        cfg, sc, pb = self.cfg, self.scan, self.page_bytes
        dev_stats = self.target.stats()
        c = self.target.counters()
        mk = self.last_mark
        lay = mk.layout  # the layout as of the last event replayed (the producer may have run ahead)
        user_pages = lay["pages_written"]
        if self.failure is not None:  # the target stopped inside an event: count the writes that completed
            user_pages = int(self.total_acc[0])
        host_pages = c.get("host_pages_written", user_pages + lay.get("gc_relocated_pages", 0))
        media_pages = c.get("media_pages_written", host_pages)
        runtime_ns = max(0, self._t_last_done - (self._t_first_arr or 0))
        H = self.H
        hist = {name: LatencyHistogram(H[i]) for i, name in enumerate(R.H_NAMES)}
        job: dict[str, Any] = {
            "jobname": f"{cfg.device}-{cfg.hints}",
            "device": cfg.device,
            "hints": cfg.hints,
            "tier": cfg.replay.tier,
            "classes": self.n_classes,
            "runtime_ns": runtime_ns,
        }
        io_bytes = {"read": lay["pages_read"] * pb, "write": user_pages * pb, "trim": int(self.total_acc[5]) * pb}
        for name in ("read", "write", "trim", "zone_reset"):
            h = hist[name]
            if h.n or name in ("read", "write"):
                job[name] = io_entry(h, io_bytes.get(name), runtime_ns)
        job["object_read"] = io_entry(hist["object_read"], lay["pages_read"] * pb, runtime_ns)
        job["object_write"] = io_entry(hist["object_write"], user_pages * pb, runtime_ns)
        if hist["gc_read"].n or hist["gc_write"].n:
            job["host_gc_read"] = io_entry(hist["gc_read"], None, runtime_ns)
            job["host_gc_write"] = io_entry(hist["gc_write"], lay["gc_relocated_pages"] * pb, runtime_ns)
        job["waf"] = media_pages / host_pages if host_pages else None
        job["host_waf"] = host_pages / user_pages if user_pages else None
        job["end_to_end_waf"] = media_pages / user_pages if user_pages else None
        job["user_bytes_written"] = user_pages * pb
        job["host_bytes_written"] = host_pages * pb
        job["media_bytes_written"] = media_pages * pb
        gc = dev_stats.get("gc", {})
        job["gc"] = {k: gc[k] for k in ("runs", "fg_runs", "bg_runs", "pages_moved", "bytes_moved", "fg_stall_ns") if k in gc}
        job["gc_count"] = gc.get("runs", 0)
        job["gc_stall_ns"] = gc.get("fg_stall_ns", 0)
        job["erases"] = c.get("block_erases", 0)
        job["zone_resets"] = lay.get("zone_resets", 0)
        job["host_gc"] = {
            "runs": lay.get("gc_runs", 0),
            "relocated_bytes": lay.get("gc_relocated_pages", 0) * pb,
            "zone_resets": lay.get("zone_resets", 0),
        }
        if "wear" in dev_stats:
            job["wear"] = dev_stats["wear"]
        if "fdp" in dev_stats:
            job["per_ruh"] = dev_stats["fdp"].get("per_ruh", [])
        if "zns" in cfg.device_params:
            job["zones"] = {k: lay[k] for k in ("zones", "zone_pages", "zone_cap_pages", "streams", "gc_free_zones",
                                                "gc_stream", "zones_by_state", "zone_resets_max")}
            job["zones"]["per_group"] = [  # the zones of each stream, like per_ruh on FDP
                {**{k: v for k, v in g.items() if not k.endswith("_pages")},
                 "valid_bytes": g["valid_pages"] * pb, "relocated_bytes": g["relocated_pages"] * pb}
                for g in lay["per_stream"]]
        job["per_class"] = [
            {"class": k, "pid": int(self.pid_of_class[k]), "writes": int(mk.class_writes[k]),
             "bytes_written": int(mk.class_bytes[k])}
            for k in range(self.n_classes)
        ]
        job["layout"] = {**{k: v for k, v in lay.items() if k != "per_stream"}, "evict_policy": self.evict_policy,
                         "evict_policy_recorded": getattr(self, "evict_policy_source", None)}
        job["hint_policy"] = {"name": cfg.hints, "knows": self.policy.knows, "offline": self.policy.needs_future,
                              **self.policy.describe()}
        job["events"] = {
            "trace_rows": sc.rows,
            "rows_replayed": int(rows_done),
            "tier_events_by_action": {ACTION_NAMES[i]: int(v) for i, v in enumerate(mk.action_counts) if i},
        }
        result = {
            FIO_VERSION_KEY: f"kvbed-{__version__}",
            "incomplete": bool(incomplete),
            "global options": cfg.to_dict(),
            "trace": {"path": cfg.trace, "format_version": self.reader.meta.format_version,
                      "source": self.reader.meta.source, "geometry": self.reader.meta.geometry},
            "scan": sc.to_dict(),
            "sizing": cfg.sizing,
            "window_ns": self.window_ns,
            "precondition": self.precondition_result,
            "jobs": [job],
            "device": dev_stats,
        }
        if incomplete:
            result["stopped_at_row"] = int(rows_done)
        if self.failure is not None:
            result["error"] = self.failure
        lat_rows = []
        for name, h in hist.items():
            nz = np.flatnonzero(h.h[:NBUCKETS])
            for i in nz:
                lat_rows.append((name, int(i), int(h.h[i])))
        wall = time.perf_counter() - wall0
        runtime = {
            "wall_s": wall,
            "scan_s": self.scan_s,
            "replay_s": replay_s,
            "rows_per_s": rows_done / wall if wall > 0 else None,
            "replay_stage_s": {k: round(v, 4) for k, v in self.stage_s.items()},
            "incomplete": bool(incomplete),
            "layout_memory_bytes": self.layout.state.nbytes(),
            "policy_memory_bytes": self.policy.memory_bytes(),
        }
        return {"config": cfg.to_dict(), "result": result, "timeseries": rows, "latency": lat_rows,
                "runtime": runtime}


def replay(config: RunConfig, *, progress: Progress | None = None,
           should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    return Replay(config, progress=progress, should_stop=should_stop).run()

