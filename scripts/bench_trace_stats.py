#!/usr/bin/env python3
"""Benchmark: read a 10M-event lifecycle trace and compute `kvbed trace stats` (target < 10 s),
with peak RSS to show memory is bounded by row groups (plus per-object state), not by events.

The 10M-event trace is made once (cached in --workdir): the default synthetic trace tiled in time
with object ids shifted per copy, streamed through TraceWriter. Each measurement runs in a fresh
interpreter (numba cache warm) so ru_maxrss is the stats pass alone; the baseline RSS of the same
interpreter after imports is reported beside it. Median of --runs.

    python scripts/bench_trace_stats.py [--events 10000000] [--runs 3]

Old against new: ``--against DIR`` (another checkout, e.g. ``git archive main | tar -x -C DIR``) times the stats
pass of both, alternating old, new, old, new... (each with its own numba cache, warmed first), and prints the
median of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
mode, path = sys.argv[1], sys.argv[2]
from kvreplay.stats import trace_stats
from kvreplay.validate import validate_trace
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter(); c = time.process_time()
if mode == "stats":
    s = trace_stats(path); n = s["rows"]
else:
    r = validate_trace(path); n = r.rows
    assert r.ok, r.counts
print(json.dumps({"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c, "rows": n,
                  "base_rss_kib": base, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def make_trace(path: Path, events: int) -> None:
    import numpy as np

    from kvreplay.schema import TraceReader, TraceWriter
    from kvreplay.synth import SYNTH_TIER_DEFAULTS, SynthParams, synthesize
    from kvreplay.tiers.sim import simulate_to_file

    base = path.with_name("base.parquet")
    from kvreplay.schema import TraceMeta

    reqs = synthesize(SynthParams())
    simulate_to_file(reqs, SYNTH_TIER_DEFAULTS, base, TraceMeta(source={"importer": "synth"}))
    r = TraceReader(base)
    b = r.read_all()
    span = int(b["ts_ns"][-1] - b["ts_ns"][0]) + 1
    max_id = int(b["obj_id"].max())
    meta = r.meta
    meta.extra["tiled"] = {"copies_of": str(base), "events": events}
    with TraceWriter(path, meta, tenants=r.tenants, scopes=r.scopes) as w:
        done, k = 0, 0
        while done < events:
            part = b.take(slice(0, min(b.n, events - done)))
            part["ts_ns"] = part["ts_ns"] + k * span
            part["obj_id"] = part["obj_id"] + np.uint64(k * max_id)
            nz = part["parent_id"] != 0
            part["parent_id"] = np.where(nz, part["parent_id"] + np.uint64(k * max_id), 0).astype(np.uint64)
            part["request_id"] = np.where(part["request_id"] >= 0, part["request_id"] + k * 10**7, -1)
            w.write(part)
            done += part.n
            k += 1


def tiled_trace(workdir: Path, events: int) -> Path:
    """The tiled trace of ``events`` events in ``workdir``, made on first use."""
    sys.path.insert(0, str(ROOT))
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"tiled-{events}.parquet"
    if not path.exists():
        t = time.perf_counter()
        make_trace(path, events)
        print(f"made {path} ({path.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t:.1f} s")
    return path


def measure(mode: str, path: Path, root: Path = ROOT) -> dict:
    """One pass in a fresh interpreter importing the code of ``root`` (its own numba cache when not ours)."""
    import os

    env = dict(os.environ)
    if root != ROOT:
        env["NUMBA_CACHE_DIR"] = str(root / ".cache" / "numba-bench")
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(path)], check=True, capture_output=True, text=True,
                         cwd=root, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(path: Path, old: Path, runs: int) -> None:
    for root in (old, ROOT):
        measure("stats", path, root)  # warm each numba cache
    got: dict[str, list[dict]] = {"old": [], "new": []}
    for _ in range(runs):
        got["old"].append(measure("stats", path, old))
        got["new"].append(measure("stats", path))
    med = {k: {f: statistics.median(r[f] for r in v) for f in ("wall_s", "cpu_s", "peak_rss_kib")}
           for k, v in got.items()}
    for k, v in got.items():
        m = med[k]
        print(f"{k} ({old if k == 'old' else ROOT}): stats of {v[0]['rows']:,} events, "
              f"median wall {m['wall_s']:.2f} s, cpu {m['cpu_s']:.2f} s, peak RSS {m['peak_rss_kib'] / 1024:.0f} MiB; "
              "runs (wall / cpu s): "
              + ", ".join(f"{r['wall_s']:.2f} / {r['cpu_s']:.2f}" for r in v))
    print("new / old: " + ", ".join(f"{f} x{med['new'][f] / med['old'][f]:.2f}"
                                    for f in ("wall_s", "cpu_s", "peak_rss_kib")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "kvbed-bench-stats")
    ap.add_argument("--against", type=Path, help="another checkout: time its stats pass and ours, alternating")
    args = ap.parse_args()
    path = tiled_trace(args.workdir, args.events)
    if args.against:
        compare(path, args.against.resolve(), args.runs)
        return
    measure("stats", path)  # warm the numba cache
    for mode in ("stats", "validate"):
        runs = [measure(mode, path) for _ in range(args.runs)]
        wall = statistics.median(r["wall_s"] for r in runs)
        cpu = statistics.median(r["cpu_s"] for r in runs)
        peak = statistics.median(r["peak_rss_kib"] for r in runs) / 1024
        base = statistics.median(r["base_rss_kib"] for r in runs) / 1024
        target = "   target < 10 s: " + ("PASS" if wall < 10 else "FAIL") if mode == "stats" else ""
        print(f"{mode} of {runs[0]['rows']:,} events: median wall {wall:.2f} s, cpu {cpu:.2f} s "
              f"({runs[0]['rows'] / wall / 1e6:.1f} M events/s); peak RSS {peak:.0f} MiB "
              f"(interpreter + imports {base:.0f} MiB){target}")
        print("  runs (wall s): " + ", ".join(f"{r['wall_s']:.2f}" for r in runs))


if __name__ == "__main__":
    main()
