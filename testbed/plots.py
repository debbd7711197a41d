"""PNG plots of a run, drawn from its saved files' contents (result.json, timeseries.parquet, latency.parquet).

Per run: ``waf.png`` (WAF per window and cumulative over trace time),
``latency_cdf.png`` (exact CDFs from the histogram buckets), ``ruh_bytes.png``
(host/media bytes per FDP RUH, or bytes per placement class elsewhere).
``comparison_plot`` overlays several runs for ``kvbed report``. Each plot's content comes from a
``*_figure`` function returning the Figure (the tests inspect it); ``plot_*`` saves it.

Read at a glance: every series of a panel in its own line style, later ones thinner and on top, and one
equal to an earlier one named so in the legend; latencies on log axes; counts from 0; a WAF comparison as
the change against the first run; a title saying what is compared and units on every numeric axis.

Figures are drawn on matplotlib's Agg canvas directly, without pyplot: no backend selection, no figure
registry to close, and a command that plots imports only what drawing needs. A replay's own plots are laid
out when built (:func:`_run_figure`) and saved as laid out, drawn once: cropping to the contents
(``bbox_inches="tight"``, as the other figures are saved) draws a figure twice, which every replay paid for
(~0.1 s of its three plots); one whose title or legend would be cut off (a very long run name) is still cropped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

from kvbed.core.atomicio import atomic_path
from testbed import humanize
from testbed.results import Run, load_run

GiB = float(1 << 30)
CDF_SERIES = ("object_read", "object_write", "read", "write")
WAF_LABEL = "WAF (media bytes / written bytes, ratio)"  # media: flash, or DRAM on a memory device
#: where the axes of a one-run plot (7 x 4 in) sit, figure fractions: room above for a two-line title and below for a
#: log axis' tick labels (10^k, taller than plain numbers) and the axis label
RUN_LAYOUT = {"top": 0.86, "bottom": 0.14, "right": 0.95}
#: one plot of a run: where it goes and what draws it there
PlotJob = tuple[Path, Callable[[Path], None]]
#: line styles and widths in drawing order: each later series thinner and differently dashed, so a series
#: equal to an earlier one shows on top of it instead of hiding under it
SERIES_STYLES = (("-", 3.2), ("--", 2.4), (":", 2.0), ("-.", 1.4), ((0, (5, 1, 1, 1)), 1.1), ((0, (1, 2)), 1.0))


class PlainLogFormatter(LogFormatter):
    """Log-axis tick labels as plain numbers (0.01, 1, 100 rather than powers of ten), on the ticks matplotlib's
    default log formatter labels (every decade; minor ticks too when the axis spans a decade or less). Latencies
    in ms read as well this way, and these labels need no mathtext, whose first use cost every replay ~50 ms."""

    def __call__(self, x, pos=None):
        return f"{x:g}" if super().__call__(x, pos) else ""


def _plain_log_ticks(axis) -> None:
    axis.set_major_formatter(PlainLogFormatter())
    axis.set_minor_formatter(PlainLogFormatter())


def _subplots(figsize: tuple[float, float], nrows: int = 1, ncols: int = 1):
    """``plt.subplots`` with the Agg backend, without pyplot: a figure on its own Agg canvas and its axes."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols)


def _fits(fig: Figure) -> bool:
    """Whether the texts whose size depends on the runs (titles naming them, legends) lie inside the figure, as laid
    out before drawing. Axis and tick labels name no run: the layout (RUN_LAYOUT) leaves them room."""
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    parts = [fig._suptitle] + [p for ax in fig.axes for p in (ax.title, ax._left_title, ax._right_title,
                                                              ax.get_legend())]
    for p in parts:
        if p is None or not p.get_visible() or (hasattr(p, "get_text") and not p.get_text()):
            continue
        e = p.get_window_extent(renderer)
        if e.x0 < box.x0 or e.y0 < box.y0 or e.x1 > box.x1 or e.y1 > box.y1:
            return False
    return True


def _run_figure():
    """The figure and axes of a one-run plot, laid out once (RUN_LAYOUT) so that saving draws it once."""
    fig, ax = _subplots((7, 4))
    fig.subplots_adjust(**RUN_LAYOUT)
    return fig, ax


def _run_title(ax, what: str, run: Run, **kw) -> None:
    """A one-run plot's title: the run's name on a line of its own below what the plot shows, so that a name as
    long as the default run directories' fits the figure's width (:func:`_save` draws it as laid out)."""
    ax.set_title(f"{what}\n{run.label}", **kw)


