"""The parameters a finished run used, beside their defaults, for ``kvbed params RUN_DIR``.

A replay sizes part of the device itself (``kvreplay.replay.sizing.AUTO_SIZED``: 1 MiB pages, full-stripe
reclaim units, capacity from the trace's peak live data, dies for its write rate), so the defaults
``kvbed params`` lists are not what a run got; the run's config.json holds what it got and which device
fields the user set (``explicit``). Each row here says where its value came from: ``default``, ``given``
(by --param, an option or a preset) or ``auto-sized`` (and how).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from kvbed.core.errors import KvbedError
from kvbed.core.params import format_value


def is_run_dir(path: str | Path) -> bool:
    return Path(path).is_dir() and (Path(path) / "config.json").is_file()


def load_config(run_dir: str | Path) -> dict[str, Any]:
    where = str(Path(run_dir) / "config.json")
    try:
        cfg = json.loads(Path(where).read_text())
    except ValueError as exc:
        raise KvbedError(f"not valid JSON ({exc})", where=where) from None
    if not isinstance(cfg, dict) or not ("device" in cfg or "tiers" in cfg):
        raise KvbedError("not a replay's config.json (no device and no tiers)", where=where)
    return cfg


def run_groups(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per parameter group of the run: ``{"title", "rows"}``; a row holds key, used, default and
    source (``default`` / ``given`` / ``auto-sized``) and, for an auto-sized value, how it was sized."""
    if "tiers" in cfg:
        from kvreplay.costmodel import CostParams
        from kvreplay.replay.ttft import RequestParams

        out = []
        for tier, tcfg in cfg["tiers"].items():
            for g in run_groups(tcfg):
                out.append({**g, "title": f"tier {tier}: {g['title']}"})
        out.append(_group("cost", CostParams, cfg.get("cost") or {}, set(), {}))
        out.append(_group("requests", RequestParams, cfg.get("requests") or {}, set(), {}))
        return out
    from devicemodels import DEVICES
    from kvreplay.faults import FaultParams
    from kvreplay.hints import HINTS
    from kvreplay.layout.params import LayoutParams
    from kvreplay.replay.params import ReplayParams
    from kvreplay.replay.sizing import AUTO_SIZED, sized_by_replay

    device, hints = cfg["device"], cfg["hints"]
    explicit = set(cfg.get("explicit") or [])
    groups = [_group("replay", ReplayParams, cfg.get("replay") or {}, set(), {}),
              _group("layout", LayoutParams, cfg.get("layout") or {}, set(), {}),
              _group(f"hints {hints}", HINTS.get(hints).Params, cfg.get("hint_params") or {}, set(), {}),
              _group("faults", FaultParams, cfg.get("faults") or {}, set(), {})]
    classes = DEVICES.get(device).param_classes
    sized = set() if (cfg.get("target") or {}).get("vm") else sized_by_replay(cfg.get("sizing"), explicit, classes)
    for g, cls in classes.items():  # a VM's geometry is its own: nothing is sized on a named VM
        given = {k.rpartition(".")[2] for k in explicit if k.partition(".")[0] in (g, k)}
        auto = {f: how for f, how in AUTO_SIZED.get(g, {}).items() if f"{g}.{f}" in sized}
        groups.append(_group(f"device {device}: {g}", cls, (cfg.get("device_params") or {}).get(g, {}), given, auto))
    return [g for g in groups if g["rows"]]


def _group(title: str, cls: type, used: dict[str, Any], given: set[str], auto: dict[str, str]) -> dict[str, Any]:
    rows = []
    for f in dataclasses.fields(cls):
        unit = f.metadata.get("unit")
        value = used.get(f.name, f.default)
        if f.name in auto and f.name not in given:
            source, how = "auto-sized", auto[f.name]
        elif f.name in given or value != f.default:
            source, how = "given", ""
        else:
            source, how = "default", ""
        rows.append({"key": f.name, "used": format_value(f.name, value, unit),
                     "default": format_value(f.name, f.default, unit), "source": source, "how": how})
    return {"title": title, "rows": rows}
