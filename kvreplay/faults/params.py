"""The run's fault settings (a parameter set like every other: ``--param fault=... contract=...``, the
``--fault``/``--contract`` options and study axes all arrive here) and the parsing of fault specs."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreplay.faults.base import Fault
from kvreplay.faults.registry import CONTRACTS, FAULTS
from kvbed.core.errors import KvbedError
from kvbed.core.params import check_fields, param, with_overrides


@dataclass(frozen=True)
class FaultParams:
    fault: str = param("", "faults to inject, KIND@TIME[,key=value...], several separated by ';' (each kind "
                           "and its keys: the fault.KIND parameter sets, `kvbed replay --help`; see "
                           "docs/guides/faults.md)")
    contract: str = param("none", "recovery contract every load is checked with (header bytes go to the device)",
                          choices=lambda: CONTRACTS.names())

    def validate(self) -> "FaultParams":
        check_fields(self)
        self.parsed()
        return self

    @property
    def active(self) -> bool:
        return bool(self.fault.strip()) or self.contract != "none"

    def parsed(self) -> list[Fault]:
        return [parse_fault(t.strip()) for t in self.fault.split(";") if t.strip()]


def parse_fault(text: str) -> Fault:
    """``KIND@TIME[,key=value...]`` -> a validated fault (one-line errors naming the spec and the field)."""
    head, _, rest = text.partition(",")
    kind, at, when = head.partition("@")
    if not at:
        raise KvbedError(f"--fault {text!r}: expected KIND@TIME[,key=value...] (e.g. power-loss@2s,index=stale)")
    try:
        cls = FAULTS.get(kind.strip())
    except KvbedError as exc:
        raise KvbedError(f"--fault {text!r}: {exc}") from None
    pairs: dict[str, Any] = {"at_ns": when.strip()}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        k, eq, v = item.partition("=")
        if not eq:
            raise KvbedError(f"--fault {text!r}: expected key=value, got {item!r}")
        if k.strip().replace("-", "_") == "at_ns":
            raise KvbedError(f"--fault {text!r}: the time is the @TIME part, not a key")
        pairs[k.strip()] = v.strip()
    try:
        params = with_overrides(cls.Params(), pairs, what=f"--fault {text!r}", label=f"fault {cls.name}")
    except KvbedError as exc:
        msg = str(exc)
        raise KvbedError(msg if msg.startswith("--fault") else f"--fault {text!r}: {msg}") from None
    fault = cls(params, text)
    fault.validate()
    return fault


def faults_from_file(path: Path) -> list[str]:
    """The ``[[fault]]`` tables of a TOML file as fault texts: ``kind`` and ``at`` plus the kind's keys."""
    try:
        doc = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise KvbedError("no such file", where=str(path)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise KvbedError(f"not valid TOML ({exc})", where=str(path)) from None
    extra = set(doc) - {"fault"}
    if extra:
        raise KvbedError(f"unknown section {sorted(extra)[0]!r} (a fault file holds [[fault]] tables)", where=str(path))
    tables = doc.get("fault", [])
    if not isinstance(tables, list) or not tables:
        raise KvbedError("expected one or more [[fault]] tables", where=str(path))
    out = []
    for i, t in enumerate(tables):
        if not isinstance(t, dict) or "kind" not in t or "at" not in t:
            raise KvbedError(f"fault[{i}]: needs kind = \"...\" and at = \"2s\"", where=str(path))
        keys = ",".join(f"{k}={_text(v)}" for k, v in t.items() if k not in ("kind", "at"))
        text = f"{t['kind']}@{_text(t['at'])}" + (f",{keys}" if keys else "")
        try:
            parse_fault(text)
        except KvbedError as exc:
            raise KvbedError(f"fault[{i}]: {exc}", where=str(path)) from None
        out.append(text)
    return out


def _text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)
