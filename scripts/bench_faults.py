#!/usr/bin/env python3
"""Benchmark faults and recovery contracts on the Mooncake conversation trace: replay events/s without faults,
with a fault set under each contract, and what each contract costs in bytes and I/O.

What is measured: ``Replay.run()`` in a fresh process per run (numba kernels from the on-disk cache; a warm-up
run fills it); ``events_per_s`` is trace events over the run's wall time without numba's load time, the fault
analysis pass included; ``fault_s`` is that pass alone. The fault set strikes at fixed shares of the trace's
span: a power loss with a stale index (50 ms after the first SSD write burst past 30%), a media-error rate (50%), a missed model update (70%).

Run: ``python scripts/bench_faults.py [--runs N] [--trace mc.parquet]`` (imports the trace once into
``--cache`` when not given). Prints one table and writes ``bench_faults.json`` beside the cache.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = (ROOT / "../shared/data/traces/mooncake/conversation_trace.jsonl").resolve()
CONTRACTS = ("none", "checksum", "version", "full")

CHILD = r"""
import json, sys
from kvreplay.replay import Replay, build_config
trace, params = sys.argv[1], json.loads(sys.argv[2])
parts = Replay(build_config(trace, "fdp", "none", params)).run()
job, rt, f = parts["result"]["jobs"][0], parts["runtime"], parts["result"].get("faults")
print(json.dumps({"events_per_s": rt["events_per_s"], "wall_s": rt["wall_s"], "jit_s": rt["jit_s"],
                  "fault_s": rt.get("fault_analysis_s", 0.0), "waf": job["waf"],
                  "user_bytes_written": job["user_bytes_written"], "media_bytes_written": job["media_bytes_written"],
                  "faults": f}))
"""


def run(trace: Path, params: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(trace), json.dumps(params)], check=True,
                         capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def span_and_burst(trace: Path, share: float) -> tuple[int, int]:
    """(the trace's span, 50 ms after the first SSD write burst past ``share`` of it): SSD writes come in
    bursts, so an instant picked blindly usually finds nothing in flight."""
    import numpy as np

    from kvreplay import schema as S

    b = S.read_trace(trace, columns=["ts_ns", "op", "tier"])[0]
    rel = b["ts_ns"] - b["ts_ns"][0]
    w = rel[(b["op"] == S.OP_PERSIST) & (b["tier"] == S.TIER_SSD)]
    span = int(rel[-1])
    return span, int(w[np.searchsorted(w, int(span * share))]) + 50_000_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/kvbed-bench-faults"))
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    trace = args.trace
    if trace is None:
        args.cache.mkdir(parents=True, exist_ok=True)
        trace = args.cache / "mooncake-conversation.parquet"
        if not trace.exists():
            subprocess.run([sys.executable, "-c", "from testbed.cli import cli; cli()", "trace", "import", "mooncake",
                            str(MOONCAKE), "-o", str(trace)], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    span, burst = span_and_burst(trace, 0.3)
    fset = (f"power-loss@{burst},index=stale,stale_ns=60s;"
            f"media-error@{span // 2},rate_per_bit=1e-11;"
            f"version-drift@{span * 7 // 10}")
    configs = {"baseline": []}
    for c in CONTRACTS:
        configs[f"faults+{c}"] = [f"fault={fset}", f"contract={c}"]
    run(trace, configs["faults+full"])  # warm-up: fills numba's cache
    load0 = os.getloadavg()[0]
    rows = {}
    for name, params in configs.items():
        got = [run(trace, params) for _ in range(args.runs)]
        med = statistics.median(r["events_per_s"] for r in got)
        rows[name] = {**got[0], "events_per_s_median": med, "events_per_s_all": [r["events_per_s"] for r in got],
                      "fault_s_median": statistics.median(r["fault_s"] for r in got)}
        r = rows[name]
        f = r["faults"] or {}
        line = f"{name:16s} {med:>12,.0f} ev/s  fault pass {r['fault_s_median']:6.2f} s  WAF {r['waf']:.4f}  " \
               f"user {r['user_bytes_written'] / 2**40:.3f} TiB"
        if f:
            ct, tot = f["contract"], f["total"]["outcomes"]
            line += (f"  +{ct['extra_bytes_written'] / 2**30:,.1f} GiB written +{ct['extra_bytes_read'] / 2**30:,.1f} GiB "
                     f"read, index {ct['index_metadata_bytes_peak'] / 2**20:.2f} MiB  | reused {tot['reused']['objects']:,} "
                     f"detected {tot['detected']['objects']:,} missing {tot['missing']['objects']:,} "
                     f"wrong {tot['wrong']['objects']:,}")
        print(line, flush=True)
    out = args.cache / "bench_faults.json"
    from kvreplay.schema import TraceReader

    out.write_text(json.dumps({"trace": str(trace), "events": TraceReader(trace).num_rows, "span_ns": span,
                               "faults": fset, "runs_per_config": args.runs,
                               "loadavg_1min": [load0, os.getloadavg()[0]], "runs": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
