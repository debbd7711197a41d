"""A replay's results, shaped like fio's JSON output: one job with per-direction entries, the echoed
config, the device's own stats, and one time-series row per trace-time window.

Every figure is a function of the trace, the config and the seed; wall-clock figures go only to the
separate ``runtime`` part (runtime.json).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from devicemodels import saturation as SAT
from devicemodels.histogram import NBUCKETS, LatencyHistogram
from devicemodels.summary import io_entry
from kvreplay.layout.actions import ACTION_NAMES
from kvreplay.replay import record as R
from kvbed.core.atomicio import json_default
from kvbed.core.errors import KvbedError
from kvbed.core.version import __version__

FIO_VERSION_KEY = "kvbed version"
WINDOW_PERCENTILES, WINDOW_TAGS = (50.0, 99.0, 99.9), ("p50", "p99", "p999")  # each time window's latency columns


def window_row(w: int, window_ns: int, page_bytes: int, c: dict[str, int], prev: dict[str, int], W: np.ndarray,
               acc: np.ndarray, total_acc: np.ndarray) -> dict[str, Any]:
    """The time-series row of window ``w``: bytes, WAF (this window and cumulative), GC, latency percentiles.
    ``c``/``prev``: the target's counters now and at the window's start; ``acc``: the window's op totals
    (record.ACC_*), ``total_acc`` the run's so far; ``W``: the window's latency histograms."""
    pb = page_bytes
    row: dict[str, Any] = {
        "window": w,
        "t_start_ns": w * window_ns,
        "t_end_ns": (w + 1) * window_ns,
        "user_bytes_written": int(acc[0]) * pb,
        "host_gc_bytes_written": int(acc[1]) * pb,
        "zone_resets": int(acc[2]),
        "read_ops": int(acc[3]),
        "write_ops": int(acc[4]),
    }
    d = {k: int(c[k]) - int(prev.get(k, 0)) for k in c}
    host = d.get("host_pages_written", int(acc[0]) + int(acc[1]))
    media = d.get("media_pages_written", host)
    row["host_bytes_written"] = host * pb
    row["media_bytes_written"] = media * pb
    row["waf"] = media / host if host else None
    host_cum = c.get("host_pages_written", 0)
    media_cum = c.get("media_pages_written", host_cum)
    row["waf_cumulative"] = media_cum / host_cum if host_cum else None
    user_cum = int(total_acc[0])
    row["end_to_end_waf_cumulative"] = (media_cum if "media_pages_written" in c else user_cum + int(total_acc[1])) \
        / user_cum if user_cum else None
    for k in ("gc_runs", "gc_pages_moved", "gc_fg_stall_ns", "block_erases"):
        if k in d:
            row[k] = d[k]
    for r, name in enumerate(R.W_NAMES):
        h = LatencyHistogram(W[r])
        vals = h.values_at(WINDOW_PERCENTILES) if h.n else [None] * len(WINDOW_PERCENTILES)
        for tag, v in zip(WINDOW_TAGS, vals):
            row[f"{name}_lat_{tag}_ns"] = v
    return row


def job_entry(rp: Any, rows_done: int) -> dict[str, Any]:
    """The fio job of a finished (or stopped) replay ``rp`` (a :class:`~kvreplay.replay.engine.Replay`)."""
    cfg, pb = rp.cfg, rp.page_bytes
    dev_stats = rp.dev_stats
    c = rp.target.counters()
    mk = rp.last_mark
    lay = mk.layout  # the layout as of the last event replayed (the producer may have run ahead)
    user_pages = lay["pages_written"]
    if rp.failure is not None:  # the target stopped inside an event: count the writes that completed
        user_pages = int(rp.total_acc[0])
    host_pages = c.get("host_pages_written", user_pages + lay.get("gc_relocated_pages", 0))
    media_pages = c.get("media_pages_written", host_pages)
    runtime_ns = max(0, rp.t_last_done - (rp.t_first_arr or 0))
    hist = rp.hists()
    job: dict[str, Any] = {
        "jobname": f"{cfg.device}-{cfg.hints}",
        "device": cfg.device,
        "hints": cfg.hints,
        "tier": cfg.replay.tier,
        "classes": rp.n_classes,
        "runtime_ns": runtime_ns,
    }
    io_bytes = {"read": lay["pages_read"] * pb, "write": user_pages * pb, "trim": int(rp.total_acc[5]) * pb}
    for name in ("read", "write", "trim", "zone_reset"):
        h = hist[name]
        if h.n or name in ("read", "write"):
            job[name] = io_entry(h, io_bytes.get(name), runtime_ns)
    job["object_read"] = io_entry(hist["object_read"], lay["pages_read"] * pb, runtime_ns)
    job["object_write"] = io_entry(hist["object_write"], user_pages * pb, runtime_ns)
    if hist["gc_read"].n or hist["gc_write"].n:
        job["host_gc_read"] = io_entry(hist["gc_read"], None, runtime_ns)
        job["host_gc_write"] = io_entry(hist["gc_write"], lay["gc_relocated_pages"] * pb, runtime_ns)
    job["waf"] = media_pages / host_pages if host_pages else None
    job["host_waf"] = host_pages / user_pages if user_pages else None
    job["end_to_end_waf"] = media_pages / user_pages if user_pages else None
    job["user_bytes_written"] = user_pages * pb
    job["host_bytes_written"] = host_pages * pb
    job["media_bytes_written"] = media_pages * pb
    gc = dev_stats.get("gc", {})
    job["gc"] = {k: gc[k] for k in ("runs", "fg_runs", "bg_runs", "pages_moved", "bytes_moved", "fg_stall_ns")
                 if k in gc}
    job["gc_count"] = gc.get("runs", 0)
    job["gc_stall_ns"] = gc.get("fg_stall_ns", 0)  # a SUM over stalls (kept for old readers): gc_stall.total_ns
    job["gc_stall"] = gc_stall(gc, c, int(rp.total_acc[4]) + hist["gc_write"].n)
    job["erases"] = c.get("block_erases", 0)
    job["zone_resets"] = lay.get("zone_resets", 0)
    job["host_gc"] = {
        "runs": lay.get("gc_runs", 0),
        "relocated_bytes": lay.get("gc_relocated_pages", 0) * pb,
        "zone_resets": lay.get("zone_resets", 0),
    }
    if "wear" in dev_stats:
        job["wear"] = dev_stats["wear"]
    if "fdp" in dev_stats:
        job["per_ruh"] = dev_stats["fdp"].get("per_ruh", [])
    job.update(rp.layout.job_fields(lay, pb))
    job["per_class"] = [
        {"class": k, "pid": int(rp.pid_of_class[k]), "writes": int(mk.class_writes[k]),
         "bytes_written": int(mk.class_bytes[k])}
        for k in range(rp.n_classes)
    ]
    job["layout"] = {**{k: v for k, v in lay.items() if k != "per_stream"}, "evict_policy": rp.evict_policy,
                     "evict_policy_recorded": rp.evict_policy_source}
    with rp.policy.calling("describe"):
        facts = rp.policy.describe()
    try:
        json.dumps(facts, default=json_default)  # as result.json is written
    except (TypeError, ValueError) as exc:
        raise KvbedError(f"hint policy {cfg.hints!r}: describe() is not JSON for result.json ({exc})") from None
    job["hint_policy"] = {"name": cfg.hints, "knows": rp.policy.knows, "offline": rp.policy.needs_future,
                          **({"source": cfg.hint_source} if cfg.hint_source else {}), **facts}
    job["saturation"] = SAT.summary(rp.sat, cfg.replay.saturation_wait_ns, cfg.replay.saturation_backlog_ratio,
                                    cfg.replay.as_fast_as_possible)
    job["events"] = {
        "trace_rows": rp.scan.rows,
        "rows_replayed": int(rows_done),
        "tier_events_by_action": {ACTION_NAMES[i]: int(v) for i, v in enumerate(mk.action_counts) if i},
    }
    return job


def gc_stall(gc: dict[str, Any], counters: dict[str, int], write_ops: int) -> dict[str, Any]:
    """The job's foreground-GC stall figures, each named for what it is (``fg_*`` of the device's stats,
    :func:`devicemodels.ftl_device.stall_stats`): ``total_ns`` is a sum over every stall, not a span of time;
    ``stalled_write_cmds_ratio`` is of ``write_cmds``, the write commands the device served (a CXL-SSD's:
    its flash's write-backs); ``stalled_write_wait_ns`` is the wait of each stalled command (its longest
    stall), so its percentiles are among the commands that waited only (None when none did). A device
    without GC (zns, dram, cxl) reports 0 stalls of its write commands."""
    writes = gc.get("write_cmds", counters.get("ops_write", write_ops))
    stalled = gc.get("fg_stalled_write_cmds", 0)
    per = gc.get("fg_stall_per_write_cmd_ns") or {}
    pct = per.get("percentile") or {}
    return {
        "total_ns": gc.get("fg_stall_ns", 0),
        "stalls": (gc.get("fg_stall_lat_ns") or {}).get("N", 0),
        "write_cmds": writes,
        "stalled_write_cmds": stalled,
        "stalled_write_cmds_ratio": stalled / writes if writes else 0.0,
        "stalled_write_wait_ns": {"p50": pct.get("50.000000"), "p99": pct.get("99.000000"), "max": per.get("max"),
                                  "mean": per.get("mean")} if stalled else None,
    }


def build_result(rp: Any, job: dict[str, Any], rows_done: int, incomplete: bool) -> dict[str, Any]:
    """result.json: fio's top level (version, echoed options, jobs) plus the trace, scan and sizing records."""
    cfg = rp.cfg
    result = {
        FIO_VERSION_KEY: f"kvbed-{__version__}",
        "incomplete": bool(incomplete),
        "global options": cfg.to_dict(),
        "trace": {"path": cfg.trace, "format_version": rp.reader.meta.format_version,
                  "source": rp.reader.meta.source, "geometry": rp.reader.meta.geometry},
        "scan": rp.scan.to_dict(),
        "sizing": cfg.sizing,
        "window_ns": rp.window_ns,
        "precondition": rp.precondition_result,
        "jobs": [job],
        "device": rp.dev_stats,
    }
    if incomplete:
        result["stopped_at_row"] = int(rows_done)
    if rp.failure is not None:
        result["error"] = rp.failure
    return result


