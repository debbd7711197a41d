"""PNG plots of a run, drawn from its saved files' contents (result.json, timeseries.parquet, latency.parquet).

Per run: ``waf.png`` (WAF per window and cumulative over trace time),
``latency_cdf.png`` (exact CDFs from the histogram buckets), ``ruh_bytes.png``
(host/media bytes per FDP RUH, or bytes per placement class elsewhere).
``comparison_plot`` overlays several runs for ``kvbed report``.

Figures are drawn on matplotlib's Agg canvas directly, without pyplot: no backend selection, no figure
registry to close, and a command that plots imports only what drawing needs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from kvbed.core.atomicio import atomic_path
from testbed.results import Run, load_run

GiB = float(1 << 30)
CDF_SERIES = ("object_read", "object_write", "read", "write")


def _subplots(figsize: tuple[float, float], nrows: int = 1, ncols: int = 1):
    """``plt.subplots`` with the Agg backend, without pyplot: a figure on its own Agg canvas and its axes."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols)


def _save(fig: Figure, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")


def _col(run: Run, name: str) -> np.ndarray | None:
    if name not in run.timeseries.column_names:
        return None
    return np.array([np.nan if v is None else v for v in run.timeseries.column(name).to_pylist()], float)


def _waf_axes(ax, run: Run, label: str | None = None, cumulative_only: bool = False) -> None:
    t = _col(run, "t_end_ns")
    if t is None or len(t) == 0:
        return
    x = t / 1e9
    cum = _col(run, "end_to_end_waf_cumulative")
    if not cumulative_only:
        w = _col(run, "waf")
        if w is not None:
            ax.plot(x, w, lw=0.8, alpha=0.5, label=f"{label + ' ' if label else ''}device WAF per window")
    if cum is not None:
        ax.plot(x, cum, lw=1.6, label=f"{label + ' ' if label else ''}end-to-end WAF (cumulative)")
    ax.set_xlabel("trace time (s)")
    ax.set_ylabel("WAF")
    ax.grid(alpha=0.3)


def _cdf(run: Run, series: str) -> tuple[np.ndarray, np.ndarray]:
    hi, cnt = run.histogram(series)
    if len(cnt) == 0:
        return hi, cnt.astype(float)
    return hi, np.cumsum(cnt) / cnt.sum()


def plot_waf(run: Run, path: Path) -> None:
    fig, ax = _subplots((7, 4))
    _waf_axes(ax, run)
    ax.set_title(f"WAF over time - {run.label}")
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_latency_cdf(run: Run, path: Path) -> None:
    _cdf_plot(run, [(s, s) for s in CDF_SERIES], path, "latency (ms)", "latency CDF", "fraction of ops / objects")


def plot_ruh_bytes(run: Run, path: Path) -> None:
    j = run.job
    fig, ax = _subplots((7, 4))
    per_ruh = j.get("per_ruh")
    if per_ruh:
        labels = [str(r["ruh"]) for r in per_ruh]
        host = [r.get("host_bytes_written", 0) / GiB for r in per_ruh]
        media = [r.get("media_bytes_written", 0) / GiB for r in per_ruh]
        x = np.arange(len(labels))
        ax.bar(x - 0.2, host, 0.4, label="host bytes")
        ax.bar(x + 0.2, media, 0.4, label="media bytes")
        ax.set_xlabel("reclaim unit handle")
        ax.set_title(f"bytes per RUH - {run.label}")
    else:
        pc = j.get("per_class", [])
        labels = [str(c["class"]) for c in pc]
        x = np.arange(len(labels))
        ax.bar(x, [c["bytes_written"] / GiB for c in pc], 0.6, label="bytes written")
        ax.set_xlabel("placement class")
        ax.set_title(f"bytes per placement class - {run.label}")
    ax.set_xticks(x, labels)
    ax.set_ylabel("GiB")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    _save(fig, path)


def _cdf_plot(run: Run, series: list[tuple[str, str]], path: Path, xlabel: str, title: str,
              ylabel: str = "fraction") -> None:
    fig, ax = _subplots((7, 4))
    for s, label in series:
        x, y = _cdf(run, s)
        if len(x):
            ax.step(x / 1e6, y, where="post", label=label)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title} - {run.label}")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_tiers_waf(run: Run, path: Path) -> None:
    fig, ax = _subplots((7, 4))
    t = run.timeseries
    if "tier" in t.column_names and t.num_rows:
        tiers = np.array(t.column("tier").to_pylist())
        x = np.array(t.column("t_end_ns").to_pylist(), float) / 1e9
        cum = np.array([np.nan if v is None else v for v in t.column("end_to_end_waf_cumulative").to_pylist()], float)
        for tier in dict.fromkeys(tiers.tolist()):
            m = tiers == tier
            ax.plot(x[m], cum[m], lw=1.6, label=f"{tier}: end-to-end WAF (cumulative)")
    ax.set_xlabel("trace time (s)")
    ax.set_ylabel("WAF")
    ax.grid(alpha=0.3)
    ax.set_title(f"WAF per tier - {run.label}")
    ax.legend(fontsize=8)
    _save(fig, path)