def _save(fig: Figure, path: Path, laid_out: bool = False) -> None:
    """The figure cropped to its contents (``bbox_inches="tight"``: drawn twice); a ``laid_out`` one (a one-run
    plot, :func:`_run_figure`) as it is, drawn once, unless a title or legend would be cut off at its edge."""
    crop = not (laid_out and _fits(fig))
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight" if crop else None)


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
            win = run.result.get("window_ns")
            ax.plot(x, w, lw=0.8, alpha=0.5, label=f"{label + ' ' if label else ''}device WAF per window"
                    + (f" of {humanize.fmt_ns(win, sig3=True)}" if win else ""))
    if cum is not None:
        ax.plot(x, cum, lw=1.6, label=f"{label + ' ' if label else ''}end-to-end WAF (cumulative)")
    ax.set_xlabel("trace time (s)")
    ax.set_ylabel(WAF_LABEL)
    ax.grid(alpha=0.3)


def _cdf(run: Run, series: str) -> tuple[np.ndarray, np.ndarray]:
    hi, cnt = run.histogram(series)
    if len(cnt) == 0:
        return hi, cnt.astype(float)
    return hi, np.cumsum(cnt) / cnt.sum()


def _style(k: int) -> dict:
    ls, lw = SERIES_STYLES[k % len(SERIES_STYLES)]
    return {"ls": ls, "lw": lw, "zorder": 2 + k}


def waf_figure(run: Run) -> Figure:
    fig, ax = _run_figure()
    _waf_axes(ax, run)
    _run_title(ax, "WAF over trace time: per window vs cumulative end-to-end", run)
    ax.legend(fontsize=8)
    return fig


def plot_waf(run: Run, path: Path) -> None:
    _save(waf_figure(run), path, laid_out=True)


def latency_cdf_figure(run: Run) -> Figure:
    return _cdf_figure(run, [(s, s) for s in CDF_SERIES], "latency (ms, log)",
                       "latency CDF: KV object loads and stores vs device reads and writes",
                       "fraction of ops / objects (0-1)")


def plot_latency_cdf(run: Run, path: Path) -> None:
    _save(latency_cdf_figure(run), path, laid_out=True)


def plot_ruh_bytes(run: Run, path: Path) -> None:
    _save(ruh_bytes_figure(run), path, laid_out=True)


def ruh_bytes_figure(run: Run) -> Figure:
    j = run.job
    fig, ax = _run_figure()
    per_ruh = j.get("per_ruh")
    if per_ruh:
        labels = [str(r["ruh"]) for r in per_ruh]
        host = np.array([r.get("host_bytes_written", 0) for r in per_ruh], float) / GiB
        media = np.array([r.get("media_bytes_written", 0) for r in per_ruh], float) / GiB
        x = np.arange(len(labels))
        # stacked: what the host wrote and what GC moved into each handle (a GC-only slot has no host bytes), so
        # each bar's height is the handle's media bytes
        ax.bar(x, host, 0.6, label="host bytes")
        ax.bar(x, media - host, 0.6, bottom=host, label="GC bytes moved in (host + GC = media bytes)")
        ax.set_xlabel("reclaim unit handle")
        _run_title(ax, "media bytes per reclaim unit handle: host writes and GC moves", run)
    else:
        pc = j.get("per_class", [])
        labels = [str(c["class"]) for c in pc]
        x = np.arange(len(labels))
        ax.bar(x, [c["bytes_written"] / GiB for c in pc], 0.6, label="bytes written")
        ax.set_xlabel("placement class")
        _run_title(ax, "bytes written per placement class", run)
    ax.set_xticks(x, labels)
    ax.set_ylabel("bytes written (GiB)")
    top = ax.get_ylim()[1]
    ax.set_ylim(0, top * 1.15)  # room for the legend above the bars, which are often all alike in height
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    ax.grid(alpha=0.3, axis="y")
    return fig


def _same_as(drawn: list[tuple[str, np.ndarray, np.ndarray]], x: np.ndarray, y: np.ndarray) -> str | None:
    """The label of an already drawn series with exactly these points (gaps, NaN, equal too), if any: a line
    that would hide under it is named "(= label)" in the legend."""
    return next((d for d, dx, dy in drawn if np.array_equal(dx, x) and np.array_equal(dy, y, equal_nan=True)),
                None)


