"""``kvbed crossover`` with its defaults (README "Load or recompute"): break-even bandwidths and which tiers pay
off from which object size."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.docfigures import fmt
from testbed.docfigures.base import FIGURE_SETS, FigureSet

LOCAL = ("dram", "cxl", "cxl-ssd-hit", "cxl-ssd-miss", "ssd")
#: rows kept: what the prose quotes (every tier, model and accelerator at qd 1; verdicts at every qd)
KEEP = ("tier", "model", "accelerator", "tp", "qd", "bytes_per_token", "prefill_tokens_per_s",
        "breakeven_bytes_per_s", "crossover_tokens", "verdict", "recompute_ns_at_min")


@FIGURE_SETS.register("crossover")
class Crossover(FigureSet):
    summary = "kvbed crossover with its defaults: every tier, model, accelerator and queue depth"
    commands = (("crossover", "-o", "{w}/crossover"),)

    def extract(self, work: Path) -> dict[str, Any]:
        doc = json.loads((work / "crossover" / "crossover.json").read_text())
        ssd = doc["tiers"]["ssd"]["config"]["flash"]
        return {
            "rows": [{k: r[k] for k in KEEP} for r in doc["crossover"]],
            "ssd_channels": ssd["channels"],
            "ssd_channel_bytes_per_s": ssd["channel_bytes_per_s"],
            "page_read_ns": ssd["page_read_ns"],
            "remote_bytes_per_s": doc["config"]["crossover"]["remote_bytes_per_s"],
        }

    def blocks(self, fig: dict[str, Any]) -> dict[str, str]:
        rows = fig["rows"]

        def row(tier: str, model: str, acc: str, qd: int = 1) -> dict[str, Any]:
            return next(r for r in rows if (r["tier"], r["model"], r["accelerator"], r["qd"]) == (tier, model, acc, qd))

        l8 = {a: row("ssd", "llama-3-8b", a) for a in ("a100", "h100")}
        breakeven = (
            f"Loading pays off when the tier delivers more than bytes/token x tokens/s "
            f"({fmt.gbps(l8['a100']['breakeven_bytes_per_s'])} for Llama-3-8B on an A100 at "
            f"{l8['a100']['prefill_tokens_per_s']:,.0f} tokens/s, {fmt.gbps(l8['h100']['breakeven_bytes_per_s'])} "
            f"on an H100 at {l8['h100']['prefill_tokens_per_s']:,.0f} tokens/s)."
        )
        a100_local = [r for r in rows if r["accelerator"] == "a100" and r["tier"] in LOCAL]
        all_load = all(r["verdict"] == "always load" for r in a100_local)
        h1 = [r for r in rows if r["accelerator"] == "h100" and r["qd"] == 1 and r["tier"] in ("ssd", "cxl-ssd-miss")]
        cold = sorted({r["crossover_tokens"] for r in h1 if r["crossover_tokens"]})
        remote = {a: [r for r in rows if r["tier"] == "remote" and r["accelerator"] == a and r["qd"] == 1]
                  for a in ("a100", "h100")}  # one row per model
        a100_remote_ok = all(r["verdict"] != "always recompute" for r in remote["a100"])
        h100_remote_ok = sorted({r["model"] for r in remote["h100"] if r["verdict"] != "always recompute"})
        ssd_bw = fig["ssd_channels"] * fig["ssd_channel_bytes_per_s"]
        parts = [
            (f"With the defaults every local tier is worth loading from at any size on an A100" if all_load else
             f"With the defaults not every local tier pays off at every size on an A100 "
             f"({sum(r['verdict'] != 'always load' for r in a100_local)} of {len(a100_local)} settings)")
            + f" (the SSD delivers {fmt.gbps(ssd_bw)} over {fig['ssd_channels']} channels)",
            f"on an H100 at qd 1 a cold NAND read ({fmt.ns(fig['page_read_ns'])}) outlasts recomputing one token "
            f"({fmt.ns(l8['h100']['recompute_ns_at_min'])} for Llama-3-8B), so the SSD and a cold CXL-SSD pay off "
            f"from {cold[0]}-{cold[-1]} tokens" if cold else "on an H100 at qd 1 the SSD and a cold CXL-SSD pay off "
            "at every size",
            f"at qd 1 the remote tier at {fig['remote_bytes_per_s'] * 8 / 1e9:g} Gbit/s "
            f"({fmt.gbps(fig['remote_bytes_per_s'])}) is worth loading from on an A100"
            + ("" if a100_remote_ok else " only for some models")
            + (" but not on an H100" if len(h100_remote_ok) < len(remote["h100"]) / 2 else " and on an H100")
            + (f" (except for {', '.join(h100_remote_ok)}: "
               + ", ".join(f"{fmt.nbytes(row('remote', m, 'h100')['bytes_per_token'])}/token" for m in h100_remote_ok)
               + ")" if 0 < len(h100_remote_ok) < len(remote["h100"]) / 2 else ""),
        ]
        return {"breakeven": fmt.wrap(breakeven), "verdicts": fmt.wrap("; ".join(parts) + ".")}
