"""A study's report: report.md and a self-contained report.html (plots embedded), from the saved table,
summary and run directories only, with no absolute path, date or timing in it: ``kvbed study report``
on a copy of the directory writes the same bytes.

Plots (``[study] plots``):

- ``waf_by_hints``: end-to-end WAF by hint policy as the change in % against ``none`` at the same setting
  (a zoomed axis of absolute values when the grid has no ``none``), per device and setting of the other
  axes, with 95% CI bars, every bar labelled;
- ``waf_vs_axis``: end-to-end WAF and object-load p99 (log axis) against each numeric axis, a line per hint
  policy (a red x on a load p99 whose device was saturated in some seed: that tail is queueing);
- ``gc_stall_by_hints``: foreground GC stall, the sum over stalls, by hint policy, from 0 (CI bars clipped at 0);
- ``per_ruh_bytes``: host bytes (GiB) per FDP reclaim unit handle, a panel per setting, a bar per hint policy,
  the mean over seeds;
- ``loads_by_contract``: in a study with faults, the loads served wrong after them (all, and those through a
  stale index entry) by recovery contract, a bar group per fault setting (:mod:`testbed.study.faultreport`);
- ``oracle_share_by_hints``: in a study with the hint lab (``replay.hint_lab = true``), the share of the oracle's
  end-to-end WAF cut each policy captures, a bar group per setting, between the 0% (none) and 100% (oracle)
  lines (:mod:`testbed.study.labreport`).

Each plot has a ``*_figure`` function returning the matplotlib Figure (the tests inspect it).

The findings paragraph compares each policy with ``none`` (the drive without hints) where the grid has it, in a
study with the hint lab gives each policy's share of the oracle's WAF cut, and in a study with faults says what
each contract let through and what it cost.
"""

from __future__ import annotations

import base64
import html
import io
import json
import warnings
from pathlib import Path
from typing import Any

from kvbed.core.atomicio import atomic_path
from testbed.humanize import fmt_bytes, fmt_ns
from testbed.study.faultreport import fault_findings, loads_by_contract_figure
from testbed.study.labreport import lab_findings, oracle_share_figure
from testbed.study.table import setting_label
from testbed.study.vocabulary import SUMS, column_label

MAX_GROUPS = 12  # settings shown side by side in one bar plot
_T2 = 12.706  # the 95% Student-t factor of a mean of 2 samples (testbed.study.table.t975(2))


def _fmt(metric: str, v: Any) -> str:
    if v is None or v != v:
        return "-"
    if metric.endswith("_ns"):
        return fmt_ns(v, sig3=True)
    if metric.endswith("_bytes") or metric.endswith("bytes_moved") or metric.endswith("_bytes_written"):
        return fmt_bytes(v, sig3=True)
    if "waf" in metric:
        return f"{v:.4f}"
    if metric.endswith("_ratio"):
        return f"{100 * v:.2f}%"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.3g}"
    return f"{int(v):,}"


def _setting_cols(doc: dict[str, Any]) -> list[str]:
    """The settings other than the device (a plot's facet): what a bar group stands for."""
    from testbed.study.table import dimensions

    return [a for a in dimensions(doc)[0] if a != "replay.device"]


def _agg(df: Any, keys: list[str], metric: str) -> Any:
    from testbed.study.table import t975

    ok = df[df["status"] == "ok"]
    g = ok.groupby(keys, sort=False, dropna=False)[metric]
    out = g.agg(["mean", "std", "count", "nunique"]).reset_index().rename(columns={"nunique": "distinct"})
    # no interval from fewer than 2 seeds, nor from seeds that all gave one value (one sample): NaN, never a
    # zero-width interval that reads as a certain value
    out["ci95"] = [t975(int(n)) * s / n ** 0.5 if n >= 2 and s == s and u > 1 else float("nan")
                   for s, n, u in zip(out["std"], out["count"], out["distinct"])]
    return out


def identical(r: Any) -> bool:
    """An aggregate row (``_agg``) whose 2 or more seeds all gave one value: a single sample, no interval."""
    return r["count"] >= 2 and r["distinct"] == 1


