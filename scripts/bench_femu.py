#!/usr/bin/env python3
"""FEMU and kvbed's flash model on the same command stream (issue 12): WAF, media bytes, erases, write
latency tails and time per run, for the model's own FTL and for the model with ``preset=femu``.

Workloads (testbed/femu/compare.py WORKLOADS; 1 MiB objects on a 1 GiB FDP device of 8 MiB reclaim
units): uniform random overwrites at 25% and 10% OP, and hot/cold (20% of the objects get 80% of the
overwrites) on two RUHs, persistently isolated (PI) and with FEMU's initially isolated last RUH (II).
Each runs on a FEMU guest (the FEMU binary `kvbed femu build` cached, the kvbed guest image, FDP
statistics log before/after each phase), then the very same op arrays (and FEMU's guest issue times
as arrivals) go to the model. The table is the overwrite phase (the fill phase has WAF 1 on both).
The latency columns are not a comparison of the two devices: FEMU's guest latency includes the emulator's
completion delivery under TCG, and the model takes FEMU's issue times open loop (scripts/bench_femu_lat.py
and docs/guides/femu.md say why and compare them properly).

    python scripts/bench_femu.py                    # FEMU + model, every workload (~6 min under TCG)
    python scripts/bench_femu.py --only uniform-op25
    python scripts/bench_femu.py --model-only       # the model on the streams (no FEMU; pace 10 ms)
    python scripts/bench_femu.py --json out.json
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

GiB = 1 << 30


def run(name: str, spec: C.Spec, femu: bool, log) -> dict:
    phases = spec.phases()
    out: dict = {"workload": name, "spec": {"kind": spec.kind, "writes_x": spec.writes_x,
                                             "params": list(spec.params), "pct": list(spec.pct)}}
    arrivals = None
    if femu:
        t0 = time.perf_counter()
        r = C.run_femu(spec.femu_params(), phases, name=f"bench-{name}", log=log)
        arrivals = r.pop("arrivals")
        r.pop("lat_ns")  # per-op guest latencies: scripts/bench_femu_lat.py compares them
        r["wall_s"] = time.perf_counter() - t0
        out["femu"] = r
    for side, params in (("model_default", spec.default_params()), ("model_femu", spec.femu_params())):
        t0 = time.perf_counter()
        out[side] = C.run_model(params, phases, arrivals=arrivals)
        out[side]["wall_s"] = time.perf_counter() - t0
    return out


def table(results: list[dict]) -> str:
    rows = [("workload", "side", "WAF", "vs FEMU", "media GiB", "erases", "p50 ms", "p99 ms", "p99.9 ms", "run s")]
    for r in results:
        ref = r.get("femu", {}).get("phases", {}).get("overwrite", {}).get("waf")
        for side in ("femu", "model_default", "model_femu"):
            if side not in r:
                continue
            o = r[side]["phases"]["overwrite"]
            lat = o.get("write_lat_ns") or {}
            rows.append((r["workload"], side, f"{o['waf']:.3f}",
                         f"{o['waf'] / ref - 1:+.1%}" if ref and side != "femu" else "",
                         f"{o['media_bytes_written'] / GiB:.2f}", str(o["erases"]),
                         *(f"{lat.get(k, 0) / 1e6:.1f}" for k in ("p50", "p99", "p99.9")),
                         f"{r[side]['wall_s']:.2f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=list(C.WORKLOADS), help="run only these workloads")
    ap.add_argument("--model-only", action="store_true", help="no FEMU: the model on the streams")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    a = ap.parse_args()
    results = []
    for name in a.only or list(C.WORKLOADS):
        print(f"# {name}", file=sys.stderr, flush=True)
        results.append(run(name, C.WORKLOADS[name], not a.model_only, lambda s: print(s, file=sys.stderr)))
    print("overwrite phase (FEMU: its FDP statistics log; latency: guest-measured per 1 MiB object on FEMU, "
          "the model's on FEMU's issue times)")
    print(table(results))
    if a.json:
        for r in results:
            r.get("femu", {}).pop("arrivals", None)
        write_json(a.json, {"results": results})


if __name__ == "__main__":
    main()
