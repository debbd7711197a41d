#!/usr/bin/env python3
"""Benchmark: a three-tier replay (cpu, cxl, ssd) of the Mooncake conversation trace against the single-tier
replay of its ssd tier, in trace events per second; with ``--simulate``, the tier simulator itself.

The trace is imported once with a CXL tier (cpu 256 GiB, cxl 512 GiB, ssd 4 TiB). Both runs are in-process
with the numba cache warm (one warm-up of each first) and alternate, so the shared machine's noise falls on
both alike; medians of --runs. Events per second = trace rows / (wall - numba compile/load time), the figure
runtime.json reports; the three-tier run reads the trace once per tier plus the request pass.

    python scripts/bench_tiers.py [--runs 5] [--trace PATH]

``--simulate [--against OLD_TREE]``: seconds of ``simulate()`` on the trace (requests read once, events
dropped) for policy mixes that exercise eviction (every eviction of a FIFO/CLOCK/S3-FIFO tier passes over
the pinned first chunk most requests share). Each round runs in a fresh interpreter (numba cache warm, one
untimed warm-up), alternating this tree and OLD_TREE (a checkout of the code before a change); medians of
--runs rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = (ROOT / "../shared/data/traces/mooncake/conversation_trace.jsonl").resolve()


def import_trace(src: Path, out: Path) -> None:
    from click.testing import CliRunner

    from testbed.cli import cli

    res = CliRunner().invoke(cli, ["trace", "import", "mooncake", str(src), "-o", str(out), "--cpu-bytes", "256GiB",
                                   "--cxl-bytes", "512GiB", "--ssd-bytes", "4TiB"])
    assert res.exit_code == 0, res.output


def single(trace: Path) -> dict[str, float]:
    from kvreplay.replay import Replay, build_config

    t = time.perf_counter()
    parts = Replay(build_config(trace, "fdp", "none")).run()
    return {"wall_s": time.perf_counter() - t, "events_per_s": parts["runtime"]["events_per_s"]}


def three(trace: Path) -> dict[str, float]:
    from kvreplay.replay.multitier import MultiTierReplay, build_multitier_config

    t = time.perf_counter()
    cfg = build_multitier_config(trace, ["cpu", "cxl", "ssd"], {}, {"": "none"})
    parts = MultiTierReplay(cfg).run()
    rt = parts["runtime"]
    return {"wall_s": time.perf_counter() - t, "events_per_s": rt["events_per_s"],
            "request_pass_s": rt["request_pass_s"]}


GiB = 1 << 30
#: name -> TierSimParams overrides (fields every version of the simulator has)
SIM_CONFIGS = {
    "default (lru)": {},
    "all fifo": {f"{t}_policy": "fifo" for t in ("gpu", "cpu", "cxl", "ssd")},
    "all s3fifo": {f"{t}_policy": "s3fifo" for t in ("gpu", "cpu", "cxl", "ssd")},
    "gpu-only clock 32 GiB": {"gpu_bytes": 32 * GiB, "cpu_bytes": 0, "ssd_bytes": 0, "gpu_policy": "clock"},
}


def sim_round(trace: Path) -> dict[str, float]:
    """One timed simulate() per configuration, after an untimed warm-up (run in the tree on sys.path)."""
    import dataclasses

    from kvreplay.importers import IMPORTERS
    from kvreplay.tiers import TierSimParams, simulate

    reqs = IMPORTERS.get("mooncake")().read_requests(trace)
    simulate(reqs, TierSimParams(), lambda b: None)
    out = {}
    for name, kw in SIM_CONFIGS.items():
        p = dataclasses.replace(TierSimParams(), **kw)
        t, c = time.perf_counter(), time.process_time()
        res = simulate(reqs, p, lambda b: None)
        out[name] = time.perf_counter() - t
        out[f"{name} cpu"] = time.process_time() - c
        out[f"{name} events"] = res.events
    return out


def bench_simulate(trace: Path, runs: int, against: Path | None) -> None:
    trees = {"this": ROOT} | ({"old": against.resolve()} if against else {})
    got: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
    for _ in range(runs):
        for label, tree in trees.items():
            env = dict(os.environ, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(tree / ".cache" / "numba"))
            res = subprocess.run([sys.executable, __file__, "--sim-round", "--trace", str(trace)], env=env, cwd=tree,
                                 check=True, capture_output=True, text=True)
            got[label].append(json.loads(res.stdout.strip().splitlines()[-1]))
    print(f"tier simulator, Mooncake conversation trace, simulate(): median of {runs} rounds (alternating), "
          f"wall s / CPU s of the process (CPU: less sensitive to the shared cores); load average now "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for name in SIM_CONFIGS:
        wall = {k: statistics.median(r[name] for r in v) for k, v in got.items()}
        cpu = {k: statistics.median(r[f"{name} cpu"] for r in v) for k, v in got.items()}
        events = {k: v[0][f"{name} events"] for k, v in got.items()}
        line = "  ".join(f"{k} {wall[k]:.3f} / {cpu[k]:.3f} s ({events[k]:,} events)" for k in wall)
        if "old" in wall:
            line += (f"  this vs old: wall {100 * (wall['this'] / wall['old'] - 1):+.1f}%, "
                     f"CPU {100 * (cpu['this'] / cpu['old'] - 1):+.1f}%")
        print(f"  {name:24s} {line}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trace", type=Path, default=DEFAULT)
    ap.add_argument("--simulate", action="store_true", help="time the tier simulator instead of the replays")
    ap.add_argument("--against", type=Path, help="--simulate: alternate with this tree (the code before a change)")
    ap.add_argument("--sim-round", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"skip: {args.trace} not present")
        return
    if args.sim_round:  # a worker of --simulate: the tree to time is on PYTHONPATH
        print(json.dumps(sim_round(args.trace)))
        return
    if args.simulate:
        bench_simulate(args.trace, args.runs, args.against)
        return
    sys.path.insert(0, str(ROOT))
    from kvreplay.schema import TraceReader

    with tempfile.TemporaryDirectory() as d:
        trace = Path(d) / "mc3.parquet"
        import_trace(args.trace, trace)
        rows = TraceReader(trace).num_rows
        single(trace), three(trace)  # warm-up: numba cache load / compile
        a, b = [], []
        for _ in range(args.runs):
            a.append(single(trace))
            b.append(three(trace))
        med = lambda runs, k: statistics.median(r[k] for r in runs)  # noqa: E731
        print(f"Mooncake conversation trace with a CXL tier: {rows:,} events; median of {args.runs}, alternating")
        print(f"  single-tier (ssd on fdp):        {med(a, 'events_per_s'):>12,.0f} events/s  "
              f"({med(a, 'wall_s'):.2f} s wall)")
        print(f"  three-tier (cpu dram, cxl, ssd): {med(b, 'events_per_s'):>12,.0f} events/s  "
              f"({med(b, 'wall_s'):.2f} s wall, request pass {med(b, 'request_pass_s'):.2f} s)")
        print(f"  three-tier / single-tier speed:  {med(b, 'events_per_s') / med(a, 'events_per_s'):.2f}")


if __name__ == "__main__":
    main()
