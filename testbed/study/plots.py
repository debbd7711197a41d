"""A study's plots (``[study] plots``, listed in :mod:`testbed.study.report`'s docstring): each ``*_figure``
returns the matplotlib Figure (the tests inspect it), ``png_bytes`` renders one for the report."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path
from typing import Any

from testbed.study.aggregate import aggregate, fmt_value, setting_cols
from testbed.study.table import setting_label


MAX_GROUPS = 12  # settings shown side by side in one bar plot


def png_bytes(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    with warnings.catch_warnings():  # many groups on one axis: tight_layout gives up, the plot is still drawn
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def bars_png(df: Any, doc: dict[str, Any], metric: str, ylabel: str, scale: float = 1.0,
          relative_to: str | None = None) -> bytes | None:
    fig = bars_figure(df, doc, metric, ylabel, scale, relative_to)
    return None if fig is None else png_bytes(fig)


def bars_figure(df: Any, doc: dict[str, Any], metric: str, ylabel: str, scale: float = 1.0,
                relative_to: str | None = None) -> Any:
    """``metric`` by hint policy, a bar group per setting, a panel per device (None if nothing finished).

    ``relative_to`` a policy (``none``): bars are the change in % against that policy's mean at the same
    setting, so 1.02 vs 1.00 reads as +2%; without that policy in a panel, the absolute values on an axis
    zoomed to them. Otherwise bars from 0 (a sum, such as GC stall), their CI bars clipped at 0. Every bar is
    labelled with its value."""
    import matplotlib.pyplot as plt
    import numpy as np

    cols = setting_cols(doc)
    devices = list(dict.fromkeys(df["device"]))
    hints = list(dict.fromkeys(df["policy"]))
    a = aggregate(df, ["device", *cols, "policy"], metric)
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
    return f"{v:.3f}" if "waf" in metric else fmt_value(metric, v)


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


def numeric_axes(df: Any, doc: dict[str, Any]) -> list[str]:
    import pandas as pd

    out = []
    for a in setting_cols(doc):
        if a == "trace":
            continue
        vals = df[a].dropna()
        if len(set(vals)) > 1 and pd.to_numeric(vals, errors="coerce").notna().all() and \
                not all(isinstance(v, bool) for v in vals):
            out.append(a)
    return out


def lines_png(df: Any, doc: dict[str, Any], axis: str) -> bytes | None:
    fig = lines_figure(df, doc, axis)
    return None if fig is None else png_bytes(fig)


def lines_figure(df: Any, doc: dict[str, Any], axis: str) -> Any:
    """End-to-end WAF (top) and object-load p99 (bottom, log axis: a latency is never drawn below 0; a CI bar
    reaching below the axis' bottom is clipped there) against a numeric axis, a line per hint policy."""
    import textwrap

    import matplotlib.pyplot as plt
    import numpy as np

    others = [c for c in setting_cols(doc) if c != axis]
    a_waf = aggregate(df, ["device", *others, "policy", axis], "end_to_end_waf")
    a_lat = aggregate(df, ["device", *others, "policy", axis], "load_p99_ns")
    if "saturated" in df.columns:  # a group whose device was saturated in some seed
        sat = aggregate(df, ["device", *others, "policy", axis], "saturated")
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


def per_ruh_png(study_dir: Path, df: Any) -> bytes | None:
    fig = per_ruh_figure(study_dir, df, setting_cols(json.loads((study_dir / "study.json").read_text())))
    return None if fig is None else png_bytes(fig)


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