def make_tier_plots(run: Run, should_stop: Callable[[], bool] = lambda: False) -> list[Path]:
    """A multi-tier run: WAF per tier, each tier's load latency CDF, and the TTFT CDF of each on-hit mode."""
    tiers = [j["tier"] for j in run.result["jobs"]]
    modes = list((run.result.get("requests") or {}).get("modes") or {})
    return _draw(should_stop, [
        (run.path / "waf.png", lambda p: plot_tiers_waf(run, p)),
        (run.path / "latency_cdf.png", lambda p: _cdf_plot(
            run, [(f"{t}.object_read", f"{t} object load") for t in tiers], p, "latency (ms)",
            "KV object load latency per tier")),
        (run.path / "ttft_cdf.png", lambda p: _cdf_plot(
            run, [(f"ttft.{m}", f"TTFT, on hit: {m}") for m in modes], p, "TTFT (ms)", "TTFT estimate")),
    ])


def _draw(should_stop: Callable[[], bool], todo: list[tuple[Path, Callable[[Path], None]]]) -> list[Path]:
    """Draw each plot whole, stopping before the next one once ``should_stop`` says so (Ctrl-C)."""
    done = []
    for path, draw in todo:
        if should_stop():
            break
        draw(path)
        done.append(path)
    return done


OUTCOME_COLOURS = {"reused": "tab:green", "detected": "tab:blue", "missing": "tab:orange", "wrong": "tab:red"}


