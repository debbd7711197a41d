"""The fio-shaped pieces of results: per-direction job entries, latency per op type, wear."""

from __future__ import annotations

from typing import Any

import numpy as np

from devicemodels.base import OP_NAMES
from devicemodels.histogram import LatencyHistogram


def io_entry(h: LatencyHistogram, io_bytes: int | None, runtime_ns: int) -> dict[str, Any]:
    """fio's per-direction job entry: io_bytes, bw_bytes, iops, runtime, total_ios, lat_ns. Besides the
    unit-suffixed keys it has fio's own ``bw`` (KiB/s) and ``runtime`` (ms), as integers like fio's,
    which is what fio readers look for."""
    n = h.n
    secs = runtime_ns / 1e9 if runtime_ns > 0 else 0.0
    out: dict[str, Any] = {}
    if io_bytes is not None:
        out["io_bytes"] = int(io_bytes)
        out["io_kbytes"] = int(io_bytes) // 1024
        out["bw_bytes"] = int(io_bytes / secs) if secs else 0
        out["bw"] = int(io_bytes / 1024 / secs) if secs else 0
    out["iops"] = n / secs if secs else 0.0
    out["runtime_ns"] = int(runtime_ns)
    out["runtime"] = int(runtime_ns) // 1_000_000
    out["total_ios"] = n
    out["lat_ns"] = h.to_dict()
    return out


def latency_by_op(hist: np.ndarray, page_bytes: int, pages_by_op: dict[str, int]) -> dict[str, Any]:
    """``{"write": {"ios": n, "io_bytes": b, "lat_ns": {...fio lat_ns...}}, ...}`` for ops seen."""
    out: dict[str, Any] = {}
    for code, name in enumerate(OP_NAMES):
        h = LatencyHistogram(hist[code])
        if h.n == 0:
            continue
        entry: dict[str, Any] = {"ios": h.n}
        if name in pages_by_op:
            entry["io_bytes"] = int(pages_by_op[name]) * page_bytes
        entry["lat_ns"] = h.to_dict()
        out[name] = entry
    return out


def wear_summary(erase_per_unit: np.ndarray, blocks_per_unit: int, pe_cycles_rated: int) -> dict[str, Any]:
    """Erase counts per block (every block of a line/zone is erased together) and lifetime used."""
    e = np.asarray(erase_per_unit, dtype=np.int64)
    if e.size == 0:
        return {}
    vals, counts = np.unique(e, return_counts=True)
    if vals.size <= 32:
        dist = {str(int(v)): int(c) * blocks_per_unit for v, c in zip(vals, counts)}
    else:
        qs = (0, 1, 5, 25, 50, 75, 95, 99, 100)
        dist = {f"p{q}": float(np.percentile(e, q)) for q in qs}
    mean = float(e.mean())
    return {
        "blocks": int(e.size) * blocks_per_unit,
        "erase_count_min": int(e.min()),
        "erase_count_max": int(e.max()),
        "erase_count_mean": mean,
        "erase_count_stddev": float(e.std()),
        "erase_count_distribution": dist,
        "pe_cycles_rated": pe_cycles_rated,
        "lifetime_consumed": mean / pe_cycles_rated,
        "lifetime_consumed_worst_block": float(e.max()) / pe_cycles_rated,
    }
