"""What a study with faults finds: loads served wrong, through a stale index and otherwise, per recovery contract.

A fault study (``replay.param.fault`` and ``replay.param.contract`` axes, the fault metrics) asks what each
contract lets through and what catching costs; its points all use one hint policy, so the WAF-by-policy
findings of :mod:`testbed.study.findings` say nothing about it. Counts are the mean over seeds of each setting,
then summed over the fault settings - the sentences say "summed", and each row of the plot is one setting.
"""

from __future__ import annotations

from typing import Any

#: the fault metrics a finding sums per contract (study metric names, testbed.study.vocabulary)
SUMMED = ("loads_wrong", "stale_entry_loads", "stale_wrong_loads", "loads_detected", "recompute_tokens",
          "contract_extra_bytes_written")


def _contract_col(cols: list[str]) -> str | None:
    return next((c for c in cols if c.split(".")[-1] == "contract"), None)


def _per_setting(df: Any, cols: list[str]) -> tuple[Any, str | None, list[str]] | None:
    """Mean over seeds per (device, setting, contract) of the fault metrics; None without fault figures."""
    ok = df[df["status"] == "ok"]
    if "loads_wrong" not in ok.columns or ok["loads_wrong"].isna().all():
        return None
    ccol = _contract_col(cols)
    others = [c for c in cols if c != ccol]
    keys = ["device", *others] + ([ccol] if ccol else [])
    have = [m for m in SUMMED if m in ok.columns and not ok[m].isna().all()]
    per = ok.groupby(keys, sort=False, dropna=False)[have].mean().reset_index()
    return per, ccol, others


def _seeds_note(df: Any, dev: str) -> str:
    seeds = df[(df["status"] == "ok") & (df["device"] == dev)]["seed"].nunique()
    return ", 1 seed" if seeds < 2 else f", each the mean over {seeds} seeds"


def _count(v: float) -> str:
    """A count, or a mean of counts over seeds (one decimal when it is not whole)."""
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"


def _counts(sums: Any, metric: str, names: list[str]) -> str:
    return ", ".join(f"{n} {_count(sums.loc[n, metric])}" for n in names)


def fault_findings(df: Any, cols: list[str]) -> list[str]:
    """Sentences per device: loads served wrong after the faults per contract, those through a stale index
    entry, and what the contracts cost in recomputed tokens and header bytes - each a sum over the settings."""
    from testbed.humanize import fmt_bytes

    got = _per_setting(df, cols)
    if got is None:
        return []
    per, ccol, others = got
    out: list[str] = []
    for dev in dict.fromkeys(per["device"]):
        d = per[per["device"] == dev]
        n = len(d.drop_duplicates(others)) if others else 1
        over = f"summed over the {n} fault setting{'s' if n > 1 else ''}{_seeds_note(df, dev)}"
        if ccol is None:
            s = d.sum(numeric_only=True)
            out.append(f"On {dev}, {_count(s['loads_wrong'])} loads were served wrong after the faults, {over}.")
            continue
        sums = d.groupby(ccol, sort=False).sum(numeric_only=True)
        names = list(sums.index)
        out.append(f"On {dev}, loads served wrong after the faults by contract, {over}: "
                   f"{_counts(sums, 'loads_wrong', names)}.")
        if "stale_entry_loads" in sums.columns and sums["stale_entry_loads"].max() > 0:
            out.append(f"{dev}: loads through a stale host-index entry (one a fault-free index would not hold) "
                       f"{_counts(sums, 'stale_entry_loads', names)}; of them served wrong "
                       f"{_counts(sums, 'stale_wrong_loads', names)}; {over}.")
        costs = []
        if "recompute_tokens" in sums.columns:
            costs.append(f"tokens recomputed {_counts(sums, 'recompute_tokens', names)}")
        if "contract_extra_bytes_written" in sums.columns:
            costs.append("device bytes the headers added " + ", ".join(
                f"{c} {fmt_bytes(sums.loc[c, 'contract_extra_bytes_written'], sig3=True)}" for c in names))
        if costs:
            out.append(f"{dev}: what the contracts cost, {over}: " + "; ".join(costs) + ".")
    return out


def loads_by_contract_figure(df: Any, cols: list[str]) -> Any:
    """Loads served wrong after the faults (all, and those through a stale index entry) by contract, a bar
    group per fault setting, a row of panels per device; every bar labelled. None without fault figures."""
    import matplotlib.pyplot as plt
    import numpy as np

    got = _per_setting(df, cols)
    if got is None or _contract_col(cols) is None:
        return None
    per, ccol, others = got
    devices = list(dict.fromkeys(per["device"]))
    panels = [("loads_wrong", "loads served wrong after the faults"),
              ("stale_wrong_loads", "of them through a stale index entry")]
    panels = [p for p in panels if p[0] in per.columns]
    fig, axes = plt.subplots(len(devices), len(panels), figsize=(6 * len(panels), 3.6 * len(devices) + 0.6),
                             squeeze=False)
    contracts = list(dict.fromkeys(per[ccol]))
    for row, dev in zip(axes, devices):
        d = per[per["device"] == dev]
        groups = list(dict.fromkeys(tuple(r[c] for c in others) for _, r in d.iterrows()))
        # a fault spec is long: a line per key and per fault, so neighbouring groups do not overlap
        labels = ["\n".join(str(v) for v in g).replace(";", ";\n").replace(",", ",\n") for g in groups]
        x = np.arange(len(groups))
        width = 0.8 / max(1, len(contracts))
        for ax, (metric, title) in zip(row, panels):
            top = 0.0
            for k, c in enumerate(contracts):
                sel = d[d[ccol] == c]
                vals = {tuple(r[o] for o in others): r[metric] for _, r in sel.iterrows()}
                ys = np.array([vals.get(g, np.nan) for g in groups], float)
                xs = x + (k - (len(contracts) - 1) / 2) * width
                bars = ax.bar(xs, ys, width, label=c)
                for bar, y in zip(bars, ys):
                    if y == y:
                        ax.annotate(_count(y), (bar.get_x() + bar.get_width() / 2, y), xytext=(0, 2),
                                    textcoords="offset points", ha="center", va="bottom", fontsize=6,
                                    rotation=90 if len(contracts) * len(groups) > 12 else 0)
                top = max(top, np.nanmax(ys) if (ys == ys).any() else 0.0)
            ax.set_ylim(0, top * 1.25 or 1)
            ax.set_xticks(x, labels, fontsize=6)
            ax.set_ylabel("loads (objects)" + _seeds_note(df, dev).replace(",", ";"))
            ax.set_title(f"{dev}: {title}, by contract", fontsize=10)
            ax.grid(axis="y", alpha=0.3)
        row[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="contract",
                       title_fontsize=7)
    fig.suptitle("What each recovery contract lets through (0 = every bad load caught)", fontsize=11)
    return fig