def _outcome_bars(ax, labels: list[str], blocks: list[dict]) -> None:
    """Stacked bars of load outcomes (objects), one per block of result.json's ``faults`` section."""
    x = np.arange(len(blocks))
    bottom = np.zeros(len(blocks))
    for name, colour in OUTCOME_COLOURS.items():
        v = np.array([b["outcomes"][name]["objects"] for b in blocks], float)
        ax.bar(x, v, bottom=bottom, color=colour, label=name)
        bottom += v
    ax.set_xticks(x, labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("loads (objects)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")


def plot_fault_outcomes(run: Run, path: Path) -> None:
    """One run: outcomes of the loads after each fault, and the per-window outcome time series."""
    f = run.result["faults"]
    fig, (a0, a1) = _subplots((12, 4), 1, 2)
    blocks = [f["before_faults"], *f["injected"]]
    _outcome_bars(a0, ["before faults"] + [i["spec"] for i in f["injected"]], blocks)
    a0.set_title(f"load outcomes, contract {f['contract']['name']}")
    t = _col(run, "t_start_ns")
    if t is not None and "loads_reused" in run.timeseries.column_names:
        for name, colour in OUTCOME_COLOURS.items():
            a1.plot(t / 1e9, _col(run, f"loads_{name}"), color=colour, label=name, lw=1)
        for i in f["injected"]:
            a1.axvline(i["at_ns"] / 1e9, color="k", ls="--", lw=0.8)
        a1.set_xlabel("trace time (s)")
        a1.set_ylabel("loads per window")
        a1.set_yscale("symlog")
        a1.legend(fontsize=7)
        a1.set_title("around the faults (dashed)")
    _save(fig, path)


def plot_contract_outcomes(runs: list[Run], path: str | os.PathLike) -> Path:
    """Several runs (e.g. one per contract): all loads after the first fault, one bar per run."""
    fig, ax = _subplots((max(5, 1.3 * len(runs)), 4))
    blocks = []
    for r in runs:
        inj = r.result["faults"]["injected"]
        tot = {"outcomes": {k: {"objects": sum(i["outcomes"][k]["objects"] for i in inj)} for k in OUTCOME_COLOURS}}
        blocks.append(tot)
    _outcome_bars(ax, [f"{r.label}\n{r.result['faults']['contract']['name']}" for r in runs], blocks)
    ax.set_title("load outcomes after the faults, per contract")
    _save(fig, Path(path))
    return Path(path)


def make_run_plots(run_dir: str | os.PathLike, label: str | None = None,
                   should_stop: Callable[[], bool] = lambda: False) -> list[Path]:
    """The plots of one run directory, titled with ``label`` (default: the directory's name); stops between
    plots once ``should_stop`` says so and returns the plots drawn."""
    return draw_run_plots(load_run(run_dir, label), should_stop)


def draw_run_plots(run: Run, should_stop: Callable[[], bool] = lambda: False) -> list[Path]:
    """The plots of one run into ``run.path``, from the run's contents as its files hold them (a replay passes
    the tables it has just written, so nothing is read back)."""
    if "requests" in run.result:
        return make_tier_plots(run, should_stop)
    todo = [(run.path / "waf.png", lambda p: plot_waf(run, p)),
            (run.path / "latency_cdf.png", lambda p: plot_latency_cdf(run, p)),
            (run.path / "ruh_bytes.png", lambda p: plot_ruh_bytes(run, p))]
    if "faults" in run.result:
        todo.append((run.path / "faults.png", lambda p: plot_fault_outcomes(run, p)))
    return _draw(should_stop, todo)


def comparison_plot(runs: list[Run], path: str | os.PathLike) -> Path:
    fig, axes = _subplots((12, 8), 2, 2)
    ax = axes[0, 0]
    for r in runs:
        _waf_axes(ax, r, label=r.label, cumulative_only=True)
    ax.set_title("end-to-end WAF (cumulative)")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    for r in runs:
        x, y = _cdf(r, "object_read")
        if len(x):
            ax.step(x / 1e6, y, where="post", label=r.label)
    ax.set_xscale("log")
    ax.set_xlabel("object read latency (ms)")
    ax.set_ylabel("fraction of loads")
    ax.set_title("KV object load latency CDF")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax = axes[1, 0]
    labels = [r.label for r in runs]
    x = np.arange(len(runs))
    ax.bar(x, [r.job.get("end_to_end_waf") or 0 for r in runs], 0.6)
    ax.set_xticks(x, labels, rotation=20, fontsize=8)
    ax.set_ylabel("end-to-end WAF")
    ax.set_title("WAF")
    ax.grid(alpha=0.3, axis="y")
    ax = axes[1, 1]
    for k, (p, name) in enumerate((("99.000000", "p99"), ("99.900000", "p99.9"))):
        vals = []
        for r in runs:
            e = r.job.get("object_read") or {}
            vals.append((e.get("lat_ns", {}).get("percentile", {}).get(p) or 0) / 1e6)
        ax.bar(x + (k - 0.5) * 0.35, vals, 0.35, label=name)
    ax.set_xticks(x, labels, rotation=20, fontsize=8)
    ax.set_ylabel("object read latency (ms)")
    ax.set_yscale("log")
    ax.set_title("tail latency of KV object loads")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y", which="both")
    fig.tight_layout()
    p = Path(path)
    _save(fig, p)
    return p
