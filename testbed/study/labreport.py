"""What a hint-lab study finds: the share of the oracle's WAF cut each hint policy captures (issue 23).

A study whose points run the hint lab (``replay.hint_lab = true``, the ``oracle_waf_cut_captured_ratio``
metric) asks how close practical hints come to the oracle. Each point's share is

    (WAF_none - WAF_policy) / (WAF_none - WAF_oracle)

on end-to-end WAF, with the same device, setting and seed (the lab replays the point's trace with ``none`` and
``oracle`` hints): 1 is all of the oracle's cut, 0 nothing, below 0 worse than no hints. A setting's share is
the mean over its seeds; a policy's share is the mean over the settings, with the least and the most. Beside
it, the worst end-to-end WAF change against the grid's own ``none`` points (mean over seeds per setting), so
whether a policy is ever more than 1% worse than no hints is visible. ``none`` and ``oracle`` are the
references (0 and 1 by definition), so they get no share of their own; the best *practical* policy is the
best of the rest that did not read the future (its runs' ``hint_policy.offline``, so a plugin oracle is none)
and is not an oracle with errors (``noisy-oracle``).
"""

from __future__ import annotations

from typing import Any

SHARE = "oracle_waf_cut_captured_ratio"
#: what the share is, as the findings and the plot name it
FORMULA = "(WAF_none - WAF_policy) / (WAF_none - WAF_oracle), end-to-end WAF, same device, setting and seed"
REFERENCES = ("none", "oracle")  # the share's 0 and 1: no share of their own
WORSE_LIMIT = 0.01  # "never more than 1% worse than no hints" (issue 23)


def is_practical(policy: str, offline: bool = False) -> bool:
    """A policy a running system could use: not one that read the future (``offline``, as its runs recorded:
    a plugin oracle is one whatever its name), not a reference, not an oracle with errors."""
    return not offline and policy not in REFERENCES and not policy.startswith("noisy-oracle")


def offline_policies(df: Any) -> set[str]:
    """The policies whose finished runs recorded that they read the future (result.json's
    ``jobs[].hint_policy.offline``; the table's ``hint_offline``)."""
    if "hint_offline" not in df.columns:
        return set()
    ok = df[df["status"] == "ok"]
    return set(ok.loc[ok["hint_offline"].astype("boolean").fillna(False).astype(bool), "policy"])


def per_setting(df: Any, cols: list[str]) -> Any:
    """Per (device, setting, policy): the share (mean over seeds, its 95% CI, the seed count), the mean
    end-to-end WAF and the change against ``none`` at the same setting (NaN without a ``none`` point).
    None when no point carries a share (a study without the hint lab)."""
    import numpy as np

    from testbed.study.aggregate import aggregate
    from testbed.study.table import setting_label

    ok = df[df["status"] == "ok"]
    if SHARE not in ok.columns or ok[SHARE].isna().all():
        return None
    keys = ["device", *cols, "policy"]
    per = aggregate(df, keys, SHARE)  # seeds that all gave one share are one sample: no interval (as from 1 seed)
    per["waf"] = aggregate(df, keys, "end_to_end_waf")["mean"].to_numpy()
    per["setting"] = [setting_label(r, cols) for _, r in per.iterrows()]
    base = {(r["device"], r["setting"]): r["waf"] for _, r in per[per["policy"] == "none"].iterrows()}
    per["none_waf"] = [base.get((r["device"], r["setting"]), np.nan) for _, r in per.iterrows()]
    per["waf_change"] = per["waf"] / per["none_waf"] - 1
    return per


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def _seeds(d: Any) -> str:
    n = sorted(set(int(c) for c in d["count"]))
    if n == [1]:
        return "1 seed per setting"
    same = int(((d["count"] >= 2) & (d["distinct"] == 1)).sum())
    text = f"the mean over {'/'.join(map(str, n))} seeds per setting"
    if same:  # a share the seed does not change is one sample, whatever the seed count
        text += f"; {same} of the {len(d)} shares (policy x setting) the same in every seed"
    return text


def _best_by_trace(d: Any, cols: list[str]) -> str:
    """'T1 p1 12.3% (2 settings); T2 ...' when the settings span more than one trace, else ''."""
    if "trace" not in cols or d["trace"].nunique() < 2:
        return ""
    parts = []
    for t in dict.fromkeys(d["trace"]):
        means = d[d["trace"] == t].groupby("policy", sort=False)["mean"].agg(["mean", "count"])
        best = means["mean"].idxmax()
        parts.append(f"{t} {best} {_pct(means.loc[best, 'mean'])} ({int(means.loc[best, 'count'])} setting(s))")
    return "; ".join(parts)


