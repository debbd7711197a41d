"""Running a study: traces first (each distinct setting once), then every point not already done, on local
processes or Ray tasks; the driver alone writes the study directory.

Directory (``DIR``):

=========================== ===========================================================================
study.toml                  the spec as given
study.json                  the expanded grid: every point's axes, seed, trace and run hashes;
                            ``"incomplete": true`` until a run has been through every point (Ctrl-C)
traces/<hash>.parquet       one per distinct trace setting (hash of its settings and input file)
runs/<hash>/                an ordinary replay run directory per point (rerun with ``kvbed replay
                            --config``), plus point.json; ``runs/<hash>.error.json`` for a failed point
table.parquet, table.csv    one row per point (testbed.study.table)
summary.csv                 mean, 95% CI and distinct values across seeds
report.md, report.html      the report (testbed.study.report), plots in plots/
=========================== ===========================================================================

A point is done when its result.json is complete and its point.json matches (same trace, same
parameters): a rerun skips it. A point that fails records its one-line error and the others go on. A
trace whose rows fail the row checks (:func:`kvreplay.validate.check_trace`, each trace once, before any
point runs) stops the study with that trace's one-line error: none of its points would give a figure.
Workers return a run's parts to the driver instead of writing, so a Ray worker needs no shared filesystem
(its trace comes through the object store when the path is not there).
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from kvbed.core.atomicio import atomic_path, write_json
from kvbed.core.errors import KvbedError
from testbed.study.spec import Point, Study, TraceSetting


@dataclass
class Task:
    """One unit of work for a worker: build a trace, or replay a point."""

    kind: str  # trace | point
    key: str  # trace hash or run hash
    trace: TraceSetting
    trace_path: str  # where the trace is (or is to be written) on the driver's filesystem
    trace_fingerprint: str | None = None
    point: Point | None = None


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the driver, which stops them (SIGTERM); a worker stopped so unwinds (exits
    through SystemExit) so that a trace it was writing leaves no temporary file behind."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _build_trace(setting: TraceSetting, out: str) -> None:
    from kvreplay.synth import SynthParams
    from kvreplay.tiers import TierSimParams
    from kvreplay.tracegen import import_trace, synth_trace

    tier = TierSimParams(**setting.tier)
    if setting.kind == "import":
        import_trace(setting.importer, setting.source, tier, out)
    else:
        synth_trace(SynthParams(**setting.synth), tier, out)


def do_task(task: Task, trace_bytes: Any = None) -> dict[str, Any]:
    """Run one task in a worker; never raises for a bad point (the error comes back as text)."""
    t0 = time.perf_counter()
    try:
        if task.kind == "trace":
            _build_trace(task.trace, task.trace_path)
            return {"key": task.key, "ok": True, "wall_s": time.perf_counter() - t0}
        from kvreplay.replay.engine import Replay

        path = _local_trace(task, trace_bytes)
        cfg = task.point.build_config(path)
        parts = Replay(cfg, trace_checked=True).run()  # run_study checked the trace before any point
        parts["config"]["trace"]["path"] = task.trace_path  # the driver's path, whatever the worker used
        parts["result"]["global options"]["trace"]["path"] = task.trace_path
        parts["result"]["trace"]["path"] = task.trace_path
        return {"key": task.key, "ok": True, "parts": parts, "wall_s": time.perf_counter() - t0}
    except KvbedError as exc:
        return {"key": task.key, "ok": False, "error": str(exc), "wall_s": time.perf_counter() - t0}
    except Exception as exc:  # a bug, not bad input: keep it, say what it was, let the others go on
        return {"key": task.key, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                "wall_s": time.perf_counter() - t0}


def _local_trace(task: Task, trace_bytes: Any) -> str:
    """The trace's path on this worker: the driver's file if this worker sees it, else a copy of the bytes
    shipped through Ray's object store, kept in the worker's cache by hash."""
    from kvreplay.replay.config import trace_fingerprint

    p = Path(task.trace_path)
    if p.exists() and trace_fingerprint(p) == task.trace_fingerprint:
        return str(p)
    if trace_bytes is None:
        raise KvbedError("trace not found on this worker and not shipped", where=str(p))
    import ray

    data = ray.get(trace_bytes[0])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvbed" / "study-traces"
    local = cache / f"{task.trace.hash()}.parquet"
    if not local.exists() or trace_fingerprint(local) != task.trace_fingerprint:
        with atomic_path(local) as tmp:
            tmp.write_bytes(data)
    return str(local)


# ---------------------------------------------------------------------------------------------- executors
class LocalExecutor:
    """A pool of ``jobs`` worker processes (spawned: nothing of the driver's state is shared)."""

    def __init__(self, jobs: int):
        import multiprocessing as mp

        self.jobs = jobs
        self.pool = mp.get_context("spawn").Pool(jobs, initializer=_ignore_sigint)

    def map(self, tasks: list[Task], shipped: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        yield from self.pool.imap_unordered(do_task, tasks)

    def close(self, *, abort: bool = False) -> None:
        if abort:
            self.pool.terminate()
        else:
            self.pool.close()
        self.pool.join()

    def overhead(self) -> str:
        return f"local, {self.jobs} processes"


class RayExecutor:
    """Ray tasks (one CPU each) on ``ray.init(address)``; a local Ray with ``jobs`` CPUs when no address is
    given. At most two tasks per CPU are in flight (``ray.wait``), so a large grid is not all queued."""

    def __init__(self, jobs: int | None, address: str | None):
        try:
            import ray
        except ImportError:
            raise KvbedError("--executor ray needs Ray: pip install 'kvbed[cluster]' (or ray)") from None
        self.ray = ray
        self.started = not ray.is_initialized()
        if self.started:
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
            if address:
                kw["address"] = address
            else:
                kw["num_cpus"] = jobs or os.cpu_count() or 1
            ray.init(**kw)
        self.cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.remote = ray.remote(num_cpus=1, max_retries=0)(do_task)
        self.refs: dict[str, Any] = {}

    def ship(self, key: str, path: Path) -> Any:
        """Put a trace in the object store once; tasks get a reference they resolve only if they need it."""
        if key not in self.refs:
            self.refs[key] = self.ray.put(path.read_bytes())
        return self.refs[key]

    def map(self, tasks: list[Task], shipped: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        ray = self.ray
        todo = list(reversed(tasks))
        pending: list[Any] = []
        while todo or pending:
            while todo and len(pending) < 2 * self.cpus:
                t = todo.pop()
                ref = (shipped or {}).get(t.trace.hash())
                pending.append(self.remote.remote(t, [ref] if ref is not None else None))
            done, pending = ray.wait(pending, num_returns=1)
            self._pending = pending
            yield ray.get(done[0])

    def close(self, *, abort: bool = False) -> None:
        if abort:
            for ref in getattr(self, "_pending", []):
                self.ray.cancel(ref, force=True)
        if self.started:
            self.ray.shutdown()

    def overhead(self) -> str:
        return f"ray, {self.cpus} CPUs"


def make_executor(name: str, jobs: int | None, address: str | None) -> Any:
    if name == "local":
        return LocalExecutor(jobs or os.cpu_count() or 1)
    if name == "ray":
        return RayExecutor(jobs, address)
    raise KvbedError(f"unknown executor {name!r} (choose from: local, ray)")


# ---------------------------------------------------------------------------------------------- the driver
@dataclass
class Outcome:
    points: int
    ran: int
    skipped: int
    failed: int
    interrupted: bool
    traces_built: int
    wall_s: float


def _point_record(study: Study, pt: Point, th: str, rh: str) -> dict[str, Any]:
    return {"index": pt.index, "axes": pt.axes, "seed": pt.seed, "device": pt.device, "hints": pt.hints,
            "replay": pt.replay, "params": pt.params, "trace_hash": th, "run_hash": rh}


def plan(study: Study, out: Path) -> dict[str, Any]:
    """study.json: the traces and points with their hashes (what every later step reads)."""
    settings = study.traces()
    flat = {th: {**ts.tier, **ts.synth} for th, ts in settings.items()}
    traces = {}
    for th, ts in settings.items():
        file = ts.path if ts.kind == "path" else f"traces/{th}.parquet"
        # the settings that tell it from the other traces of its kind and source (seeds aside)
        kin = [flat[h] for h, t in settings.items() if t.label() == ts.label()]
        differ = [k for k in flat[th] if k != "seed" and len({json.dumps(f.get(k)) for f in kin}) > 1]
        label = ts.label() + "".join(f" {k}={flat[th][k]}" for k in differ)
        traces[th] = {"setting": asdict(ts), "label": label, "file": file}
    points = []
    for pt in study.points:
        th = pt.trace.hash()
        points.append(_point_record(study, pt, th, pt.hash(th)))
    return {"name": study.name, "description": study.description, "spec": str(study.path),
            "axes": {k: v for k, v in study.axes.items()}, "zips": study.zips, "seeds": study.seeds,
            "metrics": study.metrics,
            "plots": study.plots, "traces": traces, "points": points}


def _done(out: Path, rec: dict[str, Any]) -> bool:
    d = out / "runs" / rec["run_hash"]
    try:
        res = json.loads((d / "result.json").read_text())
        return not res.get("incomplete") and json.loads((d / "point.json").read_text()) == rec
    except (OSError, ValueError):
        return False


def run_study(study: Study, out: Path, *, executor: str = "local", jobs: int | None = None,
              address: str | None = None, progress: Callable[..., Any] | None = None,
              log: Callable[[str], None] = lambda s: None) -> Outcome:
    """Build the missing traces, run the missing points, write the table; Ctrl-C stops submitting, keeps
    what finished and stops the workers (the run is resumable)."""
    from kvreplay.replay.config import trace_fingerprint
    from kvreplay.validate import check_trace
    from testbed.results import write_run
    import pandas  # noqa: F401  (before any work: a Ctrl-C landing in a first import leaves it half done)

    from testbed.study import table

    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs").mkdir(exist_ok=True)
    (out / "traces").mkdir(exist_ok=True)
    doc = plan(study, out)
    with atomic_path(out / "study.toml") as tmp:
        tmp.write_text(study.text)
    write_json(out / "study.json", {**doc, "incomplete": True})  # until every point has been through
    trace_paths = {th: (Path(t["file"]) if Path(t["file"]).is_absolute() else out / t["file"])
                   for th, t in doc["traces"].items()}
    settings = study.traces()
    missing = [th for th, p in trace_paths.items() if not p.exists()]
    recs = doc["points"]
    todo = [r for r in recs if not _done(out, r)]
    skipped = len(recs) - len(todo)
    ran = failed = 0
    interrupted = False
    ex = None
    bar = progress(len(recs), skipped) if progress else None
    try:
        if missing or todo:
            ex = make_executor(executor, jobs, address)
        if missing:
            log(f"building {len(missing)} trace(s) ...")
            tasks = [Task("trace", th, settings[th], str(trace_paths[th])) for th in missing]
            for r in ex.map(tasks):
                if not r["ok"]:
                    raise KvbedError(f"trace {r['key']}: {r['error']}")
        for th in sorted({r["trace_hash"] for r in todo}):  # each trace once, before any point runs
            check_trace(trace_paths[th])
        by_key = {r["run_hash"]: (r, pt) for r, pt in zip(recs, study.points)}
        fps = {th: trace_fingerprint(p) for th, p in trace_paths.items()}
        shipped = {}
        if isinstance(ex, RayExecutor):
            shipped = {th: ex.ship(th, trace_paths[th]) for th in {r["trace_hash"] for r in todo}}
        tasks = [Task("point", r["run_hash"], by_key[r["run_hash"]][1].trace, str(trace_paths[r["trace_hash"]]),
                      fps[r["trace_hash"]], by_key[r["run_hash"]][1]) for r in todo]
        for res in (ex.map(tasks, shipped) if tasks else ()):
            rec = by_key[res["key"]][0]
            err_file = out / "runs" / f"{res['key']}.error.json"
            if res["ok"]:
                res["parts"].setdefault("files", {})["point.json"] = rec
                write_run(out / "runs" / res["key"], res["parts"])
                err_file.unlink(missing_ok=True)
                ran += 1
            else:
                write_json(err_file, {"error": res["error"], "point": rec})
                failed += 1
            if bar:
                bar(ok=res["ok"], error=res.get("error"))
    except KeyboardInterrupt:
        interrupted = True
        if ex is not None:
            ex.close(abort=True)
            ex = None
    finally:
        if ex is not None:
            ex.close()
    try:
        table.refresh(out)
        if not interrupted:
            write_json(out / "study.json", {**doc, "incomplete": False})
    except KeyboardInterrupt:  # the table is rebuilt by the next run or `study report`
        interrupted = True
    return Outcome(points=len(recs), ran=ran, skipped=skipped, failed=failed, interrupted=interrupted,
                   traces_built=len(missing), wall_s=time.perf_counter() - t0)


def status(out: Path) -> dict[str, Any]:
    """Per point: done, failed (with its error) or missing; from the saved files only."""
    try:
        doc = json.loads((out / "study.json").read_text())
    except FileNotFoundError:
        raise KvbedError("not a study directory (no study.json)", where=str(out)) from None
    rows = []
    for rec in doc["points"]:
        err = out / "runs" / f"{rec['run_hash']}.error.json"
        if _done(out, rec):
            state, error = "done", None
        elif err.exists():
            state, error = "failed", json.loads(err.read_text())["error"]
        else:
            state, error = "missing", None
        rows.append({**rec, "state": state, "error": error})
    return {"name": doc["name"], "points": rows, "incomplete": bool(doc.get("incomplete")),
            "counts": {s: sum(r["state"] == s for r in rows) for s in ("done", "failed", "missing")}}
