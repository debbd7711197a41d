"""A study's findings: per device and policy, the change of end-to-end WAF against ``none`` over the settings and
whether it exceeds both 95% intervals; a hint-lab study's shares of the oracle's cut and a fault study's
contracts first and after (:mod:`testbed.study.labreport`, :mod:`testbed.study.faultreport`); the saturated
points and the means from too few seeds."""

from __future__ import annotations

from typing import Any

from testbed.study.aggregate import T2, aggregate, identical, setting_cols
from testbed.study.faultreport import fault_findings
from testbed.study.labreport import lab_findings
from testbed.study.table import setting_label


def findings(df: Any, doc: dict[str, Any]) -> list[str]:
    """Sentences: in a study with the hint lab, first the share of the oracle's WAF cut per policy
    (:mod:`testbed.study.labreport`); per device and policy, the change of end-to-end WAF against ``none`` over
    the settings; then what a fault study's contracts let through, and the saturated points."""
    cols = setting_cols(doc)
    a = aggregate(df, ["device", *cols, "policy"], "end_to_end_waf")
    if a.empty:
        return ["No point has finished yet."]
    out: list[str] = lab_findings(df, cols)  # a hint-lab study's headline: the share of the oracle's cut
    for dev in dict.fromkeys(a["device"]):
        d = a[a["device"] == dev]
        if "none" not in set(d["policy"]):
            best = d.sort_values("mean").iloc[0]
            out.append(f"On {dev}, the lowest end-to-end WAF is {best['mean']:.4f} with {best['policy']} hints "
                       f"({setting_label(best, cols)}); the grid has no 'none' point to compare with.")
            continue
        base = {setting_label(r, cols): r for _, r in d[d["policy"] == "none"].iterrows()}
        ranked = []
        for h in dict.fromkeys(d["policy"]):
            if h == "none":
                continue
            changes = []
            for _, r in d[d["policy"] == h].iterrows():
                b = base.get(setting_label(r, cols))
                if b is not None and b["mean"]:
                    changes.append(((r["mean"] - b["mean"]) / b["mean"], setting_label(r, cols), b["mean"], r["mean"],
                                    _significance(r, b)))
            if changes:
                mean = sum(c[0] for c in changes) / len(changes)
                ranked.append((mean, h, changes))
        if not ranked:
            continue
        ranked.sort()
        every = [c[4] for _, _, ch in ranked for c in ch]
        # same in every seed and equal to none: no change at all, so no interval is needed to say so
        unchanged = sum(c[4] == SAME and c[0] == 0 for _, _, ch in ranked for c in ch)
        if False in every and sum(v is False for v in every) + unchanged == len(every):
            out.append(f"On {dev}, no hint policy changes end-to-end WAF beyond the 95% intervals against none "
                       f"({', '.join(f'{h} {100 * m:+.2f}%' for m, h, _ in ranked)} on average over the settings)" +
                       (f"; {unchanged} of the {len(every)} comparisons gave none's value in every seed"
                        if unchanged else "") + ".")
            continue
        lines = []
        for mean, h, ch in ranked:
            lo, hi = min(ch), max(ch)
            # lowest/highest change (signed: lower WAF is better), not most/least, which read as magnitudes
            where = f"; lowest at {lo[1]} ({100 * lo[0]:+.1f}%: {lo[2]:.4f} -> {lo[3]:.4f}), highest at {hi[1]} " \
                    f"({100 * hi[0]:+.1f}%)" if len(ch) > 1 else f" ({ch[0][2]:.4f} -> {ch[0][3]:.4f})"
            lines.append(f"{h} {100 * mean:+.1f}% on average over {len(ch)} setting(s){where}; {_beyond(ch)}")
        best = ranked[0]
        if all(v is None for v in every):
            tail = "; 1 seed: no interval, so no change is shown to exceed seed-to-seed variation."
        elif all(v == SAME for v in every):
            tail = ("; every policy and none gave the same value in every seed at every setting: the result does "
                    "not vary with the seed, so there is no interval to exceed.")
        elif all(v is None or v == SAME for v in every):
            tail = "; no interval at any setting (1 seed, or the same value in every seed)."
        else:
            tail = "."
        out.append(f"On {dev}, {best[1]} hints change end-to-end WAF the most against none "
                   f"({100 * best[0]:+.1f}% on average over the settings)" + tail)
        out += [f"{dev}, {line}." for line in lines]
    out += fault_findings(df, cols)
    out += _saturation_findings(df)
    out += _few_seeds_findings(a)
    return out


SAME = "same"  # a comparison of two values each identical over their seeds: no interval on either side


def _significance(r: Any, b: Any) -> bool | str | None:
    """Whether a policy's mean (``r``) differs from none's (``b``) beyond both 95% intervals: None when a side
    has 1 seed; SAME when both sides gave one value in every seed (no interval: not counted as beyond); a side
    identical over its seeds is exact there, so the other side's interval alone decides."""
    if r["count"] < 2 or b["count"] < 2:
        return None
    if identical(r) and identical(b):
        return SAME
    width = sum(0.0 if identical(x) else x["ci95"] for x in (r, b))
    return bool(abs(r["mean"] - b["mean"]) > width)


def _few_seeds_findings(a: Any) -> list[str]:
    """A sentence when means come from 2 seeds: their 95% intervals are too wide to say much."""
    two = a[(a["count"] == 2) & a["ci95"].notna()]
    if two.empty:
        return []
    return [f"{len(two)} of the {len(a)} means of end-to-end WAF have an interval from 2 seeds: one from 2 samples is "
            f"the mean ± {T2:.1f} standard errors, often wider than the mean, so few differences can exceed it; "
            "use 3 seeds or more."]


def saturated_points(df: Any) -> Any:
    """The finished points whose device was saturated."""
    if "saturated" not in df.columns:
        return df.iloc[0:0]
    return df[(df["status"] == "ok") & (df["saturated"] == 1)]


def _saturation_findings(df: Any) -> list[str]:
    """A sentence when points ran on a saturated device: their latency is queueing, not single GC stalls."""
    from testbed.labels import QUEUEING

    sat = saturated_points(df)
    if sat.empty:
        return []
    ok = int((df["status"] == "ok").sum())
    worst = sat.sort_values("backlogged_ratio", ascending=False).iloc[0]
    return [f"{len(sat)} of {ok} points ran on a saturated device (listed under 'Saturated points'; the most "
            f"backlogged {100 * worst['backlogged_ratio']:.1f}% of its span, policy {worst['policy']}): their "
            f"{QUEUEING}."]


def _beyond(ch: list[tuple]) -> str:
    """'2 of 3 beyond the 95% intervals', counting only the settings with an interval on a side; those where
    both sides gave one value in every seed are said not to vary with the seed, those from 1 seed to have none."""
    with_ci = [c for c in ch if c[4] is not None and c[4] != SAME]
    same = sum(c[4] == SAME for c in ch)
    one = sum(c[4] is None for c in ch)
    if not with_ci and not same:
        return "1 seed: no interval"
    if not with_ci and not one:
        return ("the same values in every seed at " + ("every setting" if same > 1 else "its setting") +
                ": the result does not vary with the seed (no interval)")
    parts = [f"{sum(c[4] for c in with_ci)} of {len(with_ci)} beyond the 95% intervals"] if with_ci else []
    if same:
        parts.append(f"at {same} {'more ' if with_ci else ''}setting(s) it and none gave one value in every seed: "
                     "there the result does not vary with the seed, no interval")
    if one:
        parts.append(f"{one} {'more ' if with_ci else ''}from 1 seed: no interval")
    return "; ".join(parts)