def lab_findings(df: Any, cols: list[str]) -> list[str]:
    """Sentences per device: the best practical policy's share of the oracle's WAF cut (the headline), then per
    policy its share (mean over the settings, least and most with their setting) and its worst end-to-end WAF
    change against none."""
    per = per_setting(df, cols)
    if per is None:
        return []
    offline = offline_policies(df)
    out: list[str] = []
    for dev in dict.fromkeys(per["device"]):
        d = per[(per["device"] == dev) & ~per["policy"].isin(REFERENCES) & per["mean"].notna()]
        if d.empty:
            continue
        ranked = []
        for h in dict.fromkeys(d["policy"]):
            s = d[d["policy"] == h]
            ranked.append((float(s["mean"].mean()), h, s))
        ranked.sort(key=lambda t: -t[0])
        n = len(dict.fromkeys(d["setting"]))
        what = f"share of the oracle's WAF cut captured = {FORMULA}; {_seeds(d)}"
        practical = [t for t in ranked if is_practical(t[1], t[1] in offline)]
        if practical:
            m, h, s = practical[0]
            out.append(f"{dev}: the best practical hint policy, {h}, captures {_pct(m)} of the oracle's end-to-end "
                       f"WAF cut on average over {len(s)} setting(s) ({what}).")
            by_trace = _best_by_trace(d[d["policy"].map(lambda h: is_practical(h, h in offline))], cols)
            if by_trace:
                out.append(f"{dev}, the best practical hint policy by trace (share of the oracle's cut, mean over "
                           f"the trace's settings): {by_trace}.")
        for m, h, s in ranked:
            lo, hi = s.loc[s["mean"].idxmin()], s.loc[s["mean"].idxmax()]
            spread = (f"least {_pct(lo['mean'])} at {lo['setting']}, most {_pct(hi['mean'])} at {hi['setting']}"
                      if len(s) > 1 else f"at {lo['setting']}")
            line = f"{dev}, {h} captures {_pct(m)} of the oracle's cut on average over {len(s)} of {n} setting(s) " \
                   f"({spread})"
            ch = s[s["waf_change"].notna()]
            if not ch.empty:
                w = ch.loc[ch["waf_change"].idxmax()]
                verdict = "more than 1% worse than none" if w["waf_change"] > WORSE_LIMIT else \
                    "never more than 1% worse than none"
                line += (f"; worst end-to-end WAF change vs none {100 * w['waf_change']:+.1f}% at {w['setting']} "
                         f"({w['none_waf']:.4f} -> {w['waf']:.4f}): {verdict}")
            out.append(line + ".")
    return out


def share_table(df: Any, cols: list[str]) -> str:
    """Markdown: per device and policy (none and oracle aside; the best share first), the share of the oracle's cut (mean, least,
    most over the settings) and the worst end-to-end WAF change against none; empty without the hint lab."""
    per = per_setting(df, cols)
    if per is None:
        return ""
    d = per[~per["policy"].isin(REFERENCES) & per["mean"].notna()]
    if d.empty:
        return ""
    lines = ["| device | policy | settings | share of the oracle's cut: mean | least | most | "
             "worst WAF change vs none |", "|---|---|---|---|---|---|---|"]
    groups = sorted(d.groupby(["device", "policy"], sort=False), key=lambda g: -g[1]["mean"].mean())
    for (dev, h), s in sorted(groups, key=lambda g: list(dict.fromkeys(d["device"])).index(g[0][0])):
        lo, hi = s.loc[s["mean"].idxmin()], s.loc[s["mean"].idxmax()]
        ch = s[s["waf_change"].notna()]
        worst = "-"
        if not ch.empty:
            w = ch.loc[ch["waf_change"].idxmax()]
            worst = f"{100 * w['waf_change']:+.1f}% ({w['setting']})"
        lines.append(f"| {dev} | {h} | {len(s)} | {_pct(s['mean'].mean())} | {_pct(lo['mean'])} ({lo['setting']}) | "
                     f"{_pct(hi['mean'])} ({hi['setting']}) | {worst} |")
    return "\n".join(lines)


def _cut_text(wafs: tuple[float, float] | None) -> str:
    """The oracle's cut a share divides by, under its setting: a 40% share of a 1% cut is 0.4% of WAF."""
    if wafs is None or not all(w == w for w in wafs):
        return ""
    none, oracle = wafs
    return f"\noracle's cut {100 * (oracle / none - 1):+.1f}%\n(WAF {none:.3f} -> {oracle:.3f})"