def interval_note(summary: Any, metrics: list[str] | None = None) -> str:
    """What a summary's '±' stands for: the 95% CI over seeds; which values have none (1 seed, or seeds that
    all gave that value: one sample); and that an interval from 2 seeds is wide (t = 12.7)."""
    cols = getattr(summary, "columns", ())
    n = summary["n"] if "n" in cols else []
    if len(n) and (n < 2).all():
        return "mean; 1 seed: no interval"
    parts = ["mean ± 95% CI over seeds"]
    if len(n) and (n < 2).any():
        parts.append("rows from 1 seed: no interval")
    dist = [c for c in cols if c.endswith("_distinct") and (metrics is None or c[:-len("_distinct")] in metrics)]
    if len(n) and any(((summary[c] == 1) & (n >= 2)).any() for c in dist):
        parts.append("'identical over N seeds': every seed gave that value, so it is one sample with no interval")
    if len(n) and (n == 2).any():
        parts.append(f"{'rows from ' if (n != 2).any() else ''}2 seeds: an interval from 2 samples is the mean "
                     f"± {_T2:.1f} standard errors, often wider than the mean; use 3 seeds or more")
    return "; ".join(parts)


def _cell(metric: str, r: Any) -> str:
    """A summary cell: mean ± 95% CI, or the mean marked as identical over the seeds (one sample)."""
    mean, ci = r.get(f"{metric}_mean"), r.get(f"{metric}_ci95")
    distinct, n = r.get(f"{metric}_distinct"), r.get("n")
    text = _fmt(metric, mean)
    if ci is not None and ci == ci:
        return f"{text} ± {_fmt(metric, ci)}"
    if distinct == 1 and n is not None and n >= 2:
        return f"{text} (identical over {int(n)} seeds)"
    return text


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    with warnings.catch_warnings():  # many groups on one axis: tight_layout gives up, the plot is still drawn
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _bars(df: Any, doc: dict[str, Any], metric: str, ylabel: str, scale: float = 1.0,
          relative_to: str | None = None) -> bytes | None:
    fig = bars_figure(df, doc, metric, ylabel, scale, relative_to)
    return None if fig is None else _png(fig)


