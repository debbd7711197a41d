"""A study's table: one row per point (axis values, seed, run directory, status, metrics), and the summary
across seeds (mean and 95% confidence interval). Made only from saved files: study.json, the run
directories' result.json and the traces' metadata."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from testbed.study.vocabulary import METRICS, REFERENCES, UNSET, metric_name

_PCT = {"p50": "50.000000", "p99": "99.000000", "p999": "99.900000"}
_ENTRY = {"read": "read", "write": "write", "load": "object_read"}
# two-sided 95% Student-t critical values by degrees of freedom (1..30); 1.96 beyond
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def dimensions(doc: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(setting columns, policy partners) of a study: the policy is the hint policy with the axes that vary
    with it in a [[zip]] group (``noisy-oracle error_rate=0.3``); a setting is every other axis, the
    trace axes replaced by the trace's label (seeds aside)."""
    partners = [k for g in doc.get("zips", []) if "replay.hints" in g for k in g if k != "replay.hints"]
    settings = [a for a in doc["axes"] if a != "replay.hints" and a not in partners and not a.startswith("trace.")]
    if any(a.startswith("trace.") for a in doc["axes"]) or len({t["label"] for t in doc["traces"].values()}) > 1:
        settings.append("trace")
    return settings, partners


def setting_label(row: Any, cols: list[str]) -> str:
    """A setting as the reports name it: ``op_ratio=0.07, synth`` (the trace by its label), ``all`` without one."""
    def val(c: str) -> str:
        v = row[c]
        return "-" if v is None or v != v else str(v)

    return ", ".join(val(c) if c == "trace" else f"{c.split('.')[-1]}={val(c)}" for c in cols) or "all"


def metrics_of(job: dict[str, Any]) -> dict[str, Any]:
    """Every metric of one run's job entry (None where the device has no such figure)."""
    gc = job.get("gc") or {}
    out: dict[str, Any] = {
        "waf": job.get("waf"), "host_waf": job.get("host_waf"), "end_to_end_waf": job.get("end_to_end_waf"),
        "gc_bytes_moved": gc.get("bytes_moved"), "host_gc_bytes": (job.get("host_gc") or {}).get("relocated_bytes"),
        "gc_runs": job.get("gc_count"), "gc_stall_total_ns": job.get("gc_stall_ns"), "erases": job.get("erases"),
        "zone_resets": job.get("zone_resets"), "user_bytes_written": job.get("user_bytes_written"),
    }
    gs = job.get("gc_stall") or {}
    wait = gs.get("stalled_write_wait_ns") or {}
    out["gc_stalled_writes_ratio"] = gs.get("stalled_write_cmds_ratio")
    out["gc_stall_p99_ns"] = wait.get("p99")
    out["gc_stall_max_ns"] = wait.get("max")
    sat = job.get("saturation") or {}
    out["saturated"] = None if sat.get("saturated") is None else int(sat["saturated"])
    out["backlogged_ratio"] = sat.get("backlogged_ratio")
    out["busy_ratio"] = sat.get("busy_ratio")
    fs = job.get("faults") or {}
    for k in ("loads_wrong", "loads_detected", "loads_missing", "stale_entry_loads", "stale_wrong_loads",
              "recompute_tokens", "contract_extra_bytes_written"):
        out[k] = fs.get(k)
    lab = (job.get("hint_policy") or {}).get("lab") or {}
    out["hint_accuracy"] = lab.get("accuracy")
    out["hint_accuracy_one_class"] = lab.get("accuracy_one_class")
    out["hint_spearman"] = lab.get("spearman")
    out["oracle_waf_cut_captured_ratio"] = lab.get("oracle_waf_cut_captured_ratio")
    for short, entry in _ENTRY.items():
        pct = ((job.get(entry) or {}).get("lat_ns") or {}).get("percentile") or {}
        n = ((job.get(entry) or {}).get("lat_ns") or {}).get("N", 0)
        for tag, key in _PCT.items():
            out[f"{short}_{tag}_ns"] = pct.get(key) if n else None
    return out


def t975(n: int) -> float:
    """The 95% two-sided Student-t factor for a mean of ``n`` samples (n >= 2)."""
    return _T975[n - 2] if n - 1 <= len(_T975) else 1.96


def _hit_ratios(trace_file: Path) -> dict[str, float | None]:
    """Per-tier hit ratios the tier simulator recorded in the trace (empty for a trace without them):
    ``ref_hit_ratio_TIER`` = the tier's hits / every chunk of every request, ``lookup_hit_ratio_TIER`` = its
    hits / the lookups that reached it (kvreplay.tiers.hitratio; None where an old trace did not record it)."""
    from kvreplay import schema as S
    from kvreplay.tiers import hitratio

    try:
        meta = S.TraceReader(trace_file).meta
    except Exception:  # a trace given by path that has no simulator stats, or is gone
        return {}
    stats = hitratio.upgrade(meta.tier_stats or {}, meta.extra.get("tier_sim_counters"))
    return {f"{k}_{t}": v.get(k) for t, v in stats.items() if isinstance(v, dict) and "lookup_hit_ratio" in v
            for k in ("ref_hit_ratio", "lookup_hit_ratio")}


