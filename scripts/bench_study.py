#!/usr/bin/env python3
"""Benchmark `kvbed study` (issue 10 targets); prints medians of several runs.

Targets on 2 cores: a 16-point grid with -j 2 at least 1.7x faster than with -j 1; a rerun of a finished
study under 5 s; the full studies/kv-hints-fdp.toml under 10 minutes. Also reported: the Ray executor's
overhead per point against the local one (same grid, same -j).

What is timed: the whole `kvbed study run` command in a fresh process (interpreter start, spec
validation, the worker pool, every point, table, summary and report), with the numba cache warm (a
warm-up run fills it) and the grid's trace already built (the trace stage is timed apart), so the figures
are about running points.

    python scripts/bench_study.py            # everything (~20 min on 2 cores; the full study is most of it)
    python scripts/bench_study.py --quick    # skip the full kv-hints-fdp study
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KVBED = [sys.executable, "-c", "from testbed.cli import main; main()"]

# 16 points: 4 hint policies x 2 OP x 2 RU sizes on the default synthetic trace (~620K events), one seed
GRID = """
[study]
name = "bench16"
seeds = [0]

[trace]
synth = true

[replay]
device = "fdp"
fill_ratio = 1.0

[axes]
"replay.hints" = ["none", "type", "predicted", "oracle"]
"replay.param.op_ratio" = [0.07, 0.28]
"replay.param.ru_bytes" = ["64MiB", "256MiB"]
"""


def run(spec: Path, out: Path, *args: str) -> float:
    t0 = time.perf_counter()
    res = subprocess.run([*KVBED, "study", "run", str(spec), "-o", str(out), "-q", *args], capture_output=True,
                         text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    dt = time.perf_counter() - t0
    if res.returncode:
        raise SystemExit(f"study run failed: {res.stdout}{res.stderr}")
    return dt


def fresh(work: Path, name: str, keep_traces: Path | None) -> Path:
    """An empty study directory that already has the grid's built trace (the trace stage is not timed)."""
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    if keep_traces is not None:
        shutil.copytree(keep_traces, out / "traces")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per figure (median reported)")
    ap.add_argument("--quick", action="store_true", help="skip the full kv-hints-fdp study")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-study-"))
    spec = work / "grid.toml"
    spec.write_text(GRID)
    print(f"16-point grid (4 hint policies x 2 OP x 2 RU sizes, default synthetic trace); median of {a.runs}")
    t_trace = run(spec, work / "warm", "-j", "2")  # builds the trace, fills the numba cache
    print(f"  warm-up (trace build + 16 points + report): {t_trace:.1f} s")
    traces = work / "warm" / "traces"
    times: dict[str, list[float]] = {"-j 1": [], "-j 2": [], "ray -j 2": []}
    for i in range(a.runs):
        for label, args in (("-j 1", ["-j", "1"]), ("-j 2", ["-j", "2"]),
                            ("ray -j 2", ["-j", "2", "--executor", "ray"])):
            times[label].append(run(spec, fresh(work, f"s-{i}-{label.replace(' ', '')}", traces), *args))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"  {k:9s} {med[k]:6.1f} s   runs: {', '.join(f'{x:.1f}' for x in v)}")
    speedup = med["-j 1"] / med["-j 2"]
    print(f"  -j 2 vs -j 1: {speedup:.2f}x (target >= 1.7x)")
    print(f"  Ray overhead against local processes, -j 2: {(med['ray -j 2'] - med['-j 2']) / 16 * 1000:+.0f} ms "
          f"per point ({med['ray -j 2'] - med['-j 2']:+.1f} s for 16 points, Ray start-up included)")
    reruns = [run(spec, work / "warm", "-j", "2") for _ in range(a.runs)]
    print(f"  rerun of the finished study: {statistics.median(reruns):.2f} s (target < 5 s)   runs: "
          f"{', '.join(f'{x:.2f}' for x in reruns)}")
    ok = speedup >= 1.7 and statistics.median(reruns) < 5
    if not a.quick:
        full = ROOT / "studies" / "kv-hints-fdp.toml"
        t = run(full, work / "kv-hints-fdp", "-j", "2")
        print(f"\nfull studies/kv-hints-fdp.toml (192 points, 4 traces built), -j 2: {t / 60:.1f} min (target < 10)")
        ok &= t < 600
    shutil.rmtree(work, ignore_errors=True)
    print(f"\nall targets met: {ok}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
