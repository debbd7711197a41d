"""The default directory name of a replay run: what the run is, readable in ``ls results/``.

``<trace>-<device>-<hints>[-<fault>...][-contract-<name>]-s<seed>`` for one device (``-vm`` after the
device on a VM), ``<trace>-<tier>.<device>[.<hints>]-...-s<seed>`` for a multi-tier run (a tier's hints
only when it has some). Fault specs keep their kind and time (``power-loss@2s`` -> ``power-loss-2s``);
their other keys are in config.json. Every character outside ``[A-Za-z0-9._+-]`` becomes ``-``, so a name
is one path component on any file system and needs no quoting in a shell.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def safe(text: str) -> str:
    return _UNSAFE.sub("-", text).strip("-")


def _stem(trace: str) -> str:
    return Path(trace).name.split(".")[0]


def _fault_parts(cfg: Any) -> list[str]:
    """``power-loss-2s`` per injected fault (kind and time), then ``contract-NAME`` unless none."""
    f = getattr(cfg, "faults", None)
    if f is None:
        return []
    parts = [t.split(",", 1)[0].strip().replace("@", "-") for t in f.fault.split(";") if t.strip()]
    if f.contract != "none":
        parts.append(f"contract-{f.contract}")
    return parts


def _hints_part(hints: str) -> str:
    """A policy's name, or a plugin's file stem (module) and class: ``/home/me/my_hints.py:Size`` -> ``my_hints.Size``."""
    target, colon, attr = hints.rpartition(":")
    if not colon:
        return hints
    return f"{Path(target).stem if target.endswith('.py') else target.rpartition('/')[2]}.{attr}"


def run_name(cfg: Any, *, on_vm: bool = False) -> str:
    """The default name of the run of ``cfg`` (a RunConfig, or a MultiTierConfig: it has ``tiers``)."""
    tiers = getattr(cfg, "tiers", None)
    if tiers:
        first = next(iter(tiers.values()))
        body = [f"{t}.{c.device}" + (f".{_hints_part(c.hints)}" if c.hints != "none" else "") for t, c in tiers.items()]
        seed = first.replay.seed
    else:
        body = [cfg.device + ("-vm" if on_vm else ""), _hints_part(cfg.hints), *_fault_parts(cfg)]
        seed = cfg.replay.seed
    return safe("-".join([_stem(cfg.trace), *body, f"s{seed}"]))


def default_run_dir(cfg: Any, *, on_vm: bool = False) -> Path:
    return Path("results") / run_name(cfg, on_vm=on_vm)