def bars_figure(df: Any, doc: dict[str, Any], metric: str, ylabel: str, scale: float = 1.0,
                relative_to: str | None = None) -> Any:
    """``metric`` by hint policy, a bar group per setting, a panel per device (None if nothing finished).

    ``relative_to`` a policy (``none``): bars are the change in % against that policy's mean at the same
    setting, so 1.02 vs 1.00 reads as +2%; without that policy in a panel, the absolute values on an axis
    zoomed to them. Otherwise bars from 0 (a sum, such as GC stall), their CI bars clipped at 0. Every bar is
    labelled with its value."""
    import matplotlib.pyplot as plt
    import numpy as np

    cols = _setting_cols(doc)
    devices = list(dict.fromkeys(df["device"]))
    hints = list(dict.fromkeys(df["policy"]))
    a = _agg(df, ["device", *cols, "policy"], metric)
    if a.empty or a["mean"].isna().all():
        return None
    fig, axes = plt.subplots(len(devices), 1, figsize=(10, 3.4 * len(devices) + 0.4), squeeze=False)
    for ax, dev in zip(axes[:, 0], devices):
        d = a[a["device"] == dev]
        groups = list(dict.fromkeys(setting_label(r, cols) for _, r in d.iterrows()))[:MAX_GROUPS]
        base = {setting_label(r, cols): r["mean"] for _, r in d[d["policy"] == relative_to].iterrows()} \
            if relative_to is not None else {}
        relative = bool(base)
        width = 0.8 / max(1, len(hints))
        x = np.arange(len(groups))
        lows, highs = [], []
        for k, h in enumerate(hints):
            sel = d[d["policy"] == h]
            vals = {setting_label(r, cols): (r["mean"] * scale, r["ci95"] * scale) for _, r in sel.iterrows()}
            ys = np.array([vals.get(g, (np.nan, np.nan))[0] for g in groups], float)
            es = np.array([vals.get(g, (np.nan, np.nan))[1] for g in groups], float)
            raw = ys.copy()
            if relative:
                b = np.array([base.get(g, np.nan) * scale for g in groups], float)
                with np.errstate(divide="ignore", invalid="ignore"):
                    ys, es = 100 * (ys / b - 1), 100 * es / b
            xs = x + (k - (len(hints) - 1) / 2) * width
            bars = ax.bar(xs, ys, width, label=h)
            has = ~np.isnan(es) & ~np.isnan(ys)
            if has.any():  # 95% CI bars only where there is one (2 seeds or more)
                lo = es[has] if relative or relative_to is not None else np.minimum(es[has], ys[has])  # not below 0
                ax.errorbar(xs[has], ys[has], yerr=[lo, es[has]], fmt="none", ecolor="black", capsize=2)
                lows += list(ys[has] - lo)
                highs += list(ys[has] + es[has])
            lows += list(ys[~np.isnan(ys)])
            highs += list(ys[~np.isnan(ys)])
            for bar, y, r in zip(bars, ys, raw):
                if y == y:
                    text = f"{y:+.1f}%" if relative else _bar_value(metric, r / scale)
                    ax.annotate(text, (bar.get_x() + bar.get_width() / 2, y), xytext=(0, 2 if y >= 0 else -2),
                                textcoords="offset points", ha="center", va="bottom" if y >= 0 else "top",
                                fontsize=6, rotation=90 if len(hints) * len(groups) > 12 else 0,
                                bbox={"fc": "white", "ec": "none", "alpha": 0.7, "pad": 0.4})
        if relative:
            ax.axhline(0, color="black", lw=0.8)
            span = max([abs(v) for v in lows + highs] + [0.5])
            ax.set_ylim(-1.35 * span, 1.35 * span)
            ax.set_ylabel(f"{ylabel},\nchange vs {relative_to} (%)")
        elif relative_to is not None:  # absolute values, axis zoomed to them (not from 0)
            lo, hi = min(lows), max(highs)
            pad = max(hi - lo, 1e-3 * abs(hi)) * 0.3
            ax.set_ylim(lo - pad, hi + pad)
            for bar in ax.patches:  # bars drawn from the axis' bottom, not from 0 far below it
                bar.set_y(lo - pad)
                bar.set_height(bar.get_height() - (lo - pad))
            ax.set_ylabel(f"{ylabel} (zoomed: the axis does not start at 0)")
        else:
            ax.set_ylim(0, max(highs + [0]) * 1.2 or 1)
            ax.set_ylabel(ylabel + ("\n(CI bars clipped at 0)" if lows else ""))
        ticks = [f"{g}\n({relative_to}: {_bar_value(metric, base[g])})" if g in base else g for g in groups] \
            if relative else groups
        ax.set_xticks(x, ticks, rotation=20, ha="right", fontsize=8)
        what = f"{ylabel.splitlines()[0]} change vs {relative_to} hints" if relative else ylabel.replace("\n", " ")
        ax.set_title(f"{dev}: {what}, by hint policy per setting" + _no_interval_note(d), fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="hint policy", title_fontsize=7)
    return fig


def _bar_value(metric: str, v: float) -> str:
    """A bar's label: WAF to 3 decimals, other figures as the tables print them."""
    return f"{v:.3f}" if "waf" in metric else _fmt(metric, v)


def _no_interval_note(a: Any) -> str:
    """A plot title's note when some of its means have no interval (1 seed, or seeds identical: one sample)."""
    n = a["count"]
    same = (n >= 2) & (a["distinct"] == 1) if "distinct" in a.columns else n < 0
    if len(n) and (n < 2).all():
        return " (1 seed: no interval)"
    if len(n) and same.all():
        return " (identical over the seeds: no interval)"
    if len(n) and ((n < 2) | same).all():
        return " (1 seed or identical over the seeds: no interval)"
    if len(n) and ((n < 2) | same).any():
        why = "1 seed or identical over the seeds" if (n < 2).any() and same.any() else \
            "1 seed" if (n < 2).any() else "identical over the seeds"
        return f" (95% CI over seeds; bars without one: {why})"
    return " (95% CI over seeds)"


def _numeric_axes(df: Any, doc: dict[str, Any]) -> list[str]:
    import pandas as pd

    out = []
    for a in _setting_cols(doc):
        if a == "trace":
            continue
        vals = df[a].dropna()
        if len(set(vals)) > 1 and pd.to_numeric(vals, errors="coerce").notna().all() and \
                not all(isinstance(v, bool) for v in vals):
            out.append(a)
    return out


