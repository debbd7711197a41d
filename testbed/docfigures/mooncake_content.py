"""The Mooncake conversation trace's content by tier (docs/guides/importers.md "Content by tier"): each tier's
hit ratio against Belady's and an unbounded cache's on the tier's content-key sequence, and the share of its
writes that re-write content it held before (``kvbed trace stats``, :mod:`kvreplay.contentstats`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.docfigures import fmt
from testbed.docfigures.base import FIGURE_SETS, FigureSet

FIELDS = ("accesses", "policy_hit_ratio_per_access", "belady_hit_ratio_per_access", "unbounded_hit_ratio_per_access",
          "policy_hit_ratio_per_reference", "belady_hit_ratio_per_reference", "slots", "capacity_bytes", "writes",
          "rewritten_share_of_writes", "rewritten_share_of_writes_by_object", "reuse_distance_keys_p50",
          "reuse_distance_objects_p50")


@FIGURE_SETS.register("mooncake-content")
class MooncakeContent(FigureSet):
    summary = ("Mooncake conversation trace, default tiers: per tier policy vs Belady vs unbounded hit ratio, "
               "re-written writes")
    needs_mooncake = True
    commands = (("trace", "import", "mooncake", "{mc}", "-o", "{w}/mc.parquet"),)

    def extract(self, work: Path) -> dict[str, Any]:
        from kvreplay.stats import trace_stats

        s = trace_stats(work / "mc.parquet")
        c = s["content"]
        return {"object_bytes": s["meta"]["geometry"]["object_bytes"],
                "policies": {t: s["meta"]["tier_stats"][t]["policy"] for t in (r["tier"] for r in c["tiers"])},
                "references": c["references"], "distinct_keys": c["distinct_keys"],
                "distinct_objects": c["distinct_objects"],
                "tiers": {r["tier"]: {k: r[k] for k in FIELDS} for r in c["tiers"]},
                "smaller_objects": {r["tier"]: r["slot_sizing"] for r in c["tiers"]}}

    def blocks(self, fig: dict[str, Any]) -> dict[str, str]:
        tiers = fig["tiers"]
        rows = ["| tier | accesses | policy | Belady | unbounded | slots | re-written (by key) "
                "| re-written (by object) |", "|---|---|---|---|---|---|---|---|"]
        for name, r in tiers.items():
            rows.append(f"| {name} | {r['accesses']:,} | {fmt.pct(r['policy_hit_ratio_per_access'])} | "
                        f"{fmt.pct(r['belady_hit_ratio_per_access'])} | "
                        f"{fmt.pct(r['unbounded_hit_ratio_per_access'])} | "
                        f"{r['slots']:,} ({fmt.nbytes(r['capacity_bytes'])}) | "
                        f"{fmt.pct(r['rewritten_share_of_writes'])} of {r['writes']:,} | "
                        f"{fmt.pct(r['rewritten_share_of_writes_by_object'])} |")
        g, s = tiers["gpu"], tiers.get("ssd")
        at_bound = [n for n, r in tiers.items()
                    if r["belady_hit_ratio_per_access"] == r["unbounded_hit_ratio_per_access"]]
        names = list(tiers)
        same = [a for a, b in zip(names, names[1:]) if tiers[a]["writes"] == tiers[b]["accesses"]
                and tiers[a]["rewritten_share_of_writes"] == tiers[b]["unbounded_hit_ratio_per_access"]]
        text = (
            f"The Mooncake conversation trace imported with the default tiers has {fig['references']:,} chunk "
            f"references to {fig['distinct_keys']:,} distinct contents ({fig['distinct_objects']:,} objects: a chunk "
            f"evicted from every tier and computed again is a new object with its old key). Each tier's policy "
            f"({', '.join(f'{t} {p}' for t, p in fig['policies'].items())}) serves "
            "less than Belady's MIN would on the same accesses: the GPU "
            f"{fmt.pct(g['policy_hit_ratio_per_access'])} "
            f"against {fmt.pct(g['belady_hit_ratio_per_access'])}, out of the "
            f"{fmt.pct(g['unbounded_hit_ratio_per_access'])} an unbounded cache gets (every reuse)"
            + (f"; {' and '.join(at_bound)} with Belady already reach{'es' if len(at_bound) == 1 else ''} their "
               "unbounded ratio, so there the headroom is the policy's alone, not capacity" if at_bound else "")
            + ". Re-written: the share of a tier's writes that store content (same key, kind and scope) it had "
            "stored before, evicted, and now writes again"
            + (f"; the SSD's {fmt.pct(s['rewritten_share_of_writes'])} by key is "
               f"{fmt.pct(s['rewritten_share_of_writes_by_object'])} by object id, since a recomputed chunk is a new "
               "object" if s else "")
            + (f". The {' and '.join(same)} re-written share{'s equal' if len(same) > 1 else ' equals'} the next "
               "tier's unbounded ratio: with write-through and promotion on load, each reference a tier does not "
               "serve is one write into it (a commit, the persist of a load, a recover), so its writes are the next "
               "tier's accesses, and a write re-writes content exactly when that access is a reuse" if same else "")
            + ". Hit ratios per access that reached the tier (not served by a faster tier); slots = capacity / the "
            f"{fmt.nbytes(fig['object_bytes'])} object, a prompt's last, smaller chunk counted as a whole slot."
        )
        return {"table": "\n".join(rows), "text": fmt.wrap(text)}
