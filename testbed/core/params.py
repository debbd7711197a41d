"""Frozen parameter dataclasses <-> ``k=v`` overrides, JSON configs and CLI options.

Every parameter set in kvbed is a frozen dataclass whose field names carry their
unit (``page_program_ns``, ``ru_bytes``). This module is the one place that turns
user text into those fields, so the CLI, saved configs and the QEMU command line
all derive from the dataclass instead of keeping copies of it.

Values accept unit suffixes that match the field's unit: ``ru_bytes=16MiB``,
``block_erase_ns=2ms``, ``op_ratio=7%``.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import Any, Iterable, Iterator, TypeVar

from testbed.core.errors import KvbedError

D = TypeVar("D")

_SIZE = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
# Block-device convention: a bare K/M/G on a *_bytes field means binary (as QEMU and fio read it).
_SIZE_BINARY_SHORT = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_TIME = {"": 1, "ns": 1, "us": 1000, "ms": 1000**2, "s": 1000**3}
_NUM_RE = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z%]*)\s*$")


def parse_value(field_name: str, typ: Any, text: str) -> Any:
    """Parse ``text`` for the field ``field_name`` of type ``typ`` (unit taken from the name)."""
    origin = typing.get_origin(typ)
    if origin is typing.Union or origin is getattr(__import__("types"), "UnionType", None):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if text.lower() in ("none", "null", ""):
            return None
        typ = args[0]
    if typ is bool:
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise KvbedError(f"{field_name}: expected a boolean, got {text!r}")
    if typ is str:
        return text
    if typ in (int, float):
        m = _NUM_RE.match(text)
        if not m:
            raise KvbedError(f"{field_name}: expected a number, got {text!r}")
        num, unit = float(m.group(1)), m.group(2).lower()
        if unit:
            if field_name.endswith("_bytes"):
                mult = _SIZE_BINARY_SHORT.get(unit, _SIZE.get(unit))
            elif field_name.endswith("_ns"):
                mult = _TIME.get(unit)
            elif unit == "%":
                mult = 0.01
            else:
                mult = None
            if mult is None:
                raise KvbedError(f"{field_name}: unit {m.group(2)!r} does not fit this field")
            num *= mult
        if typ is int:
            if num != int(num):
                raise KvbedError(f"{field_name}: expected a whole number, got {text!r}")
            return int(num)
        return float(num)
    raise KvbedError(f"{field_name}: cannot parse a value of type {typ!r}")


def field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def with_overrides(obj: D, pairs: Iterable[str] | dict[str, Any], *, what: str = "--param") -> D:
    """Return ``obj`` with ``k=v`` strings (or a dict of already-typed values) applied."""
    types = field_types(type(obj))
    changes: dict[str, Any] = {}
    items = pairs.items() if isinstance(pairs, dict) else (_split_pair(p, what) for p in pairs)
    for key, val in items:
        key = key.strip().replace("-", "_")
        if key not in types:
            raise KvbedError(
                f"{what}: unknown parameter {key!r} for {type(obj).__name__} "
                f"(known: {', '.join(types)})"
            )
        changes[key] = parse_value(key, types[key], val) if isinstance(val, str) else val
    return dataclasses.replace(obj, **changes) if changes else obj


def _split_pair(pair: str, what: str) -> tuple[str, str]:
    if "=" not in pair:
        raise KvbedError(f"{what}: expected key=value, got {pair!r}")
    k, v = pair.split("=", 1)
    return k, v


def split_overrides(pairs: Iterable[str], classes: dict[str, type], *, what: str = "--param") -> dict[str, list[str]]:
    """Route ``k=v`` pairs to whichever of several dataclasses has field ``k``.

    ``classes`` maps a group name to a dataclass; a key may also be qualified as
    ``group.key``. Unknown keys raise one error listing every known key.
    """
    out: dict[str, list[str]] = {g: [] for g in classes}
    for pair in pairs:
        k, v = _split_pair(pair, what)
        k = k.strip().replace("-", "_")
        if "." in k:
            g, k = k.split(".", 1)
            if g not in classes or k not in field_types(classes[g]):
                raise KvbedError(f"{what}: unknown parameter {g}.{k}")
            out[g].append(f"{k}={v}")
            continue
        owners = [g for g, c in classes.items() if k in field_types(c)]
        if not owners:
            known = sorted({f for c in classes.values() for f in field_types(c)})
            raise KvbedError(f"{what}: unknown parameter {k!r} (known: {', '.join(known)})")
        out[owners[0]].append(f"{k}={v}")
    return out


def name_value_pairs(text: str, what: str, expect: str) -> Iterator[tuple[str, str]]:
    """The stripped (name, value) pairs, in order, of a parameter that holds per-name settings as
    ``a=1, b=2`` (e.g. per-tenant TTLs); ``expect`` names the form in the error (``tenant=seconds``)."""
    for item in filter(None, (s.strip() for s in text.split(","))):
        if "=" not in item:
            raise KvbedError(f"{what}: expected {expect}, got {item!r}")
        name, value = (s.strip() for s in item.split("=", 1))
        yield name, value


def nonneg_number(what: str, name: str, text: str, noun: str = "a number") -> float:
    """The value of ``name=text`` in the parameter ``what``, a number >= 0."""
    try:
        x = float(text)
    except ValueError:
        raise KvbedError(f"{what}: {name}={text!r} is not {noun}") from None
    if x < 0:
        raise KvbedError(f"{what}: {name} must be >= 0")
    return x


def to_dict(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)


def from_dict(cls: type[D], data: dict[str, Any], *, where: str = "config") -> D:
    """Rebuild a dataclass from a saved config; unknown keys are an error, not ignored."""
    types = field_types(cls)
    unknown = set(data) - set(types)
    if unknown:
        raise KvbedError(f"{where}: unknown keys for {cls.__name__}: {', '.join(sorted(unknown))}")
    return cls(**data)
