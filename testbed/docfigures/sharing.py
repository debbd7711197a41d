"""Sharing scopes (README "Sharing scopes"): the same synthetic 4-tenant workload with a shared preamble
simulated under each sharing domain, with ample tiers and with small ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.docfigures import fmt
from testbed.docfigures.base import FIGURE_SETS, FigureSet

SHARES = ("request", "session", "tenant", "global")
WORKLOAD = ("--duration-s", "300", "--tenants", "4", "--param", "shared_prompt_tokens=1000",
            "--param", "adapter_update_s=0", "--ttl-tenants", "")
#: ample: one GPU tier that never evicts; small: three LRU tiers that evict all the time
CAPACITIES = {"ample": ("--gpu-bytes", "4TiB", "--cpu-bytes", "0", "--ssd-bytes", "0"),
              "small": ("--gpu-bytes", "1GiB", "--cpu-bytes", "4GiB", "--ssd-bytes", "16GiB")}


@FIGURE_SETS.register("sharing")
class Sharing(FigureSet):
    summary = "synthetic 4-tenant trace with a 1000-token shared preamble, each sharing domain, ample and small tiers"
    commands = tuple(("trace", "synth", "-o", f"{{w}}/{cap}-{share}.parquet", *WORKLOAD, *CAPACITIES[cap],
                      "--share", share) for cap in CAPACITIES for share in SHARES)

    def extract(self, work: Path) -> dict[str, Any]:
        from kvreplay.schema import TraceReader

        out: dict[str, Any] = {}
        for cap in CAPACITIES:
            for share in SHARES:
                sh = TraceReader(work / f"{cap}-{share}.parquet").meta.tier_stats["share"]
                out.setdefault(cap, {})[share] = {k: sh[k] for k in ("chunk_hit_ratio", "cross_tenant_hits")}
        return out

    def blocks(self, fig: dict[str, Any]) -> dict[str, str]:
        a, s = fig["ample"], fig["small"]
        cross = [x for x in SHARES if a[x]["cross_tenant_hits"]]
        order = fmt.chain([(f"{a[x]['chunk_hit_ratio']:.4g} ({x})", a[x]["chunk_hit_ratio"]) for x in SHARES])
        below = s["global"]["chunk_hit_ratio"] < s["tenant"]["chunk_hit_ratio"]
        text = (
            "On a synthetic 4-tenant trace with a shared 1000-token preamble and ample capacity (`kvbed trace synth "
            f"{' '.join(WORKLOAD[:-1])} '' {' '.join(CAPACITIES['ample'])} --share ...`): chunk hit ratio {order}, "
            f"with {a['global']['cross_tenant_hits']:,} cross-tenant hits under {' and '.join(cross) or 'none'} only. "
            f"With small tiers ({' '.join(CAPACITIES['small'])}) global came out "
            f"{'*below*' if below else 'above'} tenant ({s['global']['chunk_hit_ratio']:.4f} vs "
            f"{s['tenant']['chunk_hit_ratio']:.4f})"
            + (": sharing is not free when it changes what the LRU tiers keep." if below else ".")
        )
        return {"text": fmt.wrap(text)}
