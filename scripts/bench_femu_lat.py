#!/usr/bin/env python3
"""Per-write latency on FEMU and on the model, same command stream (issue 24): why the tails differ.

FEMU's guest (the kvbed agent) writes one op at a time: it issues an op when the previous one has
completed and it has prepared the next buffer (a closed loop at queue depth 1 with a "think time").
``scripts/bench_femu.py`` gives the model FEMU's guest issue times as arrivals (an open loop): when
the model's die timeline runs behind FEMU's, its ops still arrive at FEMU's pace and queue. This
script runs one workload on FEMU, keeps every op's guest issue time and guest-measured latency, and
replays the same ops on the model (preset=femu) in several ways:

- ``open``: arrivals = FEMU's guest issue times (bench_femu.py's way);
- ``closed``: the guest's loop: op i+1 arrives when the model completed op i plus the guest's own gap
  between them on FEMU (issue[i+1] - issue[i] - lat[i]);
- ``closed-noch``: as closed, with the channel transfer made ~free (channel_bytes_per_s=4e12):
  FEMU's bbssd charges no channel time (hw/femu/bbssd/ftl-media.c: NAND_CH_OFF, LUN-only gate);
- ``open-noch``: open loop without channel time.

It prints, per side, the overwrite phase's write latency p50/p90/p99/p99.9/max, the mean, the
throughput (objects per second of device time) and the guest clock's span against host wall time.

    python scripts/bench_femu_lat.py                       # FEMU (small device, ~1 min TCG) + model
    python scripts/bench_femu_lat.py --workload small --workload uniform-op25   # + bench_femu's (~3 min)
    python scripts/bench_femu_lat.py --json out.json       # every figure and FEMU's per-op arrays
    python scripts/bench_femu_lat.py --load out.json       # the model on saved FEMU runs
    python scripts/bench_femu_lat.py --nice -15          # FEMU's threads ahead of the host's other load
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbed.core.atomicio import write_json  # noqa: E402
from testbed.femu import compare as C  # noqa: E402
from testbed.femu import latency as L  # noqa: E402

def saved_runs(path: Path) -> list:
    """FEMU runs from a file ``--json`` wrote, or from docs/figures/femu-lat.json (its ``figures``); a run kept
    without its per-op arrays (the doc file keeps them for the small device only) is skipped, and said so.
    A file that holds neither: one line, exit status 2."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"{path}: cannot read FEMU runs: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if runs is None and isinstance(doc, dict):
        runs = (doc.get("figures") or {}).get("runs")
    if not isinstance(runs, list) or not all(isinstance(x, dict) and "run" in x for x in runs):
        print(f"{path}: no FEMU runs here (a file written by --json, or docs/figures/femu-lat.json)", file=sys.stderr)
        raise SystemExit(2)
    out = []
    for x in runs:
        if "lat_ns" not in x["run"]:
            print(f"# {x['run'].get('workload')}: saved without FEMU's per-op arrays, skipped", file=sys.stderr)
            continue
        out.append(L.FemuRun.from_json(x["run"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", action="append", choices=sorted(L.SPECS),
                    help="device and workload (repeatable; default small)")
    ap.add_argument("--load", type=Path, default=None, help="FEMU runs saved by --json instead of running FEMU")
    ap.add_argument("--json", type=Path, default=None, help="write every figure and FEMU's per-op arrays here")
    ap.add_argument("--nice", type=int, default=None,
                    help="renice every thread of FEMU's process to this (e.g. -15: ahead of the host's other load)")
    a = ap.parse_args()
    runs = saved_runs(a.load) if a.load else [None] * len(a.workload or ["small"])
    out = []
    for i, run in enumerate(runs):
        name = run.workload if run else (a.workload or ["small"])[i]
        spec = L.SPECS[name]
        phases = spec.phases()
        if run is None:
            t0 = time.perf_counter()
            r = C.run_femu(spec.femu_params(), phases, name=f"lat-{name}", log=lambda s: print(s, file=sys.stderr),
                           on_up=None if a.nice is None else lambda vm: L.renice(vm.state.pid, a.nice))
            print(f"# FEMU run {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            run = L.FemuRun.from_run_femu(name, r, nice=a.nice, load=L.loadavg())
        res = L.compare(spec, phases, run)
        print(L.table(res), flush=True)
        out.append({"result": res, "run": run.to_json()})
    if a.json:
        write_json(a.json, {"runs": out})


if __name__ == "__main__":
    main()
