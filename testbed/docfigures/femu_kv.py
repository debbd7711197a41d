"""A KV trace where hints matter on FEMU and on the model (FEMU guide): ``scripts/bench_femu_kv.py``'s runs,
FEMU's WAF beside the model's on the same command stream, with no hints and with oracle hints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.docfigures import fmt
from testbed.docfigures.base import FIGURE_SETS, BenchFigureSet

GiB = 1 << 30
KEEP = ("waf", "host_bytes_written", "media_bytes_written", "erases")


@FIGURE_SETS.register("femu-kv")
class FemuKv(BenchFigureSet):
    summary = "scripts/bench_femu_kv.py: a scaled synth KV trace on a FEMU FDP VM and on the model, none and oracle"
    script = "scripts/bench_femu_kv.py"
    args = ("--json", "{w}/femu_kv.json")

    def extract(self, work: Path) -> dict[str, Any]:
        doc = json.loads((work / "femu_kv.json").read_text())
        runs = {h: {side: {k: r[side][k] for k in KEEP} for side in ("femu", "model")} | {
                    "waf_ratio": r["ratio"]["waf"], "cross_checks_ok": r["cross_checks_ok"], "wall_s": r["wall_s"]}
                for h, r in doc["results"].items()}
        return {"device": doc.get("params", doc["device"]), "synth": doc["synth"], "runs": runs}

    def blocks(self, fig: dict[str, Any]) -> dict[str, str]:
        R = fig["runs"]
        lines = ["| hints | FEMU WAF | model WAF | FEMU / model | FEMU erases | model erases | host bytes written |",
                 "|---|---|---|---|---|---|---|"]
        for h, r in R.items():
            lines.append(f"| {h} | {r['femu']['waf']:.4f} | {r['model']['waf']:.4f} | {r['waf_ratio']:.4f} | "
                         f"{r['femu']['erases']:,} | {r['model']['erases']:,} | "
                         f"{fmt.nbytes(r['femu']['host_bytes_written'])} |")
        cut = {side: R["oracle"][side]["waf"] / R["none"][side]["waf"] - 1 for side in ("femu", "model")}
        ok = all(r["cross_checks_ok"] for r in R.values())
        text = (f"Oracle hints change WAF by {cut['femu']:+.1%} on FEMU and by {cut['model']:+.1%} on the model "
                f"(WAF = media bytes / host bytes; FEMU's from its FDP statistics log, the model's on the same "
                f"completed command stream; every VM cross-check {'passed' if ok else 'did NOT pass'}). "
                f"One run per policy, each on a fresh VM; the device is deterministic for a given command "
                f"stream, the guest's timing is not.")
        return {"table": "\n".join(lines) + "\n\n" + fmt.wrap(text) + "\n"}
