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


def compact(doc: dict[str, Any]) -> dict[str, Any]:
    """The runs with FEMU's per-op arrays kept for the small device only (the test recomputes that one; the
    larger device's would make the file ~10x larger): the others keep their fill median (ns) instead."""
    for x in doc["runs"]:
        run = x["run"]
        if run["workload"] != "small" and "lat_ns" in run:
            fill = sorted(run["lat_ns"]["fill"])
            run["fill_lat_p50_ns"] = fill[len(fill) // 2]
            del run["lat_ns"], run["issue_ns"]
    return doc


def _fill_median_ms(run: dict[str, Any]) -> float:
    if "fill_lat_p50_ns" in run:
        return run["fill_lat_p50_ns"] / 1e6
    fill = sorted(run["lat_ns"]["fill"])
    return fill[len(fill) // 2] / 1e6


def _fill_device_ms(workload: str) -> float:
    """The device's latency of a fill write at queue depth 1 on idle dies (FEMU's timing model and the model's
    without channel time): a 1 MiB object's pages per die x the page program time."""
    from devicemodels.base import DEVICES
    from testbed.femu.latency import SPECS

    f = DEVICES.get("fdp").from_params([*SPECS[workload].femu_params(), "timing=false"]).flash
    return 256 // f.dies * f.page_program_ns / 1e6


@FIGURE_SETS.register("femu-lat")
class FemuLat(BenchFigureSet):
    summary = "scripts/bench_femu_lat.py: per-write latency on a FEMU FDP VM and on the model, same stream"
    script = "scripts/bench_femu_lat.py"
    args = ("--workload", "small", "--workload", "uniform-op25", "--json", "{w}/femu_lat.json")

    def extract(self, work: Path) -> dict[str, Any]:
        return compact(json.loads((work / "femu_lat.json").read_text()))

    def blocks(self, fig: dict[str, Any]) -> dict[str, str]:
        lines = ["| device | side | p50 ms | p90 ms | p99 ms | max ms | mean ms | span s |",
                 "|---|---|---|---|---|---|---|---|"]
        notes = []
        for x in fig["runs"]:
            r = x["result"]
            f = r["femu"]
            fill_med = _fill_median_ms(x["run"])
            dev_ms = _fill_device_ms(r["workload"])
            off = lambda side, k: r[side][k] / f[k] - 1  # noqa: E731
            for side, name in SIDE_NAMES.items():
                s = r[side]
                lines.append(f"| {r['workload']} | {name} | {s['p50']:.1f} | {s['p90']:.1f} | {s['p99']:.1f} | "
                             f"{s['max']:.1f} | {s['mean']:.1f} | {s['span_s']:.1f} |")
            load = (x["run"].get("host") or {}).get("loadavg_after")
            notes.append(f"{r['workload']}: {r['ops']} overwrites; guest clock span {f['span_s']:.1f} s, host wall "
                         f"{f['host_wall_s']:.1f} s; guest gap median {f['gap_ms']['p50']:.2f} ms; on the fill FEMU's "
                         f"guest latency had median {fill_med:.1f} ms where the device's is {dev_ms:.1f} ms "
                         f"({fill_med / dev_ms:.1f}x), {f['fill_delay_ms']['p50']:.1f} ms (median) and "
                         f"{f['fill_delay_ms']['p90']:.1f} ms (p90) more per write; the model with that delay is "
                         f"{off('closed-delay', 'p50'):+.1%} off FEMU's median, "
                         f"{off('closed-delay', 'mean'):+.1%} off its mean, {off('closed-delay', 'span_s'):+.1%} "
                         f"off its span, without it {off('closed', 'p50'):+.1%}, {off('closed', 'mean'):+.1%}, "
                         f"{off('closed', 'span_s'):+.1%}"
                         + (f"; host load average {load[0]:.1f} after the run" if load else ""))
        text = ("Overwrite phase, 1 MiB writes at queue depth 1, one FEMU run per device. " + ". ".join(notes) + ".")
        return {"table": "\n".join(lines) + "\n\n" + fmt.wrap(text) + "\n"}
