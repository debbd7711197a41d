#!/usr/bin/env python3
"""Benchmark: a three-tier replay (cpu, cxl, ssd) of the Mooncake conversation trace against the single-tier
replay of its ssd tier, in trace events per second.

The trace is imported once with a CXL tier (cpu 256 GiB, cxl 512 GiB, ssd 4 TiB). Both runs are in-process
with the numba cache warm (one warm-up of each first) and alternate, so the shared machine's noise falls on
both alike; medians of --runs. Events per second = trace rows / (wall - numba compile/load time), the figure
runtime.json reports; the three-tier run reads the trace once per tier plus the request pass.

    python scripts/bench_tiers.py [--runs 5] [--trace PATH]
"""

from __future__ import annotations

import argparse
import statistics
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trace", type=Path, default=DEFAULT)
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"skip: {args.trace} not present")
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
