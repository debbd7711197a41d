"""Per-tier hit ratios, each named for its denominator.

A request looks its prompt's chunks up in order, from the fastest tier down, and stops at the first chunk no
tier holds (the rest is prefilled). So a tier is asked for fewer chunks than the requests have, and its hits
over the lookups that reached it (``lookup_hit_ratio``) can be far above the share of all chunk references
it served (``ref_hit_ratio``, the headline), and depend on the tiers below it: on the Mooncake conversation
trace, GPU LRU at 128 GiB serves 5.6% of the references, while its hits / lookups read 15.6% over the default
CPU and SSD tiers and 72.7% with no tier below (each request then stops at its first GPU miss). Both come
with the counts they divide (``hits``, ``lookups``, ``chunk_references``).

Traces written before these keys carry one ``hit_ratio`` per tier (hits / lookups): :func:`upgrade` reads
it as the lookup ratio and derives the reference ratio from the chunk count the simulator recorded, or
leaves it None, saying why, when the trace has no such count.
"""

from __future__ import annotations

import copy
from typing import Any

#: why an old trace's reference ratio is missing (a row's ``ref_hit_ratio_note``)
NOT_RECORDED = "not recorded: trace written before per-reference hit ratios, without a chunk count"


def ratios(hits: int, lookups: int, chunk_references: int) -> dict[str, Any]:
    """The two ratios of one tier, with the counts they divide."""
    return {
        "chunk_references": chunk_references,
        "ref_hit_ratio": hits / chunk_references if chunk_references else 0.0,
        "lookup_hit_ratio": hits / lookups if lookups else 0.0,
    }


def upgrade(tier_stats: dict[str, Any], counters: dict[str, Any] | None = None) -> dict[str, Any]:
    """A copy of a trace's ``tier_stats`` whose tier rows all have both ratios (see the module docstring);
    ``counters`` is the trace's ``extra["tier_sim_counters"]``, where old traces kept their chunk count."""
    out = copy.deepcopy(tier_stats or {})
    refs = (out.get("all") or {}).get("chunk_references")
    if refs is None and counters:
        refs = counters.get("chunk_references", counters.get("chunks"))
    for name, row in out.items():
        if not isinstance(row, dict) or "hit_ratio" not in row or "lookup_hit_ratio" in row:
            continue
        old = row.pop("hit_ratio")
        row["lookup_hit_ratio"] = old
        if refs and row.get("hits") is not None:
            row.update(chunk_references=int(refs), ref_hit_ratio=row["hits"] / refs)
        else:
            row.update(chunk_references=None, ref_hit_ratio=None, ref_hit_ratio_note=NOT_RECORDED)
    return out