def _cdf_steps(ax, curves: list[tuple[str, np.ndarray, np.ndarray]], fontsize: int = 8) -> None:
    """Step CDFs, each in its own style (SERIES_STYLES) and the same colour order; a series equal to an
    earlier one says so in the legend ("= object_read") and is drawn thinner on top of it."""
    drawn: list[tuple[str, np.ndarray, np.ndarray]] = []
    for k, (label, x, y) in enumerate(curves):
        same = _same_as(drawn, x, y)
        # from 0 at the first bucket's bound: else a CDF whose first bucket holds 30% starts in mid-air at 0.3
        ax.step(np.r_[x[:1], x] / 1e6, np.r_[0.0, y], where="post", color=f"C{k % 10}",
                label=label + (f" (= {same})" if same else ""), **_style(k))
        drawn.append((label, x, y))
    ax.set_xscale("log")
    _plain_log_ticks(ax.xaxis)
    ax.grid(alpha=0.3, which="both")
    if drawn:
        ax.legend(fontsize=fontsize)


def _cdf_figure(run: Run, series: list[tuple[str, str]], xlabel: str, title: str,
                ylabel: str = "fraction (0-1)") -> Figure:
    fig, ax = _run_figure()
    curves = []
    for s, label in series:
        x, y = _cdf(run, s)
        if len(x):
            curves.append((label, x, y))
    _cdf_steps(ax, curves)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _run_title(ax, title, run, fontsize=10)
    return fig


def _cdf_plot(run: Run, series: list[tuple[str, str]], path: Path, xlabel: str, title: str,
              ylabel: str = "fraction (0-1)") -> None:
    _save(_cdf_figure(run, series, xlabel, title, ylabel), path, laid_out=True)


def tiers_waf_figure(run: Run) -> Figure:
    fig, ax = _run_figure()
    t = run.timeseries
    if "tier" in t.column_names and t.num_rows:
        tiers = np.array(t.column("tier").to_pylist())
        x = np.array(t.column("t_end_ns").to_pylist(), float) / 1e9
        cum = np.array([np.nan if v is None else v for v in t.column("end_to_end_waf_cumulative").to_pylist()], float)
        drawn: list[tuple[str, np.ndarray, np.ndarray]] = []
        for k, tier in enumerate(dict.fromkeys(tiers.tolist())):
            m = tiers == tier
            same = _same_as(drawn, x[m], cum[m])
            ax.plot(x[m], cum[m], color=f"C{k % 10}", label=f"{tier}: end-to-end WAF (cumulative)" +
                    (f" (= {same})" if same else ""), **_style(k))
            drawn.append((tier, x[m], cum[m]))
        if np.nanmin(cum, initial=np.inf) < 1.0:  # not a bug: writes still in a write-back cache (cxl-ssd's DRAM)
            ax.axhline(1.0, color="0.5", lw=0.8, ls=":")
            ax.text(0.01, 0.02, "below 1: writes held in a write-back cache (cxl-ssd's DRAM) not yet on the media",
                    transform=ax.transAxes, fontsize=7, color="0.3")
    ax.set_xlabel("trace time (s)")
    ax.set_ylabel(WAF_LABEL)
    ax.grid(alpha=0.3)
    _run_title(ax, "cumulative end-to-end WAF per tier", run)
    ax.legend(fontsize=8)
    return fig


def plot_tiers_waf(run: Run, path: Path) -> None:
    _save(tiers_waf_figure(run), path, laid_out=True)


def _tier_plot_jobs(run: Run) -> list[PlotJob]:
    """A multi-tier run: WAF per tier, each tier's load latency CDF, and the TTFT CDF of each on-hit mode."""
    tiers = [j["tier"] for j in run.result["jobs"]]
    modes = list((run.result.get("requests") or {}).get("modes") or {})
    return [
        (run.path / "waf.png", lambda p: plot_tiers_waf(run, p)),
        (run.path / "latency_cdf.png", lambda p: _cdf_plot(
            run, [(f"{t}.object_read", f"{t} object load") for t in tiers], p, "KV object load latency (ms, log)",
            "KV object load latency CDF, tier against tier", "fraction of loads (0-1)")),
        (run.path / "ttft_cdf.png", lambda p: _cdf_plot(
            run, [(f"ttft.{m}", f"TTFT, on hit: {m}") for m in modes], p, "TTFT estimate (ms, log)",
            "TTFT CDF: load vs recompute vs best on a lower-tier hit", "fraction of requests (0-1)")),
    ]


