"""The Mooncake conversation trace through every tier at once (README "Every tier at once"): per-tier hit
ratios, TTFT by on-hit mode, and the CXL-SSD's DRAM cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.docfigures import fmt
from testbed.docfigures.base import FIGURE_SETS, FigureSet

TIERS = ("gpu", "cpu", "cxl", "ssd")
CPU_BYTES = "256GiB"


@FIGURE_SETS.register("mooncake-tiers")
class MooncakeTiers(FigureSet):
    summary = "Mooncake conversation trace: cpu/cxl/ssd tiers, cxl on a cxl-ssd, oracle hints on the ssd"
    needs_mooncake = True
    commands = (
        ("trace", "import", "mooncake", "{mc}", "-o", "{w}/mc3.parquet", "--cpu-bytes", CPU_BYTES,
         "--cxl-bytes", "512GiB", "--ssd-bytes", "4TiB"),
        ("replay", "{w}/mc3.parquet", "--tiers", "cpu,cxl,ssd", "--tier-device", "cxl=cxl-ssd", "--hints",
         "ssd=oracle", "--on-hit", "best", "-o", "{w}/mc3-run"),
    )

    def extract(self, work: Path) -> dict[str, Any]:
        from kvreplay.schema import TraceReader

        meta = TraceReader(work / "mc3.parquet").meta
        res = json.loads((work / "mc3-run" / "result.json").read_text())
        req = res["requests"]
        tiers = {t: {k: req["tiers"][t][k] for k in ("ref_hit_ratio", "lookup_hit_ratio")} for t in TIERS}
        cache = res["devices"]["cxl"]["cache"]
        return {
            "events": TraceReader(work / "mc3.parquet").num_rows,
            "tier_sim": {t: {k: meta.tier_stats[t][k] for k in ("ref_hit_ratio", "lookup_hit_ratio")} for t in TIERS},
            "replay_tiers": tiers,
            "prefill_instances": req["prefill_instances"],
            "modes": {m: {"mean_ns": v["ttft_ns"]["mean"], "p50_ns": v["ttft_ns"]["percentile"]["50.000000"],
                          "p99_ns": v["ttft_ns"]["percentile"]["99.000000"]} for m, v in req["modes"].items()},
            "cxl_cache_bytes": cache["cache_bytes"],
            "cxl_flash_bytes": res["devices"]["cxl"]["config"]["flash"]["logical_bytes"],
            "cxl_cache_read_hit_ratio": cache["read_hit_ratio"],
        }

    def blocks(self, fig: dict[str, Any]) -> dict[str, str]:
        ts, m = fig["tier_sim"], fig["modes"]

        def ttft(mode: str) -> str:
            return " / ".join(fmt.ns(m[mode][k]) for k in ("mean_ns", "p50_ns", "p99_ns"))

        share = fig["cxl_cache_bytes"] / fig["cxl_flash_bytes"]
        refs = ", ".join(f"{t} {fmt.pct(ts[t]['ref_hit_ratio'])}" for t in TIERS)
        lookups = ", ".join(f"{t} {fmt.pct(ts[t]['lookup_hit_ratio'])}" for t in TIERS)
        text = (
            f"On the Mooncake conversation trace imported as above ({fig['events'] / 1e6:.2f} M events), the tier "
            f"simulator serves {refs} of the requests' "
            f"chunk references (per tier among the lookups that reached it, which stop at a request's first miss: "
            f"{lookups}). TTFT mean / p50 / p99 of "
            f"{ttft('load')} when every held chunk is loaded against {ttft('recompute')} when they are recomputed "
            f"(Llama-3-8B on A100, {fig['prefill_instances']} instances); best {ttft('best')}. With the CXL tier on a "
            f"`cxl-ssd` its DRAM cache ({fmt.pct(share)} of the flash, {fmt.nbytes(fig['cxl_cache_bytes'])}) hits "
            f"{fmt.pct(fig['cxl_cache_read_hit_ratio'])} of reads: behind a {CPU_BYTES[:-3]} GiB write-through DRAM "
            f"tier, the CXL tier is only read for chunks older than what DRAM holds, far beyond "
            f"{fmt.nbytes(fig['cxl_cache_bytes'])} of recent writes."
        )
        return {"text": fmt.wrap(text)}
