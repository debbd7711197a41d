#!/usr/bin/env python3
"""Benchmark: import + tier-simulate + write the Mooncake conversation trace (target < 3 s).

Measured in-process with the numba cache warm (one warm-up run first), median of --runs runs,
split into phases; CPU time is printed beside wall time because the machine's 2 cores are shared. Also times the whole `kvbed trace import` command in a fresh interpreter
(includes Python start-up, imports and loading the cached kernels) for reference.

    python scripts/bench_trace_import.py [--runs 5] [--trace PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = (ROOT / "../shared/data/traces/mooncake/conversation_trace.jsonl").resolve()


def one_run(src: Path, out: Path) -> dict[str, float]:
    from kvreplay.importers import IMPORTERS
    from kvreplay.schema import TraceMeta
    from kvreplay.tiers import TierSimParams
    from kvreplay.tiers.sim import simulate_to_file

    c0 = time.process_time()
    t0 = time.perf_counter()
    reqs = IMPORTERS.get("mooncake")().read_requests(src)
    facts = reqs.facts()
    t1 = time.perf_counter()
    meta = TraceMeta(source=reqs.source, source_facts=facts, generator={"importer": "mooncake"})
    res = simulate_to_file(reqs, TierSimParams(), out, meta)
    t2 = time.perf_counter()
    return {"read_s": t1 - t0, "simulate_write_s": t2 - t1, "total_s": t2 - t0, "events": res.events,
            "cpu_s": time.process_time() - c0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trace", type=Path, default=DEFAULT)
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"skip: {args.trace} not present")
        return
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "mc.parquet"
        one_run(args.trace, out)  # warm-up: numba cache load / compile
        runs = [one_run(args.trace, out) for _ in range(args.runs)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"mooncake import + tier simulation + write, in-process, numba cache warm, median of {args.runs}:")
        print(f"  read+parse+facts {med['read_s']:.3f} s | simulate+write {med['simulate_write_s']:.3f} s "
              f"| total {med['total_s']:.3f} s  ({int(med['events']):,} events, "
              f"{med['events'] / med['total_s'] / 1e6:.2f} M events/s)   target < 3 s: "
              f"{'PASS' if med['total_s'] < 3 else 'FAIL'}")
        print("  all runs (total s): " + ", ".join(f"{r['total_s']:.3f}" for r in runs))
        print(f"  CPU time of this process (what an unshared core would take): median {med['cpu_s']:.3f} s; "
              f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        walls = []
        for _ in range(3):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", "from testbed.cli import main; main()", "trace", "import",
                            "mooncake", str(args.trace), "-o", str(out), "--json"], check=True, capture_output=True, cwd=ROOT)
            walls.append(time.perf_counter() - t)
        print(f"  `kvbed trace import` end to end incl. interpreter start and imports: median "
              f"{statistics.median(walls):.3f} s (runs {', '.join(f'{w:.2f}' for w in walls)})")


if __name__ == "__main__":
    main()