def _lines(df: Any, doc: dict[str, Any], axis: str) -> bytes | None:
    fig = lines_figure(df, doc, axis)
    return None if fig is None else _png(fig)


def lines_figure(df: Any, doc: dict[str, Any], axis: str) -> Any:
    """End-to-end WAF (top) and object-load p99 (bottom, log axis: a latency is never drawn below 0; a CI bar
    reaching below the axis' bottom is clipped there) against a numeric axis, a line per hint policy."""
    import textwrap

    import matplotlib.pyplot as plt
    import numpy as np

    others = [c for c in _setting_cols(doc) if c != axis]
    a_waf = _agg(df, ["device", *others, "policy", axis], "end_to_end_waf")
    a_lat = _agg(df, ["device", *others, "policy", axis], "load_p99_ns")
    if "saturated" in df.columns:  # a group whose device was saturated in some seed
        sat = _agg(df, ["device", *others, "policy", axis], "saturated")
        a_lat["saturated"] = (sat["mean"].fillna(0) > 0).to_numpy() if len(sat) == len(a_lat) else False
    else:
        a_lat["saturated"] = False
    if a_waf.empty:
        return None
    name = axis.split(".")[-1]
    facets = list(dict.fromkeys((r["device"], setting_label(r, others)) for _, r in a_waf.iterrows()))[:6]
    fig, axes = plt.subplots(2, len(facets), figsize=(4.2 * len(facets) + 1.0, 6.8), squeeze=False)
    for j, (dev, lab) in enumerate(facets):
        for i, (a, ylabel, scale) in enumerate(((a_waf, "end-to-end WAF (ratio)", 1.0),
                                                (a_lat, "KV object load p99 (ms, log)", 1e-6))):
            ax = axes[i, j]
            sel = a[(a["device"] == dev).to_numpy() & np.array([setting_label(r, others) == lab for _, r in a.iterrows()])]
            lines = []
            for k, h in enumerate(dict.fromkeys(sel["policy"])):
                s = sel[sel["policy"] == h].sort_values(axis)
                xv, yv, ci = (s[axis].to_numpy(float), s["mean"].to_numpy(float) * scale,
                              s["ci95"].to_numpy(float) * scale)
                ls, lw = (("-", 2.6), ("--", 2.0), (":", 1.8), ("-.", 1.4), ((0, (5, 1, 1, 1)), 1.2))[k % 5]
                (line,) = ax.plot(xv, yv, marker="os^vD<>"[k % 7], ms=4, ls=ls, lw=lw, label=h, zorder=2 + k)
                lines.append((line, xv, yv, ci, s))
            floor = None
            if i == 1:  # a log axis: its bottom below every positive mean and CI end
                pos = [v for _, _, yv, ci, _ in lines for v in (*yv, *(yv - ci)) if v == v and v > 0]
                floor = 0.5 * min(pos) if pos else None
            for line, xv, yv, ci, s in lines:
                has = ~np.isnan(ci) & ~np.isnan(yv)  # a CI bar only where there is one (2 seeds or more)
                if has.any():
                    lo = ci[has] if floor is None else np.minimum(ci[has], yv[has] - floor)
                    ax.errorbar(xv[has], yv[has], yerr=[lo, ci[has]], fmt="none", ecolor=line.get_color(), capsize=2)
                if "saturated" in s.columns and s["saturated"].any():
                    m = s["saturated"].to_numpy(bool)
                    ax.scatter(xv[m], yv[m], marker="x", s=60, color="red", zorder=9)
            if i == 1 and floor is not None:
                ax.set_yscale("log")
                ax.set_ylim(bottom=floor)
            ax.set_xlabel(_axis_label(name))
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3, which="both")
            # titles wrapped to their panel's width: side by side, unwrapped ones ran into each other
            if i == 1:
                note = "CI bars reaching the bottom are clipped there"
                if "saturated" in sel.columns and sel["saturated"].any():
                    ax.set_title(textwrap.fill(f"red x: device saturated (the tail is queueing); {note}", 70),
                                 fontsize=7, color="red")
                else:
                    ax.set_title(note, fontsize=7)
            if i == 0:
                ax.set_title(textwrap.fill(f"{dev}" + (f" ({lab})" if others else "") + _no_interval_note(sel), 55),
                             fontsize=9)
                if j == len(facets) - 1:  # one legend, right of the last panel: inside each it hid their lines
                    ax.legend(fontsize=7, title="hint policy", title_fontsize=7, loc="upper left",
                              bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(f"End-to-end WAF and KV object load p99 against {name}, a line per hint policy", fontsize=10)
    return fig


def _axis_label(name: str) -> str:
    """A numeric study axis with its unit, from the parameter's name (units in field names)."""
    for suffix, unit in (("_ratio", "fraction"), ("_bytes", "bytes"), ("_ns", "ns"), ("_s", "s")):
        if name.endswith(suffix):
            return f"{name} ({unit})"
    return name


def _per_ruh(study_dir: Path, df: Any) -> bytes | None:
    fig = per_ruh_figure(study_dir, df, _setting_cols(json.loads((study_dir / "study.json").read_text())))
    return None if fig is None else _png(fig)


def per_ruh_figure(study_dir: Path, df: Any, cols: list[str]) -> Any:
    """Host bytes written per FDP reclaim unit handle (GiB), mean over seeds: a panel per setting of the other
    axes, a bar per hint policy at each RUH."""
    import matplotlib.pyplot as plt
    import numpy as np

    ok = df[(df["status"] == "ok") & (df["device"] == "fdp")]
    if ok.empty:
        return None
    per: dict[str, dict[str, list[dict[str, float]]]] = {}  # setting -> policy -> per seed {ruh: GiB}
    for _, r in ok.iterrows():
        res = json.loads((study_dir / r["run_dir"] / "result.json").read_text())
        gib = {str(x["ruh"]): x.get("host_bytes_written", 0) / 2**30 for x in res["jobs"][0].get("per_ruh") or []}
        per.setdefault(setting_label(r, cols), {}).setdefault(r["policy"], []).append(gib)
    settings = list(per)[:MAX_GROUPS]
    hints = list(dict.fromkeys(ok["policy"]))
    fig, axes = plt.subplots(len(settings), 1, figsize=(10, 2.9 * len(settings) + 0.6), squeeze=False)
    for ax, setting in zip(axes[:, 0], settings):
        ruhs = list(dict.fromkeys(k for runs in per[setting].values() for g in runs for k in g))
        x = np.arange(len(ruhs))
        width = 0.8 / max(1, len(hints))
        seeds = set()
        for k, h in enumerate(hints):
            runs = per[setting].get(h, [])
            seeds.add(len(runs))
            ys = [float(np.mean([g.get(u, 0.0) for g in runs])) if runs else np.nan for u in ruhs]
            ax.bar(x + (k - (len(hints) - 1) / 2) * width, ys, width, label=h, color=f"C{k % 10}")
        ax.set_xticks(x, ruhs)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("host bytes written\n(GiB)")
        n = "/".join(str(v) for v in sorted(seeds))
        ax.set_title(f"{setting} (mean over {n} seed{'s' if seeds != {1} else ''})", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="hint policy", title_fontsize=7)
    axes[-1, 0].set_xlabel("reclaim unit handle (last: GC destination, when shared)")
    fig.suptitle("FDP: host bytes written per reclaim unit handle, by hint policy, per setting", fontsize=10)
    return fig


def findings(df: Any, doc: dict[str, Any]) -> list[str]:
    """Sentences: in a study with the hint lab, first the share of the oracle's WAF cut per policy
    (:mod:`testbed.study.labreport`); per device and policy, the change of end-to-end WAF against ``none`` over
    the settings; then what a fault study's contracts let through, and the saturated points."""
    cols = _setting_cols(doc)
    a = _agg(df, ["device", *cols, "policy"], "end_to_end_waf")
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
            f"the mean ± {_T2:.1f} standard errors, often wider than the mean, so few differences can exceed it; "
            "use 3 seeds or more."]


