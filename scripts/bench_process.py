#!/usr/bin/env python3
"""Benchmark the whole ``kvbed replay`` process: start-up, imports, kernel loading, replay, result files, plots.

What is measured: one ``kvbed replay TRACE -o DIR`` in a fresh process, plots drawn and the summary table
printed (to a pipe), as a user runs it, from the interpreter's start to its exit: wall time and the child's CPU
time (user + sys of all its threads, from the kernel's rusage), which other work on a shared machine disturbs
less than the wall clock. Figures are medians of ``--runs`` runs; nothing is asserted.

The trace: the Mooncake conversation trace imported as the README's session does (``kvbed trace import
mooncake ... --ssd-bytes 1TiB --ssd-policy s3fifo``: 3.37M events), built once under ``--cache``; ``--trace``
replays another one. Numba kernels come from the on-disk cache (a warm-up run per tree fills it first).

``--old TREE`` (a checkout of another commit, e.g. ``git worktree add ../old <commit>``) runs that tree's code
alternately with this one's (the order swapped every pair, so both see the same machine load) and prints both
medians side by side with new/old. A tree with its own ``.venv`` runs with that interpreter, any other with
this one and ``PYTHONPATH=TREE``; each tree keeps its own numba cache (``TREE/.cache/numba``).

Python's bytecode cache: a shell with ``PYTHONDONTWRITEBYTECODE`` set (this sandbox's) never writes kvbed's
``__pycache__``, so every process compiles its sources again (~0.1 s); ``--bytecode`` runs as an ordinary
shell does, the warm-up writing the bytecode the timed runs read.

Run: ``python scripts/bench_process.py [--runs 5] [--old ../old] [--no-plots] [--bytecode] [-- EXTRA REPLAY ARGS]``
(about 5 s a run on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = (ROOT / "../shared/data/traces/mooncake/conversation_trace.jsonl").resolve()
IMPORT_ARGS = ["--ssd-bytes", "1TiB", "--ssd-policy", "s3fifo"]  # the README's session
ENTRY = "from testbed.cli import main; main()"  # the `kvbed` console script, for any tree and interpreter


def _python(tree: Path) -> str:
    venv = tree / ".venv" / "bin" / "python"
    return str(venv) if tree != ROOT and venv.exists() else sys.executable


def _env(tree: Path, bytecode: bool = False) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(tree / ".cache" / "numba"))
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def build_trace(path: Path) -> None:
    if path.exists():
        return
    print(f"importing {MOONCAKE.name} -> {path} ...", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [_python(ROOT), "-c", ENTRY, "trace", "import", "mooncake", str(MOONCAKE), "-o", str(path), *IMPORT_ARGS]
    out = subprocess.run(cmd, capture_output=True, text=True, env=_env(ROOT), cwd=ROOT)
    if out.returncode:
        raise SystemExit(f"trace import failed: {' '.join(cmd)}\n{out.stderr}")


def run_once(tree: Path, trace: Path, out_dir: Path, extra: list[str], bytecode: bool = False) -> dict[str, float]:
    """One replay process: wall seconds and the child's CPU seconds (user + sys, every thread)."""
    cmd = [_python(tree), "-c", ENTRY, "replay", str(trace), "-o", str(out_dir), *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # cwd=tree: ``python -c`` puts the working directory first on sys.path, ahead of PYTHONPATH, so run from
    # another tree's root the child would import that tree's code instead of this one's
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tree, bytecode), cwd=tree)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode:
        raise SystemExit(f"replay failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    runtime = json.loads((out_dir / "runtime.json").read_text())  # out_dir: absolute (a temporary directory)  # the replay's own figures, for context
    return {"wall_s": wall, "cpu_s": cpu, "replay_wall_s": runtime["wall_s"], "jit_s": runtime["jit_s"]}


def _fmt(xs: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=ROOT / ".cache" / "bench")
    ap.add_argument("--trace", type=Path, default=None, help="replay this trace [default: the imported Mooncake]")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per tree (medians are reported)")
    ap.add_argument("--old", type=Path, default=None, metavar="TREE", help="compare with another checkout")
    ap.add_argument("--no-plots", action="store_true", help="replay with --no-plots")
    ap.add_argument("--bytecode", action="store_true",
                    help="run without PYTHONDONTWRITEBYTECODE, as an ordinary shell does: the warm-up run writes the "
                         "trees' bytecode (__pycache__) and the timed runs read it instead of compiling kvbed's "
                         "sources (~0.1 s a process)")
    ap.add_argument("extra", nargs="*", help="more `kvbed replay` arguments (after --)")
    a = ap.parse_args()

    trace = (a.trace or a.cache / "mooncake-readme.parquet").resolve()  # the runs' working directory is their tree
    if a.trace is None:
        build_trace(trace)
    extra = a.extra + (["--no-plots"] if a.no_plots else [])
    trees = {"new": ROOT} if a.old is None else {"old": a.old.resolve(), "new": ROOT}
    with tempfile.TemporaryDirectory(prefix="bench_process-") as tmp:
        out = Path(tmp)
        print(f"warm-up (numba caches): {', '.join(f'{k} = {v}' for k, v in trees.items())}", flush=True)
        for name, tree in trees.items():
            run_once(tree, trace, out / f"warm-{name}", extra, a.bytecode)
        load0 = os.getloadavg()[0]
        rs: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
        for i in range(a.runs):
            for name in (list(trees) if i % 2 == 0 else list(trees)[::-1]):
                rs[name].append(run_once(trees[name], trace, out / f"{name}-{i}", extra, a.bytecode))
        load = (load0 + os.getloadavg()[0]) / 2

    print(f"\nkvbed replay {trace.name} {' '.join(extra)} -o DIR: whole process, {a.runs} runs per tree, "
          f"load average {load:.1f} (2 cores = 2.0 busy)"
          + ("; bytecode written and read" if a.bytecode or not os.environ.get("PYTHONDONTWRITEBYTECODE")
             else "; PYTHONDONTWRITEBYTECODE set: kvbed's sources compiled in every run"))
    print(f"{'tree':5} {'cpu s (median)':>15} {'wall s (median)':>16} {'replay s':>9} {'jit s':>6}   "
          f"runs cpu | wall")
    med = {}
    for name, runs in rs.items():
        m = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        med[name] = m
        print(f"{name:5} {m['cpu_s']:15.2f} {m['wall_s']:16.2f} {m['replay_wall_s']:9.2f} {m['jit_s']:6.2f}   "
              f"{_fmt([r['cpu_s'] for r in runs])} | {_fmt([r['wall_s'] for r in runs])}")
    if "old" in med:
        print(f"new/old: cpu {med['new']['cpu_s'] / med['old']['cpu_s']:.3f}, "
              f"wall {med['new']['wall_s'] / med['old']['wall_s']:.3f}")
    a.cache.mkdir(parents=True, exist_ok=True)
    (a.cache / "bench_process.json").write_text(json.dumps({"trace": str(trace), "extra": extra, "load": load,
                                                             "bytecode": a.bytecode,
                                                             "trees": {k: str(v) for k, v in trees.items()},
                                                             "runs": rs}, indent=1))


if __name__ == "__main__":
    main()
