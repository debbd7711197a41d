#!/usr/bin/env python3
"""Benchmark: decode speed of ``TraceReader.iter_batches`` against raw Arrow on a 10M-event trace.

Raw Arrow is the floor: ``ParquetFile.read_row_group`` plus ``to_numpy`` of every column (dictionary
columns as their indices, unmapped). The reader adds the enum/string code mapping and its checks;
both are reported in ns per event, median of --runs passes over the whole file (all columns), after
one untimed pass to warm the page cache. The trace is the one scripts/bench_trace_stats.py makes
(the default synthetic trace tiled in time), cached in --workdir.

    python scripts/bench_trace_read.py [--events 10000000] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def raw_arrow(path: Path) -> int:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    n = 0
    for rg in range(pf.num_row_groups):
        table = pf.read_row_group(rg)
        for col in table.columns:
            for chunk in col.chunks:
                (chunk.indices if hasattr(chunk, "indices") else chunk).to_numpy(zero_copy_only=False)
        n += table.num_rows
    return n


def reader(path: Path) -> int:
    from kvreplay.schema import TraceReader

    return sum(b.n for b in TraceReader(path).iter_batches())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "kvbed-bench-stats")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_trace_stats import tiled_trace

    path = tiled_trace(args.workdir, args.events)
    for name, fn in (("raw arrow", raw_arrow), ("TraceReader", reader)):
        fn(path)  # warm
        times, n = [], 0
        for _ in range(args.runs):
            t = time.perf_counter()
            n = fn(path)
            times.append(time.perf_counter() - t)
        med = statistics.median(times)
        print(f"{name:12s} {n:,} events: median {med:.3f} s = {med / n * 1e9:.1f} ns/event  "
              f"(runs: {', '.join(f'{x:.3f}' for x in times)})")


if __name__ == "__main__":
    main()
