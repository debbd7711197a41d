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
import json
from pathlib import Path
from typing import Any

from kvbed.core.atomicio import atomic_path
from testbed.study.aggregate import T2, fmt_value, setting_cols
from testbed.study.faultreport import loads_by_contract_figure
from testbed.study.findings import findings, saturated_points
from testbed.study.labreport import oracle_share_figure
from testbed.study.plots import bars_png, lines_png, numeric_axes, per_ruh_png, png_bytes
from testbed.study.table import setting_label
from testbed.study.vocabulary import SUMS, column_label


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
                     f"± {T2:.1f} standard errors, often wider than the mean; use 3 seeds or more")
    return "; ".join(parts)


def _cell(metric: str, r: Any) -> str:
    """A summary cell: mean ± 95% CI, or the mean marked as identical over the seeds (one sample)."""
    mean, ci = r.get(f"{metric}_mean"), r.get(f"{metric}_ci95")
    distinct, n = r.get(f"{metric}_distinct"), r.get("n")
    text = fmt_value(metric, mean)
    if ci is not None and ci == ci:
        return f"{text} ± {fmt_value(metric, ci)}"
    if distinct == 1 and n is not None and n >= 2:
        return f"{text} (identical over {int(n)} seeds)"
    return text


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
    cols = setting_cols(doc)
    for name in doc["plots"]:
        if name == "waf_by_hints":
            png = bars_png(df, doc, "end_to_end_waf", "end-to-end WAF", relative_to="none")
            if png:
                plots["waf_by_hints.png"] = png
        elif name == "gc_stall_by_hints":
            png = bars_png(df, doc, "gc_stall_total_ns", "foreground GC stall,\nsum over stalls (s)", 1e-9)
            if png:
                plots["gc_stall_by_hints.png"] = png
        elif name == "waf_vs_axis":
            for ax in numeric_axes(df, doc):
                png = lines_png(df, doc, ax)
                if png:
                    plots[f"waf_vs_{ax.split('.')[-1]}.png"] = png
        elif name == "per_ruh_bytes":
            png = per_ruh_png(study_dir, df)
            if png:
                plots["per_ruh_bytes.png"] = png
        elif name == "oracle_share_by_hints":
            fig = oracle_share_figure(df, cols)
            if fig is not None:
                plots["oracle_share_by_hints.png"] = png_bytes(fig)
        elif name == "loads_by_contract":
            fig = loads_by_contract_figure(df, cols)
            if fig is not None:
                plots["loads_by_contract.png"] = png_bytes(fig)
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
    sat = saturated_points(df)
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
