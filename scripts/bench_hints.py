#!/usr/bin/env python3
"""Benchmark a hint policy's cost: replay time with ``learned`` (or any policy) against ``none`` (issue 23: a
learned policy costs at most 2x the replay time of ``none``).

What is measured: ``Replay.run()`` in a fresh process per run (scripts/bench_replay.py's child: both passes,
result assembly; not interpreter start-up), and a second ``Replay.run()`` in the same process after it (the
cost of every later point of a study, whose workers live for many points: scikit-learn's ~1.1 s import and
numba's kernel loading are paid by the first). ``none`` and the policy (with ``--old``, both with another tree's
code too) run in a rotating order, each run starting at the next case, so all see the same machine load;
medians, their ratio, and the ratio of CPU seconds (the child's threads; scikit-learn fits use OpenMP threads,
so CPU time shows the cost the wall clock may hide).

Trace: the Mooncake conversation trace as kv-hints-fdp imports it (1 TiB S3-FIFO SSD tier), replayed on fdp
with op_ratio 0.07 and fill_ratio 1.0 (the setting where the oracle cuts WAF by 10%). Built once under
``--cache``. Numba kernels come from the on-disk cache (a warm-up run of each policy fills it).

``--command`` also times the whole ``kvbed replay TRACE --device fdp --hints H`` command per policy (as
scripts/bench_process.py does: interpreter start, imports, replay, result files, plots; what a user waits for), in
the same rotation.

Run: ``python scripts/bench_hints.py [--runs 5] [--hints learned] [--copies 4] [--old TREE] [--command]``.
``--old`` (a checkout of another commit) measures both policies with the old tree's code too, all four
alternating in one run, and prints each tree's ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
MOONCAKE = (ROOT / "../shared/data/traces/mooncake/conversation_trace.jsonl").resolve()
PARAMS = ["op_ratio=0.07", "fill_ratio=1.0"]


def _print_part(title: str, rs: dict[tuple[str, str], list[dict]], trees: dict, hints: str) -> None:
    """Medians of wall and CPU seconds per tree and policy, each run's wall time, and the policy/none ratios."""
    wall = {c: statistics.median(r["wall_s"] for r in v) for c, v in rs.items()}
    cpu = {c: statistics.median(r["cpu_s"] for r in v) for c, v in rs.items()}
    print(f"\n{title}\n{'tree':5} {'hints':10} {'median wall s':>14} {'median cpu s':>13}   runs (wall s)")
    for t, h in rs:
        runs = " ".join(f"{r['wall_s']:.2f}" for r in rs[t, h])
        print(f"{t:5} {h:10} {wall[t, h]:14.2f} {cpu[t, h]:13.2f}   {runs}")
    for t in trees:
        print(f"{t:5} {hints}/none: wall {wall[t, hints] / wall[t, 'none']:.2f}x, "
              f"cpu {cpu[t, hints] / cpu[t, 'none']:.2f}x")


def main() -> None:
    from bench_process import run_once
    from bench_replay import build_mooncake, run_child

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=ROOT / ".cache" / "bench")
    ap.add_argument("--runs", type=int, default=5, help="runs per policy (medians are reported)")
    ap.add_argument("--hints", default="learned", help="the policy compared with none")
    ap.add_argument("--trace", type=Path, help="another lifecycle trace instead of the Mooncake one")
    ap.add_argument("--copies", type=int, default=1,
                    help="N > 1: the Mooncake trace N times back to back as scripts/bench_replay.py builds it "
                         "(its default tiers: 2 TiB SSD), so fixed costs (the scikit-learn import) weigh less")
    ap.add_argument("--old", type=Path, metavar="TREE", help="also measure a checkout of another commit, alternating")
    ap.add_argument("--command", action="store_true",
                    help="also time the whole kvbed replay command (plots included), in the same rotation")
    a = ap.parse_args()
    trace = a.trace
    if trace is None and a.copies > 1:
        trace = a.cache / f"mooncake-x{a.copies}.parquet"
        if not trace.exists():
            a.cache.mkdir(parents=True, exist_ok=True)
            build_mooncake(trace, a.copies)
    if trace is None:
        trace = a.cache / "mooncake-conversation-1TiB-s3fifo.parquet"
        if not trace.exists():
            a.cache.mkdir(parents=True, exist_ok=True)
            kvbed = Path(sys.executable).parent / "kvbed"
            subprocess.run([str(kvbed), "trace", "import", "mooncake", str(MOONCAKE), "-o", str(trace),
                            "--ssd-bytes", "1TiB", "--policy", "ssd=s3fifo"], check=True, capture_output=True)
    trees = {"new": ROOT, **({"old": a.old.resolve()} if a.old else {})}
    cases = [(t, h) for t in trees for h in ("none", a.hints)]
    print(f"trace {trace}; fdp {' '.join(PARAMS)}; trees {', '.join(f'{k} = {v}' for k, v in trees.items())}; "
          f"warm-up ...", flush=True)
    extra = {h: ["--device", "fdp", "--hints", h, *(x for kv in PARAMS for x in ("--param", kv))] for _, h in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for t, h in cases:
            run_child(trace, "fdp", h, PARAMS, trees[t])
            if a.command:  # its own kernel cache (the tree's .cache/numba, as bench_process) filled too
                run_once(trees[t], trace, Path(tmp) / f"warm-{t}-{h}", extra[h])
    load0 = os.getloadavg()[0]
    rs: dict[tuple[str, str], list[dict]] = {c: [] for c in cases}
    cmd: dict[tuple[str, str], list[dict]] = {c: [] for c in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):
            k = i % len(cases)  # every run starts the rotation at another case, so none leads or trails always
            for t, h in cases[k:] + cases[:k]:
                rs[t, h].append(run_child(trace, "fdp", h, PARAMS, trees[t], warm=True))
                if a.command:
                    cmd[t, h].append(run_once(trees[t], trace, Path(tmp) / f"{t}-{h}-{i}", extra[h]))
    load = (load0 + os.getloadavg()[0]) / 2
    _print_part("fresh process: the first replay (scikit-learn imported, numba kernels loaded, in the time)",
                rs, trees, a.hints)
    _print_part("warm process: a second replay in the same process, as a study worker's later points",
                {c: [r["warm"] for r in v] for c, v in rs.items()}, trees, a.hints)
    if a.command:
        _print_part("whole command: kvbed replay in a fresh process, start to exit, plots included (what a user "
                    "waits for)", cmd, trees, a.hints)
    for t in trees:
        print(f"{t:5} WAF none {rs[t, 'none'][0]['waf']:.4f}, {a.hints} {rs[t, a.hints][0]['waf']:.4f}")
    print(f"(load average {load:.1f}, {a.runs} runs each, rotating)")


if __name__ == "__main__":
    main()