def build(study_dir: Path) -> Any:
    """The table (a pandas DataFrame) of a study directory, from its saved files."""
    import pandas as pd

    doc = json.loads((study_dir / "study.json").read_text())
    axes = list(doc["axes"])
    _, partners = dimensions(doc)
    hits: dict[str, dict[str, float]] = {}
    rows = []
    for pt in doc["points"]:
        row: dict[str, Any] = {a: None if pt["axes"].get(a) == UNSET else pt["axes"].get(a) for a in axes}
        policy = " ".join([pt["hints"], *(f"{k.split('.')[-1]}={row[k]}" for k in partners if row.get(k) is not None)])
        row.update(seed=pt["seed"], trace=doc["traces"][pt["trace_hash"]]["label"], device=pt["device"],
                   hints=pt["hints"], policy=policy, run_dir=f"runs/{pt['run_hash']}")
        res_file = study_dir / "runs" / pt["run_hash"] / "result.json"
        err_file = study_dir / "runs" / f"{pt['run_hash']}.error.json"
        status, error, m, offline = "missing", None, {}, None
        if res_file.exists():
            res = json.loads(res_file.read_text())
            status = "incomplete" if res.get("incomplete") else "ok"
            error = res.get("error")
            m = metrics_of(res["jobs"][0])
            offline = (res["jobs"][0].get("hint_policy") or {}).get("offline")
        elif err_file.exists():
            status, error = "failed", json.loads(err_file.read_text())["error"]
        # the policy read the future (needs_future): an oracle of some kind, whatever its name
        row.update(status=status, error=error, hint_offline=offline)
        row.update({k: m.get(k) for k in METRICS})
        th = pt["trace_hash"]
        if th not in hits:
            hits[th] = _hit_ratios(study_dir / doc["traces"][th]["file"])
        row.update(hits[th])
        rows.append(row)
    df = pd.DataFrame(rows)
    df = df[[*axes, *[c for c in df.columns if c not in axes]]]
    for a in axes:  # one type per column (Parquet): numbers stay numbers, a mix of kinds becomes text
        kinds = {"number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__
                 for v in df[a] if v is not None and v == v}
        if len(kinds) > 1:
            df[a] = [None if v is None or v != v else str(v) for v in df[a]]
    for k in METRICS:
        df[k] = pd.to_numeric(df[k], errors="coerce")
    return df


def shown_metrics(metrics: list[str]) -> list[str]:
    """A study's metrics as its summary and report show them: a metric with a reference the study does not list
    gets it right after itself (vocabulary.REFERENCES: ``hint_accuracy`` means something only against
    ``hint_accuracy_one_class``); a reference the study lists stays where it is."""
    out: list[str] = []
    for m in map(metric_name, metrics):
        if m not in out:
            out.append(m)
        ref = REFERENCES.get(m)
        if ref is not None and ref not in map(metric_name, metrics):
            out.append(ref)
    return out


def summarize(df: Any, doc: dict[str, Any], metrics: list[str]) -> Any:
    """Mean, 95% CI half-width, count and distinct values across seeds, per setting and policy (points that
    ran). Seeds that gave one value (``<metric>_distinct`` 1: a policy that does not depend on the seed, on an
    imported trace) are one sample, not an interval: their ``_ci95`` is empty, as for a single seed."""
    import pandas as pd

    keys = [*dimensions(doc)[0], "policy"]
    ok = df[df["status"] == "ok"]
    rows = []
    for vals, g in ok.groupby(keys, sort=False, dropna=False):
        vals = vals if isinstance(vals, tuple) else (vals,)
        row: dict[str, Any] = dict(zip(keys, vals))
        row["n"] = len(g)
        if "saturated" in g.columns:  # points whose device was saturated (their latency tails are queueing)
            row["saturated_points"] = int((g["saturated"] == 1).sum())
        for m in metrics:
            x = g[m].dropna().astype(float)
            n = len(x)
            distinct = int(x.nunique())
            row[f"{m}_mean"] = float(x.mean()) if n else None
            row[f"{m}_ci95"] = float(t975(n) * x.std(ddof=1) / math.sqrt(n)) if n >= 2 and distinct > 1 else None
            row[f"{m}_distinct"] = distinct
        rows.append(row)
    return pd.DataFrame(rows)


def refresh(study_dir: Path) -> None:
    """Rebuild table.parquet/csv and summary.csv from the study directory's saved files."""
    doc = json.loads((study_dir / "study.json").read_text())
    df = build(study_dir)
    write(study_dir, df, summarize(df, doc, shown_metrics(doc["metrics"])))


def write(study_dir: Path, df: Any, summary: Any) -> None:
    """table.parquet, table.csv and summary.csv, each written whole or not at all."""
    from kvbed.core.atomicio import atomic_path

    with atomic_path(study_dir / "table.parquet") as tmp:
        df.to_parquet(tmp, index=False)
    with atomic_path(study_dir / "table.csv") as tmp:
        df.to_csv(tmp, index=False)
    with atomic_path(study_dir / "summary.csv") as tmp:
        summary.to_csv(tmp, index=False)


def load(study_dir: str | Path) -> Any:
    """A study's table as a pandas DataFrame (``kvbed.study.load`` in notebooks)."""
    from kvbed.core.errors import KvbedError

    p = Path(study_dir)
    if not (p / "table.parquet").exists():
        raise KvbedError("no table.parquet: not a study directory, or the study has not run", where=str(p))
    import pandas as pd

    return pd.read_parquet(p / "table.parquet")