def draw_jobs(todo: list[PlotJob], should_stop: Callable[[], bool] = lambda: False) -> list[Path]:
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
    """Stacked bars of load outcomes (objects), one per block of result.json's ``faults`` section; the counts
    other than ``reused`` written above each bar (beside thousands of reused loads they are too thin to see)."""
    x = np.arange(len(blocks))
    bottom = np.zeros(len(blocks))
    for name, colour in OUTCOME_COLOURS.items():
        v = np.array([b["outcomes"][name]["objects"] for b in blocks], float)
        ax.bar(x, v, bottom=bottom, color=colour, label=name)
        bottom += v
    for xi, top, b in zip(x, bottom, blocks):
        ax.annotate("\n".join(f"{k} {b['outcomes'][k]['objects']:,}" for k in OUTCOME_COLOURS if k != "reused"),
                    (xi, top), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, max(1.0, float(bottom.max())) * 1.3)  # room for the counts
    ax.set_xticks(x, labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("loads (objects)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, off their counts
    ax.grid(alpha=0.3, axis="y")


def fault_outcomes_figure(run: Run) -> Figure:
    """One run: outcomes of the loads after each fault, and the per-window outcome time series."""
    f = run.result["faults"]
    fig, (a0, a1) = _subplots((12, 4), 1, 2)
    blocks = [f["before_faults"], *f["injected"]]
    _outcome_bars(a0, ["before faults"] + [i["spec"] for i in f["injected"]], blocks)
    a0.set_title(f"load outcomes before vs after each fault, contract {f['contract']['name']}", fontsize=10)
    t = _col(run, "t_start_ns")
    if t is not None and "loads_reused" in run.timeseries.column_names:
        top = 1.0
        for k, (name, colour) in enumerate(OUTCOME_COLOURS.items()):
            y = _col(run, f"loads_{name}")
            top = max(top, float(np.nanmax(y)) if len(y) else 0.0)
            a1.plot(t / 1e9, y, color=colour, label=name, clip_on=False, **_style(k))  # zeros on the edge
        for i in f["injected"]:
            a1.axvline(i["at_ns"] / 1e9, color="k", ls="--", lw=0.8)
        a1.set_xlabel("trace time (s)")
        a1.set_ylabel("loads per window (symlog: linear below 1)")
        a1.set_yscale("symlog", linthresh=1)
        a1.set_ylim(0, top * 2)  # counts: no negative ticks
        a1.legend(fontsize=7)
        a1.set_title("load outcomes per window over trace time (dashed: faults)", fontsize=10)
    fig.suptitle(f"faults and recovery - {run.label}", fontsize=11)
    fig.subplots_adjust(wspace=0.45)  # room for the bars' legend beside them
    return fig


def plot_fault_outcomes(run: Run, path: Path) -> None:
    _save(fault_outcomes_figure(run), path)


def contract_outcomes_figure(runs: list[Run]) -> Figure:
    """Several runs (e.g. one per contract): all loads after the first fault, one bar per run."""
    fig, ax = _subplots((max(5, 1.3 * len(runs)), 4))
    blocks = []
    for r in runs:
        inj = r.result["faults"]["injected"]
        tot = {"outcomes": {k: {"objects": sum(i["outcomes"][k]["objects"] for i in inj)} for k in OUTCOME_COLOURS}}
        blocks.append(tot)
    _outcome_bars(ax, [f"{r.label}\n{r.result['faults']['contract']['name']}" for r in runs], blocks)
    ax.set_title("load outcomes after the faults, run against run (contract under each)", fontsize=10)
    return fig


def plot_contract_outcomes(runs: list[Run], path: str | os.PathLike) -> Path:
    _save(contract_outcomes_figure(runs), Path(path))
    return Path(path)


def make_run_plots(run_dir: str | os.PathLike, label: str | None = None,
                   should_stop: Callable[[], bool] = lambda: False) -> list[Path]:
    """The plots of one run directory, titled with ``label`` (default: the directory's name); stops between
    plots once ``should_stop`` says so and returns the plots drawn."""
    return draw_run_plots(load_run(run_dir, label), should_stop)


def draw_run_plots(run: Run, should_stop: Callable[[], bool] = lambda: False) -> list[Path]:
    """The plots of one run into ``run.path``, from the run's contents as its files hold them (a replay passes
    the tables it has just written, so nothing is read back)."""
    return draw_jobs(run_plot_jobs(run), should_stop)


def run_plot_jobs(run: Run) -> list[PlotJob]:
    """The plots a run gets, in drawing order: (path, draw), each drawn by ``draw(path)``."""
    if "requests" in run.result:
        return _tier_plot_jobs(run)
    todo = [(run.path / "waf.png", lambda p: plot_waf(run, p)),
            (run.path / "latency_cdf.png", lambda p: plot_latency_cdf(run, p)),
            (run.path / "ruh_bytes.png", lambda p: plot_ruh_bytes(run, p))]
    if "faults" in run.result:
        todo.append((run.path / "faults.png", lambda p: plot_fault_outcomes(run, p)))
    if (run.job.get("hint_policy") or {}).get("lab"):
        todo.append((run.path / "hint_lab.png", lambda p: plot_hint_lab(run, p)))
    return todo


def hint_lab_figure(run: Run) -> Figure:
    """``--hint-lab``: where the policy put each oracle class's writes (row shares), and end-to-end WAF with
    hints none, the policy's and oracle on the same device, with the share of the oracle's cut captured."""
    lab = run.job["hint_policy"]["lab"]
    conf = np.asarray(lab["confusion_writes"], np.float64)
    rows = conf.sum(axis=1, keepdims=True)
    share = np.divide(conf, rows, out=np.zeros_like(conf), where=rows > 0)
    fig, (a0, a1) = _subplots((11, 4.2), 1, 2)
    im = a0.imshow(share, vmin=0, vmax=1, cmap="Blues", aspect="auto")
    n = len(conf)
    a0.set_xticks(range(n))
    a0.set_yticks(range(n))
    # a guarded policy (kvreplay/hints/abstain.py) gives class 0 to every write it abstains on, too
    # (of them, the writes it had no opinion on: before a model's first fit, the only ones when unguarded)
    pol = run.job.get("hint_policy") or {}
    abst, none_yet = pol.get("abstained_writes_share"), pol.get("no_opinion_writes_share")
    a0.set_xlabel("class the policy gave (0 = shortest predicted life,\nand every write abstained on"
                  + ("" if abst is None else f": {100 * abst:.1f}% of writes")
                  + ("" if none_yet is None else f", {100 * none_yet:.1f}% with no opinion") + ")")
    a0.set_ylabel("oracle class (0 = shortest true life)")
    acc = lab["accuracy"]
    one = lab.get("accuracy_one_class")
    if one is None and conf.sum():  # a result from before the reference was recorded: the same from the matrix
        one = float(rows.max() / conf.sum())
    rho = lab["spearman"]
    a0.set_title(f"writes per oracle class, by the policy's class\naccuracy {100 * acc:.1f}% of writes, Spearman "
                 f"{'-' if rho is None else f'{rho:+.2f}'}\n(every write in the oracle's largest class: "
                 f"{'-' if one is None else f'{100 * one:.1f}%'})", fontsize=10)
    fig.colorbar(im, ax=a0, label="share of the oracle class's writes (0-1)")
    w = lab["waf"]
    names = ["none", run.job.get("hints") or "policy", "oracle"]
    vals = [w["none"], w["policy"], w["oracle"]]
    a1.bar(range(3), [v if v is not None else 0 for v in vals], color=["0.6", "C0", "C2"])
    for k, v in enumerate(vals):
        a1.text(k, v or 0, "-" if v is None else f"{v:.3f}", ha="center", va="bottom", fontsize=9)
    a1.set_xticks(range(3))
    a1.set_xticklabels(names, fontsize=8)
    a1.set_ylabel("end-to-end WAF (media / user bytes)")
    lo = min(v for v in vals if v is not None)
    a1.set_ylim(max(0.0, lo - 0.1), max(v for v in vals if v is not None) * 1.05 + 0.01)
    r = lab["oracle_waf_cut_captured_ratio"]
    cap = (f"{100 * r:.0f}% of the oracle's cut captured ((none - policy) / (none - oracle))" if r is not None
           else f"share of the oracle's cut undefined: {lab.get('undefined_because', '')}")
    a1.set_title(f"end-to-end WAF on the same device\n{cap}", fontsize=9)
    fig.suptitle(f"hint lab: the policy's classes against the oracle's - {run.label}", fontsize=11, y=1.08)
    return fig


def plot_hint_lab(run: Run, path: Path) -> None:
    _save(hint_lab_figure(run), path)


def comparison_figure(runs: list[Run]) -> Figure:
    """``kvbed report``: WAF over time, load latency CDFs, WAF change against the first run, tail latencies."""
    fig, axes = _subplots((12, 8), 2, 2)
    ax = axes[0, 0]
    drawn: list[tuple[str, np.ndarray, np.ndarray]] = []
    for k, r in enumerate(runs):
        n_lines = len(ax.get_lines())
        _waf_axes(ax, r, label=r.label, cumulative_only=True)
        line = ax.get_lines()[-1] if len(ax.get_lines()) > n_lines else None
        if line is not None:  # equal curves (e.g. two runs without GC) stay visible, and the legend says so
            ls, lw = SERIES_STYLES[k % len(SERIES_STYLES)]
            line.set_linestyle(ls)
            line.set_linewidth(lw)
            x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
            same = _same_as(drawn, x, y)
            if same:
                line.set_label(f"{line.get_label()} (= {same})")
            drawn.append((r.label, x, y))
    ax.set_title("end-to-end WAF (cumulative) over trace time")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    curves = []
    for r in runs:
        x, y = _cdf(r, "object_read")
        if len(x):
            curves.append((r.label, x, y))
    _cdf_steps(ax, curves, fontsize=7)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("KV object load latency (ms, log)")
    ax.set_ylabel("fraction of loads (0-1)")
    ax.set_title("KV object load latency CDF")
    ax = axes[1, 0]
    labels = [r.label for r in runs]
    x = np.arange(len(runs))
    wafs = [r.job.get("end_to_end_waf") for r in runs]
    # runs that wrote different bytes for the trace's objects (a recovery contract's headers, another page size)
    # divide their WAFs by different amounts: then the flash writes themselves are compared, as the table does
    from testbed.report import denominators_differ

    by_media = denominators_differ([{"tier": r.job.get("tier"), "user_bytes_written": r.job.get("user_bytes_written"),
                                     "incomplete": bool(r.result.get("incomplete"))} for r in runs])
    vals = [r.job.get("media_bytes_written") for r in runs] if by_media else wafs
    base = vals[0] if runs else None
    change = [100 * (v / base - 1) if (v and base) else np.nan for v in vals]
    ax.bar(x, change, 0.6, color=["0.6" if k == 0 else "C0" for k in range(len(runs))])
    ax.axhline(0, color="k", lw=0.8)
    for xi, c, v in zip(x, change, vals):
        if c == c:
            ax.annotate(f"{c:+.1f}%\n({humanize.fmt_bytes(v) if by_media else f'WAF {v:.3f}'})", (xi, c),
                        xytext=(0, 3 if c >= 0 else -3), textcoords="offset points", ha="center",
                        va="bottom" if c >= 0 else "top", fontsize=7)
    lim = max([abs(c) for c in change if c == c] + [0.5]) * 1.4
    ax.set_ylim(-lim, lim)
    ax.set_xticks(x, labels, rotation=20, fontsize=8)
    what = "media bytes written" if by_media else "end-to-end WAF"
    ax.set_ylabel(f"{what} change vs {labels[0] if labels else 'the first run'} (%)")
    ax.set_title(f"{what}, change against the first run" + (
        "\n(not WAF: the runs wrote different bytes for the trace's objects)" if by_media else ""))
    ax.grid(alpha=0.3, axis="y")
    ax = axes[1, 1]
    tails: list[float] = []
    for k, (p, name) in enumerate((("99.000000", "p99"), ("99.900000", "p99.9"))):
        vals = []
        for r in runs:
            e = r.job.get("object_read") or {}
            v = (e.get("lat_ns", {}).get("percentile", {}).get(p) or 0) / 1e6
            vals.append(v if v > 0 else np.nan)  # a log axis has no 0: no bar, not a bar to the axis' edge
        ax.bar(x + (k - 0.5) * 0.35, vals, 0.35, label=name)
        tails.extend(v for v in vals if v == v)
    ax.set_xticks(x, labels, rotation=20, fontsize=8)
    if tails and max(tails) < 10 * min(tails):  # within a decade: bars from 0 show their ratio as it is
        ax.set_ylim(0, 1.15 * max(tails))
        ax.set_ylabel("KV object load latency (ms)")
    else:  # a log axis from a whole decade below the shortest bar, so no bar looks empty
        ax.set_yscale("log")
        if tails:
            ax.set_ylim(bottom=10 ** np.floor(np.log10(min(tails))))
        _plain_log_ticks(ax.yaxis)
        ax.set_ylabel("KV object load latency (ms, log)")
    ax.set_title("tail latency of KV object loads")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y", which="both")
    fig.suptitle("runs compared: " + ", ".join(labels), fontsize=11)
    fig.tight_layout()
    return fig


def comparison_plot(runs: list[Run], path: str | os.PathLike) -> Path:
    p = Path(path)
    _save(comparison_figure(runs), p)
    return p
