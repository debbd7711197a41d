"""Run directories: what a replay leaves behind, and how reports read it back.

A run directory holds

=================== ==========================================================
config.json         everything needed to rerun (``kvbed replay --config``)
result.json         fio-shaped: ``"kvbed version"``, ``"global options"``,
                    ``"jobs"`` with read/write/trim ``lat_ns`` percentiles at
                    fio's list, WAF, GC, erases, zone resets, per-RUH/zone and
                    per-class figures; ``"device"`` = the model's own stats
timeseries.parquet  one row per trace-time window: bytes, WAF, GC, latency
                    percentiles
latency.parquet     the non-empty buckets of every latency histogram
                    (series, low_ns, high_ns, count): exact CDFs for plots
runtime.json        wall-clock figures (the only file that differs between
                    two runs with the same config and seed)
vm.json             ``--target vm`` only: the VM, the device's log pages
                    before and after, the guest's latency histograms and
                    counters (testbed.vm.replay)
*.png               plots made from the files above (testbed.plots)
=================== ==========================================================

The directory is assembled under a temporary name, plots included, and renamed
into place, so a failed or killed run never leaves a half-written one; an
existing run directory at the target is replaced as a whole. A run the user
interrupted (Ctrl-C) is still written whole, with ``"incomplete": true`` and
``"interrupted": PHASE`` (``replay``, ``writing results`` or ``plotting``) in
result.json and runtime.json; its figures cover what was replayed.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from devicemodels.histogram import LatencyHistogram, _LOW, _WIDTH
from kvbed.core.atomicio import check_can_make_dir, json_default, temp_dir_for
from kvbed.core.errors import KvbedError
from kvreplay.arrow_numpy import column_to_numpy, from_values
from testbed.interrupt import Interrupt

RUN_FILES = ("config.json", "result.json", "timeseries.parquet", "latency.parquet")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=json_default, allow_nan=False) + "\n"


def _clean(obj: Any) -> Any:
    """NaN/inf are not JSON: write them as null."""
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.floating):
        return _clean(float(obj))
    return obj


def timeseries_table(rows: list[dict[str, Any]]) -> pa.Table:
    if not rows:
        return pa.table({"window": from_values([], pa.int64())})
    names: list[str] = []
    for r in rows:
        for k in r:
            if k not in names:
                names.append(k)
    cols = {}
    for k in names:
        vals = [r.get(k) for r in rows]
        kind = {type(v) for v in vals if v is not None}
        typ = pa.string() if str in kind else pa.float64() if float in kind else pa.int64()
        cols[k] = from_values(vals, typ)
    return pa.table(cols)


def latency_table(rows: list[tuple[str, int, int]]) -> pa.Table:
    series = [r[0] for r in rows]
    idx = np.array([r[1] for r in rows], np.int64)
    low = _LOW[idx].astype(np.int64) if len(idx) else np.zeros(0, np.int64)
    high = (low + _WIDTH[idx].astype(np.int64) - 1) if len(idx) else np.zeros(0, np.int64)
    return pa.table({
        "series": from_values(series, pa.string()),
        "low_ns": from_values(low, pa.int64()),
        "high_ns": from_values(high, pa.int64()),
        "count": from_values([r[2] for r in rows], pa.int64()),
    })


def is_run_dir(path: Path) -> bool:
    """A directory kvbed wrote: its config.json (or result.json) is kvbed's, not just any file of that name."""
    for name, key in (("config.json", "kvbed_version"), ("result.json", "kvbed version")):
        try:
            doc = json.loads((path / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and key in doc:
            return True
    return False


def check_out_dir(out_dir: str | os.PathLike) -> Path:
    """Refuse an output path that is a file or a non-empty directory that is not a run (checked before a run:
    a run directory is replaced as a whole, so anything else in it would be lost)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise KvbedError("exists and is not a directory", where=str(out))
    check_can_make_dir(out, str(out))
    if out.is_dir() and any(out.iterdir()) and not is_run_dir(out):
        raise KvbedError("exists, is not empty and is not a kvbed run directory; choose another -o", where=str(out))
    return out


def mark_interrupted(parts: dict[str, Any], phase: str) -> None:
    """A run the user stopped: incomplete, and where it stopped (whatever its figures cover)."""
    for key in ("result", "runtime"):
        parts.setdefault(key, {}).update(incomplete=True, interrupted=phase)


def write_run(out_dir: str | os.PathLike, parts: dict[str, Any], *,
              plots: Callable[[Run, Callable[[], bool]], Any] | None = None,
              interrupt: Interrupt | None = None) -> Path:
    """Write config/result/timeseries/latency/runtime into ``out_dir`` atomically (directory swap).

    ``plots(run, should_stop)`` draws into ``run.path`` (the directory being assembled) before it is renamed
    into place; ``run`` is what :func:`load_run` would read from the files just written (the JSON parsed
    back, the tables as written), named after ``out_dir``, so the plots read nothing back from disk. With
    ``interrupt``, a Ctrl-C at any point before the rename (also one that came during the replay) marks
    the run incomplete (:func:`mark_interrupted`); plotting stops at the next plot."""
    out = check_out_dir(out_dir)
    tmp = temp_dir_for(out)
    try:
        if interrupt is not None and interrupt():
            mark_interrupted(parts, interrupt.phase or "")
        if interrupt is not None:
            interrupt.enter("writing results")
        config_text, result_text = _dumps(_clean(parts["config"])), _dumps(_clean(parts["result"]))
        (tmp / "config.json").write_text(config_text)
        (tmp / "result.json").write_text(result_text)
        ts, lat = timeseries_table(parts["timeseries"]), latency_table(parts["latency"])
        pq.write_table(ts, tmp / "timeseries.parquet", compression="zstd")
        pq.write_table(lat, tmp / "latency.parquet", compression="zstd")
        (tmp / "runtime.json").write_text(_dumps(_clean(parts.get("runtime", {}))))
        for name, obj in (parts.get("files") or {}).items():  # extra JSON files a target collected
            if Path(name).name != name or not name.endswith(".json") or name in RUN_FILES + ("runtime.json",):
                raise ValueError(f"extra run file {name!r}: a plain *.json name other than the standard files")
            (tmp / name).write_text(_dumps(_clean(obj)))
        if plots is not None and not (interrupt is not None and interrupt()):
            if interrupt is not None:
                interrupt.enter("plotting")
            run = Run(tmp, json.loads(config_text), json.loads(result_text), ts, lat, out.resolve().name)
            plots(run, interrupt or (lambda: False))
        if interrupt is not None and interrupt() and not parts["result"].get("interrupted"):
            mark_interrupted(parts, interrupt.phase or "")  # came while writing or plotting
            (tmp / "result.json").write_text(_dumps(_clean(parts["result"])))
            (tmp / "runtime.json").write_text(_dumps(_clean(parts.get("runtime", {}))))
        if out.exists():
            old = out.with_name(f".{out.name}.old.{os.getpid()}")
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


@dataclass
class Run:
    path: Path
    config: dict[str, Any]
    result: dict[str, Any]
    timeseries: pa.Table
    latency: pa.Table
    name: str | None = None  # the run's name when it is read from elsewhere (its directory being assembled)

    @property
    def job(self) -> dict[str, Any]:
        return self.result["jobs"][0]

    @property
    def label(self) -> str:
        """The run directory's name (what the user chose with -o), which tells runs apart."""
        return self.name or self.path.resolve().name

    def histogram(self, series: str) -> tuple[np.ndarray, np.ndarray]:
        """(upper bound ns, count) of the non-empty buckets of one latency series, ascending."""
        t = self.latency
        if t.num_rows == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        mask = np.array(t.column("series").to_pylist()) == series
        hi = column_to_numpy(t.column("high_ns"))[mask]
        cnt = column_to_numpy(t.column("count"))[mask]
        order = np.argsort(hi)
        return hi[order], cnt[order]


def _read_parquet(path: Path) -> pa.Table:
    """The table pq.read_table gives, without its dataset layer, which imports pandas (~0.3 s)."""
    with pq.ParquetFile(path) as f:
        return f.read()


def load_run(path: str | os.PathLike, name: str | None = None) -> Run:
    p = Path(path)
    if not p.is_dir():
        raise KvbedError("not a run directory (no such directory)", where=str(p))
    for part in RUN_FILES:
        if not (p / part).exists():
            raise KvbedError(f"not a complete run directory (missing {part})", where=str(p))
    try:
        config = json.loads((p / "config.json").read_text())
        result = json.loads((p / "result.json").read_text())
    except ValueError as exc:
        raise KvbedError(f"unreadable JSON ({exc})", where=str(p)) from None
    if not isinstance(config, dict):
        raise KvbedError("config.json is not a JSON object", where=str(p / "config.json"))
    jobs = result.get("jobs") if isinstance(result, dict) else None
    if not isinstance(jobs, list) or not jobs or not isinstance(jobs[0], dict):
        raise KvbedError("result.json has no jobs", where=str(p / "result.json"))
    try:
        ts, lat = _read_parquet(p / "timeseries.parquet"), _read_parquet(p / "latency.parquet")
    except (pa.ArrowInvalid, OSError) as exc:
        raise KvbedError(f"unreadable Parquet ({str(exc).splitlines()[0]})", where=str(p)) from None
    return Run(p, config, result, ts, lat, name)