def _saturated(df: Any) -> Any:
    """The finished points whose device was saturated."""
    if "saturated" not in df.columns:
        return df.iloc[0:0]
    return df[(df["status"] == "ok") & (df["saturated"] == 1)]


def _saturation_findings(df: Any) -> list[str]:
    """A sentence when points ran on a saturated device: their latency is queueing, not single GC stalls."""
    from testbed.labels import QUEUEING

    sat = _saturated(df)
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


def md_table(df: Any, cols: list[str], metrics: list[str]) -> str:
    sat = "saturated_points" in df.columns and bool((df["saturated_points"].fillna(0) > 0).any())
    head = [c.split(".")[-1] for c in cols] + ["n"] + [column_label(m) for m in metrics] + \
        (["saturated"] if sat else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in df.iterrows():
        cells = [str(r[c]) for c in cols] + [str(int(r["n"]))]
        cells += [_cell(m, r) for m in metrics]
        if sat:
            k = int(r["saturated_points"]) if r["saturated_points"] == r["saturated_points"] else 0
            cells.append(f"**{k} of {int(r['n'])}**" if k else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pivot_markdown(summary: Any, doc: dict[str, Any], metric: str = "end_to_end_waf") -> str:
    """``metric`` (mean ± 95% CI) with a column per hint policy and a row per setting of the other axes."""
    from testbed.study.table import dimensions

    if summary.empty or "policy" not in summary.columns or summary["policy"].nunique() < 2:
        return ""
    rows = [a for a in dimensions(doc)[0] if a in summary.columns and summary[a].nunique(dropna=True) > 1]
    hints = list(dict.fromkeys(summary["policy"]))
    cells: dict[tuple, dict[str, str]] = {}
    for _, r in summary.iterrows():
        key = tuple("" if r[a] != r[a] or r[a] is None else str(r[a]) for a in rows)
        cells.setdefault(key, {})[r["policy"]] = _cell(metric, r)
    head = [a.split(".")[-1] for a in rows] + hints
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, c in cells.items():
        lines.append("| " + " | ".join([*key, *(c.get(h, "-") for h in hints)]) + " |")
    return "\n".join(lines)


def write_report(study_dir: Path) -> list[Path]:
    """report.md, report.html and plots/*.png of a study directory (from its saved files)."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from testbed.study import table

    doc = json.loads((study_dir / "study.json").read_text())
    df = table.load(study_dir)
    try:
        summary = pd.read_csv(study_dir / "summary.csv")
    except pd.errors.EmptyDataError:  # nothing has finished
        summary = pd.DataFrame()
    plots: dict[str, bytes] = {}
    cols = _setting_cols(doc)
    for name in doc["plots"]:
        if name == "waf_by_hints":
            png = _bars(df, doc, "end_to_end_waf", "end-to-end WAF", relative_to="none")
            if png:
                plots["waf_by_hints.png"] = png
        elif name == "gc_stall_by_hints":
            png = _bars(df, doc, "gc_stall_total_ns", "foreground GC stall,\nsum over stalls (s)", 1e-9)
            if png:
                plots["gc_stall_by_hints.png"] = png
        elif name == "waf_vs_axis":
            for ax in _numeric_axes(df, doc):
                png = _lines(df, doc, ax)
                if png:
                    plots[f"waf_vs_{ax.split('.')[-1]}.png"] = png
        elif name == "per_ruh_bytes":
            png = _per_ruh(study_dir, df)
            if png:
                plots["per_ruh_bytes.png"] = png
        elif name == "oracle_share_by_hints":
            fig = oracle_share_figure(df, cols)
            if fig is not None:
                plots["oracle_share_by_hints.png"] = _png(fig)
        elif name == "loads_by_contract":
            fig = loads_by_contract_figure(df, cols)
            if fig is not None:
                plots["loads_by_contract.png"] = _png(fig)
    (study_dir / "plots").mkdir(exist_ok=True)
    for name, png in plots.items():
        with atomic_path(study_dir / "plots" / name) as tmp:
            tmp.write_bytes(png)
    counts = df["status"].value_counts().to_dict()
    from testbed.study.table import dimensions

    keys = [c for c in (*dimensions(doc)[0], "policy") if c in summary.columns]
    metrics = table.shown_metrics(doc["metrics"])  # hint_accuracy with its one-class reference beside it
    found = findings(df, doc)
    failed = df[df["status"] == "failed"]
    md = [f"# Study: {doc['name']}", ""]
    if doc["description"]:
        md += [doc["description"], ""]
    overview = (f"{len(df)} points ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}); "
                f"axes: {', '.join(doc['axes']) or 'none'}; seeds: {', '.join(map(str, doc['seeds']))}; "
                f"traces: {', '.join(t['label'] for t in doc['traces'].values())}.")
    md += [overview, "", "## Findings", ""]
    md += [f"- {s}" for s in found] + [""]
    by_hints = pivot_markdown(summary, doc)
    note = interval_note(summary, metrics)
    if by_hints:
        md += [f"## End-to-end WAF by hint policy ({interval_note(summary, ['end_to_end_waf'])})", "", by_hints, ""]
    md += [f"## Summary ({note})", ""]
    md += [md_table(summary, keys, metrics) if not summary.empty else "No point has finished yet.", ""]
    sat = _saturated(df)
    if not sat.empty:
        md += ["## Saturated points", "", "The device was backlogged (an op in flight longer than the run's "
               "saturation_wait_ns) for at least saturation_backlog_ratio of the replay span: latency tails "
               "measure queueing behind a device that cannot keep up (GC work included), not single GC stalls.", ""]
        md += [f"- `{r['run_dir']}` ({setting_label(r, [*cols, 'policy'])}, seed {r['seed']}): backlogged "
               f"{100 * r['backlogged_ratio']:.1f}% of the span" for _, r in sat.iterrows()] + [""]
    if not failed.empty:
        md += ["## Failed points", ""] + [f"- `{r['run_dir']}` ({setting_label(r, [*cols, 'policy'])}, seed {r['seed']}): "
                                           f"{r['error']}" for _, r in failed.iterrows()] + [""]
    md += ["## Plots", ""] + [f"![{n}](plots/{n})" for n in plots] + [""]
    md += ["Every point is a run directory under `runs/` (rerun one with `kvbed replay --config "
           "runs/<hash>/config.json`); `table.csv` has one row per point, `summary.csv` the means.", ""]
    text = "\n".join(md)
    with atomic_path(study_dir / "report.md") as tmp:
        tmp.write_text(text)
    body = [f"<h1>Study: {html.escape(doc['name'])}</h1>"]
    if doc["description"]:
        body.append(f"<p>{html.escape(doc['description'])}</p>")
    body.append(f"<p>{html.escape(overview)}</p><h2>Findings</h2><ul>")
    body += [f"<li>{html.escape(s)}</li>" for s in found] + [f"</ul><h2>Summary ({html.escape(note)})</h2>"]
    if not summary.empty:
        shown = summary.rename(columns=lambda c: f"{c} ({SUMS[c.rsplit('_', 1)[0]]})"
                               if c.rsplit("_", 1)[0] in SUMS and c.endswith(("_mean", "_ci95")) else c)
        body.append(shown.to_html(index=False, na_rep="-", float_format=lambda v: f"{v:.6g}"))
    if not sat.empty:
        body.append("<h2>Saturated points</h2><p>Latency tails measure queueing behind a device that cannot keep up (GC work included), not single GC stalls.</p><ul>" + "".join(
            f"<li><code>{html.escape(r['run_dir'])}</code> ({html.escape(setting_label(r, [*cols, 'policy']))}, seed "
            f"{r['seed']}): backlogged {100 * r['backlogged_ratio']:.1f}% of the span</li>"
            for _, r in sat.iterrows()) + "</ul>")
    if not failed.empty:
        body.append("<h2>Failed points</h2><ul>" + "".join(
            f"<li><code>{html.escape(r['run_dir'])}</code>: {html.escape(str(r['error']))}</li>"
            for _, r in failed.iterrows()) + "</ul>")
    body.append("<h2>Plots</h2>")
    for n, png in plots.items():
        body.append(f'<p><img alt="{n}" src="data:image/png;base64,{base64.b64encode(png).decode()}"></p>')
    page = ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>" + html.escape(doc["name"]) +
            "</title><style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:"
            "collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}img{max-width:100%}</style>"
            "</head><body>" + "\n".join(body) + "</body></html>\n")
    with atomic_path(study_dir / "report.html") as tmp:
        tmp.write_text(page)
    return [study_dir / "report.md", study_dir / "report.html", *(study_dir / "plots" / n for n in plots)]
