"""What differs between the runs a report compares, read from each run's config.json.

A comparison is only as good as the reader's knowledge of what was changed: two WAF bars that differ by the
hint policy and, unnoticed, by the over-provisioning are not a result about hints. So ``kvbed report`` shows a
column for every setting that differs between the rows it compares, and none for the settings they share:
the trace, the recovery contract and the faults, the hint policy's parameters, the replay and layout
parameters, the device parameters, where the ops ran, and (multi-tier runs) the cost and request models.

Rows are compared as they stand beside each other: all rows together for single-tier runs; for multi-tier
runs the rows of the same tier (a cpu row and an ssd row differ in their device by design). A device
parameter is compared only between rows whose devices both have it (an FDP run's ``nruh`` against a ZNS
run is said by the device column already); any other setting a row lacks reads as "-".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.results import Run

MISSING = None
_SKIP_REPLAY = {"tier"}  # the row's tier, already a column where rows differ in it


def settings_of(run: Run, tier: str | None) -> tuple[dict[str, Any], set[str]]:
    """(setting -> value, the keys that are device parameters) of one row: a run, or one tier of a
    multi-tier run."""
    cfg = run.config
    multi = isinstance(cfg.get("tiers"), dict)
    tcfg = (cfg["tiers"].get(tier) or {}) if multi else cfg
    out: dict[str, Any] = {}
    trace = cfg.get("trace") or {}
    out["trace"] = trace.get("path")
    out["trace.fingerprint"] = trace.get("fingerprint")
    faults = tcfg.get("faults") or {}
    out["contract"] = faults.get("contract", "none")
    out["faults"] = faults.get("fault") or MISSING
    out["target"] = (tcfg.get("target") or {}).get("kind", "embedded")
    for k, v in (tcfg.get("hint_params") or {}).items():
        out[f"hint.{k}"] = v
    for k, v in (tcfg.get("replay") or {}).items():
        if k not in _SKIP_REPLAY or not multi:
            out[f"replay.{k}"] = v
    for k, v in (tcfg.get("layout") or {}).items():
        out[f"layout.{k}"] = v
    device: set[str] = set()
    for group, params in (tcfg.get("device_params") or {}).items():
        for k, v in (params or {}).items():
            out[f"{group}.{k}"] = v
            device.add(f"{group}.{k}")
    if multi:
        for section in ("cost", "requests"):
            for k, v in (cfg.get(section) or {}).items():
                out[f"{section}.{k}"] = v
    return out, device


def _same(values: list[Any]) -> bool:
    return len({json.dumps(v, sort_keys=True, default=str) for v in values}) <= 1


def differing(runs: list[Run]) -> list[dict[str, Any]]:
    """For every row of the comparison (each job of each run, in order), the settings that differ between
    comparable rows, keyed by their column name. Every row has the same keys."""
    rows = [(r, j.get("tier")) for r in runs for j in r.result["jobs"]]
    multi = any(isinstance(r.config.get("tiers"), dict) for r in runs)
    got = [settings_of(r, tier if multi else None) for r, tier in rows]
    groups: dict[Any, list[int]] = {}
    for i, (_, tier) in enumerate(rows):
        groups.setdefault(tier if multi else None, []).append(i)
    keys: list[str] = []
    for s, _ in got:
        keys += [k for k in s if k not in keys]
    differ = []
    for k in keys:
        for idx in groups.values():
            if len(idx) < 2 or (any(k in got[i][1] for i in idx) and not all(k in got[i][0] for i in idx)):
                continue  # nothing to compare with, or a device parameter only some of these devices have
            if not _same([got[i][0].get(k, MISSING) for i in idx]):
                differ.append(k)
                break
    if "trace.fingerprint" in differ and "trace" in differ:
        differ.remove("trace.fingerprint")  # other files: the path says it
    names = _column_names(differ)
    return [{names[k]: _value(k, s.get(k, MISSING), got) for k in differ} for s, _ in got]


def _column_names(keys: list[str]) -> dict[str, str]:
    """The last part of a key (``op_ratio``), or the whole key where two differing keys share it."""
    short = {k: k.rsplit(".", 1)[-1] if k != "trace.fingerprint" else "trace file" for k in keys}
    clash = {v for v in short.values() if list(short.values()).count(v) > 1}
    return {k: k if short[k] in clash else short[k] for k in keys}


def _value(key: str, v: Any, got: list[tuple[dict[str, Any], set[str]]]) -> Any:
    """The trace by its file name (its path where two traces share a name), the fingerprint's first digits;
    every other value as config.json has it (the table formats it)."""
    if v is MISSING:
        return MISSING
    if key == "trace":
        names = {Path(str(s.get("trace"))).name for s, _ in got}
        paths = {s.get("trace") for s, _ in got}
        return Path(str(v)).name if len(names) == len(paths) else v
    if key == "trace.fingerprint":
        return str(v).split(":")[-1][:12]
    return v
