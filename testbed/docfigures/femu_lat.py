"""Per-write latency on FEMU and on the model, same command stream (FEMU guide, issue 24):
``scripts/bench_femu_lat.py``'s run, FEMU's guest-measured distribution beside the model's replayed open loop
(FEMU's issue times), in the guest's closed loop, and closed with the emulator's delivery delay measured on the
fill. The saved figures keep FEMU's per-op arrays, so tests/testbed/femu/test_femu_latency.py recomputes the
model's sides from them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.docfigures import fmt
from testbed.docfigures.base import FIGURE_SETS, BenchFigureSet

SIDE_NAMES = {
    "femu": "FEMU (guest-measured)",
    "open": "model, open loop at FEMU's issue times",
    "closed": "model, the guest's closed loop",
    "closed-delay": "model, closed loop + the fill's delivery delay",
}


@FIGURE_SETS.register("femu-lat")
class FemuLat(BenchFigureSet):
    summary = "scripts/bench_femu_lat.py: per-write latency on a FEMU FDP VM and on the model, same stream"
    script = "scripts/bench_femu_lat.py"
    args = ("--json", "{w}/femu_lat.json")

    def extract(self, work: Path) -> dict[str, Any]:
        return json.loads((work / "femu_lat.json").read_text())

    def blocks(self, fig: dict[str, Any]) -> dict[str, str]:
        r = fig["result"]
        f = r["femu"]
        lines = ["| side | p50 ms | p90 ms | p99 ms | max ms | mean ms | span s |", "|---|---|---|---|---|---|---|"]
        for side, name in SIDE_NAMES.items():
            x = r[side]
            lines.append(f"| {name} | {x['p50']:.1f} | {x['p90']:.1f} | {x['p99']:.1f} | {x['max']:.1f} | "
                         f"{x['mean']:.1f} | {x['span_s']:.1f} |")
        host = fig["run"].get("host") or {}
        load = host.get("loadavg_after")
        text = (f"{r['workload']} device, overwrite phase: {r['ops']} writes of 1 MiB at queue depth 1. The guest's "
                f"clock spans {f['span_s']:.1f} s where the host's wall clock measured {f['host_wall_s']:.1f} s; "
                f"its gap between a completion and the next issue has median {f['gap_ms']['p50']:.2f} ms. On the "
                f"fill (no GC; FEMU's timing model gives every write the same latency) FEMU's guest saw "
                f"{f['fill_delay_ms']['p50']:.1f} ms (median) and {f['fill_delay_ms']['p90']:.1f} ms (p90) more "
                f"than the device's. One FEMU run"
                + (f", host load average {load[0]:.1f} after it" if load else "") + ".")
        return {"table": "\n".join(lines) + "\n\n" + fmt.wrap(text) + "\n"}