def oracle_share_figure(df: Any, cols: list[str]) -> Any:
    """The share of the oracle's WAF cut (%) by hint policy, a bar group per setting, a panel per device, with
    the 0% (none) and 100% (oracle) lines and 95% CI bars over seeds; every bar labelled. None without the
    hint lab."""
    import matplotlib.pyplot as plt
    import numpy as np

    per = per_setting(df, cols)
    if per is None:
        return None
    # the cut each share divides: none's and the oracle's mean WAF per setting, under its bar group
    oracle = {(r["device"], r["setting"]): (r["none_waf"], r["waf"]) for _, r in per[per["policy"] == "oracle"].iterrows()}
    per = per[~per["policy"].isin(REFERENCES)]
    if per.empty or per["mean"].isna().all():
        return None
    devices = list(dict.fromkeys(per["device"]))
    hints = list(dict.fromkeys(per["policy"]))
    fig, axes = plt.subplots(len(devices), 1, figsize=(12, 5.0 * len(devices) + 0.6), squeeze=False)
    for ax, dev in zip(axes[:, 0], devices):
        d = per[per["device"] == dev]
        groups = list(dict.fromkeys(d["setting"]))
        x = np.arange(len(groups))
        width = 0.8 / max(1, len(hints))
        ends = [0.0, 100.0]
        for k, h in enumerate(hints):
            sel = d[d["policy"] == h]
            vals = {r["setting"]: (100 * r["mean"], 100 * r["ci95"]) for _, r in sel.iterrows()}
            ys = np.array([vals.get(g, (np.nan, np.nan))[0] for g in groups], float)
            es = np.array([vals.get(g, (np.nan, np.nan))[1] for g in groups], float)
            xs = x + (k - (len(hints) - 1) / 2) * width
            bars = ax.bar(xs, ys, width, label=h, color=f"C{k % 10}")
            has = ~np.isnan(es) & ~np.isnan(ys)
            if has.any():
                ax.errorbar(xs[has], ys[has], yerr=es[has], fmt="none", ecolor="black", capsize=2, lw=0.8)
                ends += list(ys[has] - es[has]) + list(ys[has] + es[has])
            ends += list(ys[~np.isnan(ys)])
            for bar, y, e in zip(bars, ys, es):
                if y == y:  # the label beyond the CI bar's end, so the two do not overlap
                    tip = y + (e if e == e else 0.0) * (1 if y >= 0 else -1)
                    ax.annotate(f"{y:.0f}%", (bar.get_x() + bar.get_width() / 2, tip),
                                xytext=(0, 2 if y >= 0 else -2), textcoords="offset points", ha="center",
                                va="bottom" if y >= 0 else "top", fontsize=6,
                                rotation=90 if len(hints) * len(groups) > 40 else 0)
        ax.axhline(0, color="black", lw=0.9)
        ax.axhline(100, color="green", lw=0.9, ls="--")
        # the reference lines named outside the axes, beside their ends (the legend sits below them)
        ax.annotate("oracle = 100%", (1.0, 100), xycoords=("axes fraction", "data"), xytext=(3, 0),
                    textcoords="offset points", fontsize=7, color="green", va="center")
        ax.annotate("none = 0%", (1.0, 0), xycoords=("axes fraction", "data"), xytext=(3, 0),
                    textcoords="offset points", fontsize=7, va="center")
        lo, hi = min(ends), max(ends)
        pad = 0.15 * (hi - lo)
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_xticks(x, [g.replace(", ", "\n") + _cut_text(oracle.get((dev, g))) for g in groups], fontsize=7)
        ax.set_ylabel("share of the oracle's\nend-to-end WAF cut (%)")
        seeds = sorted(set(int(c) for c in d["count"]))
        same = (d["count"] >= 2) & (d["distinct"] == 1)
        note = " (1 seed: no interval)" if seeds == [1] else \
            " (the same in every seed: no interval)" if same.all() else \
            " (mean ± 95% CI over seeds; no CI bar: the same in every seed)" if same.any() else \
            " (mean ± 95% CI over seeds)"
        ax.set_title(f"{dev}: share of the oracle's WAF cut captured, by hint policy per setting{note}",
                     fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.55), title="hint policy", title_fontsize=7)
    fig.suptitle("Share of the oracle's WAF cut = (WAF_none - WAF_policy) / (WAF_none - WAF_oracle), "
                 "end-to-end WAF, same setting and seed", fontsize=10)
    return fig
