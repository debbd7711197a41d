"""``crossover.png`` of ``kvbed crossover``, drawn from the saved curves.csv and crossover.csv.

One panel per tier. Times are per object (the time until all ``qd`` concurrent loads, or recomputes, finish,
divided by ``qd``), so a model's recompute line is the same at every queue depth and each panel carries one
recompute line per model and accelerator and one load line per model and queue depth. Models whose curves
are identical everywhere (same KV geometry and prefill profile) are drawn once, labelled with every name.
Each crossover is a marked point with its size annotated (tokens and bytes); the rest of a tier's verdicts
("always load" / "always recompute") are counted under its title.

Plotting lives here, not in kvreplay (the trace side carries no matplotlib).
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from testbed.humanize import fmt_bytes
from testbed.plots import _save, _subplots

RECOMPUTE_STYLES = ("--", ":", "-.")
QD_MARKERS = (None, "o", "s", "^", "v", "D")  # the first queue depth: a plain line


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def model_groups(curves: list[dict[str, str]]) -> dict[str, list[str]]:
    """Models whose every curve point (load and recompute, every tier, accelerator, queue depth and size) is
    equal, keyed by the first of them: they would draw on top of each other."""
    key: dict[str, list[tuple]] = defaultdict(list)
    for r in curves:
        key[r["model"]].append((r["tier"], r["accelerator"], r["qd"], r["tokens"], r["load_ns"], r["recompute_ns"]))
    groups: dict[tuple, list[str]] = {}
    for m, pts in key.items():
        groups.setdefault(tuple(sorted(pts)), []).append(m)
    return {ms[0]: ms for ms in groups.values()}


def _series(curves: list[dict[str, str]]) -> dict[tuple[str, str, str, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(tier, model, accelerator, qd) -> tokens, load ms per object, recompute ms per object."""
    pts: dict[tuple, list[tuple[int, int, int]]] = defaultdict(list)
    for r in curves:
        pts[(r["tier"], r["model"], r["accelerator"], int(r["qd"]))].append(
            (int(r["tokens"]), int(r["load_ns"]), int(r["recompute_ns"])))
    out = {}
    for k, v in pts.items():
        a = np.array(sorted(v), float)
        q = k[3]
        out[k] = (a[:, 0], a[:, 1] / q / 1e6, a[:, 2] / q / 1e6)
    return out


def _at(x: np.ndarray, y: np.ndarray, n: float) -> float:
    """y at n on the log-log curve (x, y)."""
    return float(np.exp(np.interp(np.log(n), np.log(x), np.log(y))))


