"""The aggregates every part of a study's report reads: the settings a bar group stands for, a metric's mean
and 95% interval over the seeds per group (none from 1 seed, nor from seeds that all gave one value: one
sample), and how a metric's value is printed."""

from __future__ import annotations

from typing import Any

from testbed.humanize import fmt_bytes, fmt_ns

T2 = 12.706  # the 95% Student-t factor of a mean of 2 samples (testbed.study.table.t975(2))


def fmt_value(metric: str, v: Any) -> str:
    """A metric's value as the report's tables print it: time and size with units, WAF to 4 decimals."""
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


def setting_cols(doc: dict[str, Any]) -> list[str]:
    """The settings other than the device (a plot's facet): what a bar group stands for."""
    from testbed.study.table import dimensions

    return [a for a in dimensions(doc)[0] if a != "replay.device"]


def aggregate(df: Any, keys: list[str], metric: str) -> Any:
    """Per group of ``keys`` (finished points only): ``metric``'s mean, std, seed count, distinct values, and
    the 95% interval half-width ``ci95``."""
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
    """An aggregate row (``aggregate``) whose 2 or more seeds all gave one value: a single sample, no interval."""
    return r["count"] >= 2 and r["distinct"] == 1