def add_outcomes(rows: list[dict[str, Any]], per_window: np.ndarray) -> None:
    """Per-window load outcomes of a run with faults or a contract (``loads_reused``, ``loads_detected``,
    ``loads_missing``, ``loads_wrong``): the time series around each fault."""
    from kvreplay.faults.model import OUTCOMES

    for row in rows:
        w = row["window"]
        for k, name in enumerate(OUTCOMES):
            row[f"loads_{name}"] = int(per_window[w, k]) if w < len(per_window) else 0


def fault_summary(f: dict[str, Any]) -> dict[str, Any]:
    """The job's one-line view of result.json's ``faults``: loads after the first fault by outcome, those of
    them through a stale index entry and those served wrong, what they recompute, and the contract's extra
    device bytes (the study metrics read it)."""
    inj = f["injected"]
    out: dict[str, Any] = {"contract": f["contract"]["name"]}
    for k in ("reused", "detected", "missing", "wrong"):
        out[f"loads_{k}"] = sum(i["outcomes"][k]["objects"] for i in inj)
    out["stale_entry_loads"] = sum(i["stale_entry_loads"] for i in inj)
    out["stale_wrong_loads"] = sum(i["stale_wrong_loads"] for i in inj)
    out["recompute_tokens"] = sum(i["recompute_tokens"] for i in inj)
    out["contract_extra_bytes_written"] = f["contract"]["extra_bytes_written"]
    out["contract_extra_bytes_read"] = f["contract"]["extra_bytes_read"]
    return out


def latency_rows(hists: dict[str, LatencyHistogram]) -> list[tuple[str, int, int]]:
    """(series, bucket, count) of every non-empty bucket: latency.parquet."""
    rows = []
    for name, h in hists.items():
        for i in np.flatnonzero(h.h[:NBUCKETS]):
            rows.append((name, int(i), int(h.h[i])))
    return rows