def crossover_figure(out: Path) -> Figure:
    """The figure of a crossover directory (curves.csv, crossover.csv)."""
    curves, rows = _read(out / "curves.csv"), _read(out / "crossover.csv")
    tiers = list(dict.fromkeys(r["tier"] for r in curves)) or ["(none)"]
    qds = sorted({int(r["qd"]) for r in curves})
    accs = list(dict.fromkeys(r["accelerator"] for r in curves))
    groups = model_groups(curves)
    name = {m: " = ".join(ms) for m, ms in groups.items()}
    rep = {m: first for first, ms in groups.items() for m in ms}  # model -> the one drawn
    colours = {m: f"C{i % 10}" for i, m in enumerate(groups)}
    qd_marker = {q: QD_MARKERS[i % len(QD_MARKERS)] for i, q in enumerate(qds)}
    acc_style = {a: RECOMPUTE_STYLES[i % len(RECOMPUTE_STYLES)] for i, a in enumerate(accs)}
    series = _series(curves)

    ncols = min(3, len(tiers))
    nrows = math.ceil(len(tiers) / ncols)
    fig, axes = _subplots((4.4 * ncols, 3.6 * nrows + 1.2), nrows, ncols)
    axes = list(np.atleast_1d(axes).ravel())
    for ax in axes[len(tiers):]:
        fig.delaxes(ax)
    axes = axes[:len(tiers)]
    for ax in axes[1:]:
        ax.sharex(axes[0])
        ax.sharey(axes[0])

    for ax, tier in zip(axes, tiers):
        for k, m in enumerate(groups):  # later models thinner and on top: near-equal curves both show
            for q in qds:
                s = series.get((tier, m, accs[0], q)) if accs else None
                if s is not None:
                    ax.plot(s[0], s[1], "-", color=colours[m], lw=max(0.9, 2.4 - 0.5 * k), marker=qd_marker[q],
                            ms=3.5, markevery=max(1, len(s[0]) // 8), zorder=3 + k)
            for a in accs:  # per object, recompute is the same at every queue depth: draw the first
                s = series.get((tier, m, a, qds[0]))
                if s is not None:
                    ax.plot(s[0], s[2], acc_style[a], color=colours[m], lw=max(0.7, 1.8 - 0.4 * k), zorder=2 + k / 10)
        _annotate_crossovers(ax, tier, rows, rep, name, colours, series, accs)
        verdicts = defaultdict(int)
        for r in rows:
            if r["tier"] == tier:
                verdicts[r["verdict"]] += 1
        total = sum(verdicts.values())
        counts = ", ".join(f"{v}: {verdicts[v]} of {total}" for v in ("crossover", "always load", "always recompute")
                           if verdicts[v])
        device = next((r["device"] for r in rows if r["tier"] == tier), "")
        ax.set_title(f"{tier}" + (f" (device {device})" if device else "") + f"\n{counts}", fontsize=9)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.minorticks_off()  # log-axis minor ticks on shared axes make saving slow
        ax.grid(alpha=0.3, lw=0.4)
        ax.set_xlabel("object size (tokens)", fontsize=8)
        ax.set_ylabel("time per object (ms)", fontsize=8)
        ax.tick_params(labelsize=7)

    handles = [Line2D([], [], color=colours[m], lw=2, label=name[m]) for m in groups]
    handles += [Line2D([], [], color="k", lw=1.6, marker=qd_marker[q], ms=3.5, label=f"load, qd {q}") for q in qds]
    handles += [Line2D([], [], color="k", lw=1.0, ls=acc_style[a], label=f"recompute on {a}") for a in accs]
    handles.append(Line2D([], [], color="k", ls="none", marker="o", mfc="white", ms=6,
                          label="crossover: loading no slower from here on"))
    fig.legend(handles=handles, loc="lower center", ncol=min(4, len(handles)), fontsize=7,
               bbox_to_anchor=(0.5, -0.01 - 0.03 * math.ceil(len(handles) / 4)))
    fig.suptitle("Load KV from a tier or recompute it by prefill? Time per object against object size\n"
                 "(time until all qd concurrent loads or recomputes finish, / qd; log axes)", fontsize=10)
    fig.tight_layout()
    return fig


def _annotate_crossovers(ax: Any, tier: str, rows: list[dict[str, str]], rep: dict[str, str],
                         name: dict[str, str], colours: dict[str, str], series: dict, accs: list[str]) -> None:
    """A point and a label (size in tokens and bytes, model, accelerator, qd) per distinct crossover, the
    labels stacked in the panel's empty lower right, arrows to the points."""
    seen = {}
    for r in rows:
        if r["tier"] != tier or not r["crossover_tokens"]:
            continue
        m, q = rep.get(r["model"], r["model"]), int(r["qd"])
        seen.setdefault((m, r["accelerator"], q), r)
    for i, ((m, a, q), r) in enumerate(sorted(seen.items(), key=lambda kv: int(kv[1]["crossover_tokens"]))):
        n = int(r["crossover_tokens"])
        s = series.get((tier, m, accs[0], q))
        if s is None:
            continue
        y = _at(s[0], s[1], n)
        ax.plot([n], [y], "o", mfc="white", mec=colours[m], mew=1.4, ms=6, zorder=4)
        ax.annotate(f"{n} tok ({fmt_bytes(int(r['crossover_bytes']), sig3=True)}): {name[m]}, {a}, qd {q}",
                    xy=(n, y), xytext=(0.98, 0.04 + 0.085 * i), textcoords="axes fraction", ha="right",
                    fontsize=6.5, color=colours[m],
                    arrowprops={"arrowstyle": "-", "color": colours[m], "lw": 0.6, "alpha": 0.8})


def plot(out: Path) -> Path:
    """crossover.png beside the saved files."""
    path = out / "crossover.png"
    _save(crossover_figure(out), path)
    return path


def draw(out: Path, interrupt: Any) -> list[Path]:
    """After kvreplay.crossover.write_outputs: crossover.png, unless a Ctrl-C came first (an older plot is then
    removed: it would show another sweep); a Ctrl-C while drawing marks crossover.json incomplete."""
    from kvreplay.crossover import mark_incomplete

    if interrupt():
        (out / "crossover.png").unlink(missing_ok=True)
        return []
    interrupt.enter("plotting")
    path = plot(out)
    if interrupt():
        mark_incomplete(out, interrupt.phase)
    return [path]
