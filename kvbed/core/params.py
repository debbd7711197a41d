"""Parameter sets: frozen dataclasses whose fields are declared with :func:`param`, and the one path from
user text (``k=v``, CLI options, saved configs, study axes) to those fields.

Every parameter set in kvbed is a frozen dataclass whose field names carry their unit (``page_program_ns``,
``ru_bytes``), declared with ``param(default, help=..., choices=..., unit=..., cli=...)``. This module is
the one place that turns user text into those fields and checks choices, so the CLI, ``--param`` help,
saved configs, the README's parameter tables and the QEMU command line all derive from the dataclass
instead of keeping copies of it.

Values accept unit suffixes that match the field's unit: ``ru_bytes=16MiB``, ``block_erase_ns=2ms``,
``ttl_s=10min``, ``op_ratio=7%``. :func:`format_size` is the parser's inverse for byte counts.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from kvbed.core.errors import KvbedError

D = TypeVar("D")

_SIZE = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
# Block-device convention: a bare K/M/G on a *_bytes field means binary (as QEMU and fio read it).
_SIZE_BINARY_SHORT = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_TIME = {"": 1, "ns": 1, "us": 1000, "ms": 1000**2, "s": 1000**3, "min": 60 * 1000**3, "h": 3600 * 1000**3}
_NUM_RE = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z%]*)\s*$")
_BINARY_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))

#: the units a field can be in; ``unit_of`` infers one from the field name's suffix
UNITS = ("bytes", "ns", "s", "ratio")


def param(default: Any, help: str, *, choices: Sequence[str] | Callable[[], Sequence[str]] | None = None,
          unit: str | None = None, cli: bool = False, quiet_default: bool = False,
          presets: Callable[[], dict[str, dict[str, Any]]] | None = None) -> Any:
    """A field of a parameter dataclass. ``help`` is the one-line description (CLI help, ``kvbed params``,
    the README tables); ``choices`` the allowed values of a text field (a tuple, or a function returning the
    names of a registry, looked up when checked); ``unit`` overrides the unit the name implies; ``cli``
    marks a field that gets its own ``--option`` besides ``--param``. ``quiet_default``: saved configs
    (:func:`to_dict`) leave the field out while it holds its default, so a field added to an existing
    set does not change the configs (and golden digests) of runs that do not use it; :func:`from_dict`
    fills it back in. ``presets``: the field names a group of other fields' values (a function returning
    ``{preset name: {field: value}}``, looked up when used): :func:`split_overrides` puts the chosen group
    before the explicit ``k=v`` pairs, so explicit values win; its choices are the preset names."""
    if presets is not None:
        choices = lambda: list(presets())  # noqa: E731
    if unit is not None and unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    md: dict[str, Any] = {"help": help, "cli": cli, "quiet_default": quiet_default}
    if choices is not None:
        md["choices"] = choices
    if unit is not None:
        md["unit"] = unit
    if presets is not None:
        md["presets"] = presets
    return dataclasses.field(default=default, metadata=md)


def unit_of(field_name: str, declared: str | None = None) -> str | None:
    """The unit of a field: declared, or implied by its name (``*_bytes``, ``*_ns``, ``*_s``; rates such as
    ``*_bytes_per_s`` or ``*_tokens_per_s`` have none)."""
    if declared:
        return declared
    if "_per_" in field_name:
        return None
    for suffix, unit in (("_bytes", "bytes"), ("_ns", "ns"), ("_s", "s"), ("_ratio", "ratio")):
        if field_name.endswith(suffix):
            return unit
    return None


def choices_of(fld: dataclasses.Field) -> tuple[str, ...] | None:
    c = fld.metadata.get("choices")
    if c is None:
        return None
    return tuple(c() if callable(c) else c)


def check_choice(name: str, value: Any, choices: Sequence[str] | None) -> None:
    if choices is not None and value not in choices:
        raise KvbedError(f"{name}: expected one of {', '.join(choices)}, got {value!r}")


def check_fields(obj: Any, label: str | None = None) -> Any:
    """Check every field with choices of a parameter dataclass instance; returns ``obj``. ``label`` names
    the owner in the error (``fault power-loss``), so a value is never reported without its set."""
    for fld in dataclasses.fields(obj):
        check_choice(f"{label}: {fld.name}" if label else fld.name, getattr(obj, fld.name), choices_of(fld))
    return obj


def label_of(cls: type) -> str:
    """What a parameter set is called in an error when its caller does not say: its ``LABEL`` class
    attribute if it has one, else its qualified name (``PowerLoss.Params``, not ``Params``)."""
    return getattr(cls, "LABEL", None) or cls.__qualname__


def near_matches(key: str, known: Iterable[str]) -> list[str]:
    """The known keys a mistyped ``key`` is closest to (difflib), best first; at most three."""
    known = list(known)
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    return close or [k for k in known if key and (key in k or k in key)][:3]


def unknown_key_text(what: str, key: str, owner: str, keys: Iterable[str]) -> str:
    """``--param: unknown parameter 'idx' of fault power-loss (did you mean index?); its keys: ...``."""
    keys = list(keys)
    near = near_matches(key, keys)
    return f"{what}: unknown parameter {key!r} of {owner}{did_you_mean(near)}; its keys: {', '.join(keys)}"


def did_you_mean(near: Sequence[str]) -> str:
    """`` (did you mean a, b or c?)``, or "" when nothing is near."""
    if not near:
        return ""
    return f" (did you mean {', '.join(near[:-1]) + ' or ' if len(near) > 1 else ''}{near[-1]}?)"


def format_size(n: int) -> str:
    """A byte count as the parser reads it back exactly: the largest binary unit that divides it
    (``16MiB``, ``1536KiB``), else plain bytes."""
    n = int(n)
    for unit, k in _BINARY_UNITS:
        if n and n % k == 0:
            return f"{n // k}{unit}"
    return str(n)


def format_ns(n: int) -> str:
    """Nanoseconds as the parser reads them back exactly (``2ms``, ``40us``, ``250``)."""
    n = int(n)
    for unit, k in (("s", 1000**3), ("ms", 1000**2), ("us", 1000)):
        if n and n % k == 0:
            return f"{n // k}{unit}"
    return str(n)


def format_value(field_name: str, value: Any, unit: str | None = None) -> str:
    """A value as a user would type it (``--param`` syntax)."""
    u = unit_of(field_name, unit)
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, int) and u == "bytes":
        return format_size(value)
    if isinstance(value, int) and u == "ns":
        return format_ns(value)
    return str(value)


def parse_value(field_name: str, typ: Any, text: str, unit: str | None = None) -> Any:
    """Parse ``text`` for the field ``field_name`` of type ``typ`` (unit declared, or taken from the name)."""
    origin = typing.get_origin(typ)
    if origin is typing.Union or origin is types.UnionType:
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
        num, suffix = float(m.group(1)), m.group(2).lower()
        if suffix:
            u = unit_of(field_name, unit)
            if u == "bytes":
                mult = _SIZE_BINARY_SHORT.get(suffix, _SIZE.get(suffix))
            elif u == "ns":
                mult = _TIME.get(suffix)
            elif u == "s":
                mult = _TIME[suffix] / 1e9 if suffix in _TIME and suffix else None
            elif suffix == "%":
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


def coerce_value(field_name: str, typ: Any, value: Any) -> Any:
    """A typed value (from TOML, JSON or code) checked against the field's type: a bool only for a bool
    field, a whole number for an int field, any number for a float field (as float), text for a text
    field; None only where the field allows it."""
    origin = typing.get_origin(typ)
    if origin is typing.Union or origin is types.UnionType:
        if value is None:
            return None
        typ = [a for a in typing.get_args(typ) if a is not type(None)][0]
    if typ is bool and isinstance(value, bool):
        return value
    if typ is int and isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
        return int(value)
    if typ is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if typ is str and isinstance(value, str):
        return value
    want = {bool: "true or false", int: "a whole number", float: "a number", str: "text"}.get(typ, str(typ))
    raise KvbedError(f"{field_name}: expected {want}, got {value!r}")


def field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def describe(cls: type) -> list[dict[str, Any]]:
    """One row per field of a parameter dataclass: name, type, default (as typed), unit, choices, help, cli.
    ``kvbed params``, ``--param`` help and the README's parameter tables are made from it."""
    hints = field_types(cls)
    rows = []
    for f in dataclasses.fields(cls):
        typ = hints[f.name]
        rows.append({
            "name": f.name,
            "type": getattr(typ, "__name__", str(typ)),
            "default": format_value(f.name, f.default, f.metadata.get("unit")),
            "unit": unit_of(f.name, f.metadata.get("unit")),
            "choices": choices_of(f),
            "help": f.metadata.get("help", ""),
            "cli": bool(f.metadata.get("cli")),
        })
    return rows


def with_overrides(obj: D, pairs: Iterable[str] | dict[str, Any], *, what: str = "--param",
                   label: str | None = None) -> D:
    """Return ``obj`` with ``k=v`` strings (or a dict of values, text or typed) applied; every value is
    parsed with its field's unit and checked against its field's choices. ``label`` names the set in an
    unknown-key error (``fault power-loss``, ``device fdp``; default :func:`label_of`)."""
    hints = field_types(type(obj))
    fields = {f.name: f for f in dataclasses.fields(obj)}
    changes: dict[str, Any] = {}
    items = pairs.items() if isinstance(pairs, dict) else (_split_pair(p, what) for p in pairs)
    for key, val in items:
        key = key.strip().replace("-", "_")
        if key not in hints:
            raise KvbedError(unknown_key_text(what, key, label or label_of(type(obj)), hints))
        fld = fields[key]
        if isinstance(val, str) and hints[key] is not str:
            val = parse_value(key, hints[key], val, fld.metadata.get("unit"))
        else:
            val = coerce_value(key, hints[key], val)
        check_choice(key, val, choices_of(fld))
        changes[key] = val
    return dataclasses.replace(obj, **changes) if changes else obj


def _split_pair(pair: str, what: str) -> tuple[str, str]:
    if "=" not in pair:
        raise KvbedError(f"{what}: expected key=value, got {pair!r}")
    k, v = pair.split("=", 1)
    return k, v


def with_options(pairs: Iterable[str], options: dict[str, Any] | None, *, what: str = "--param") -> list[str]:
    """``--param`` pairs plus the CLI options that are parameters (``{field: value}``, None = not given), as
    one list of ``k=v`` pairs for :func:`split_overrides` / :func:`with_overrides`: every option takes the
    same path as ``--param``. A key given both ways is ambiguous and refused."""
    pairs = list(pairs)
    given = {_split_pair(p, what)[0].strip().replace("-", "_").rpartition(".")[2] for p in pairs}
    out = list(pairs)
    for key, val in (options or {}).items():
        if val is None:
            continue
        if key in given:
            raise KvbedError(f"{key} is given twice, as --{key.replace('_', '-')} and in {what}; give it once")
        out.append(f"{key}={val}")
    return out


#: other spellings of a parameter group's name -> the name ``--param group.key`` routes by. The one table both
#: ``--param`` and ``kvbed params`` read: the hint policy's group is ``hint`` to ``--param`` and its sets are
#: titled ``hints.NAME`` by ``kvbed params`` and the docs, so either spelling names it in either place.
GROUP_ALIASES: dict[str, str] = {"hints": "hint"}


def group_of(name: str) -> str:
    """A parameter group's name as ``--param`` routes it (an alias of :data:`GROUP_ALIASES` resolved)."""
    return GROUP_ALIASES.get(name, name)


def split_overrides(pairs: Iterable[str], classes: dict[str, type], *, what: str = "--param",
                    labels: dict[str, str] | None = None, apart: Iterable[str] = ()) -> dict[str, list[str]]:
    """Route ``k=v`` pairs to whichever of several dataclasses has field ``k``.

    ``classes`` maps a group name to a dataclass; a key may also be qualified as
    ``group.key`` (a group also by an alias, :data:`GROUP_ALIASES`). An unknown key raises one error naming the
    sets it was looked for in (``labels``: group -> what the set is called, e.g. ``{"hint": "hints oracle",
    "flash": "device fdp"}``; default the group names) with the keys of each and the nearest matches.

    A key several groups have goes to the first of them (kvbed's own sets share ``seed`` by design), unless one
    of them is in ``apart`` (the hint policy's, whose keys a plugin's author picks): then the unqualified key is
    refused, naming the sets and the qualified keys to give, since either choice would silently leave the other
    set at its default.
    """
    out: dict[str, list[str]] = {g: [] for g in classes}
    apart = set(apart)
    pairs = expand_presets(list(pairs), classes, what=what)
    for pair in pairs:
        k, v = _split_pair(pair, what)
        k = k.strip().replace("-", "_")
        if "." in k:
            given, k = k.split(".", 1)
            g = group_of(given)
            if g not in classes:
                also = [f"{a} = {b}" for a, b in GROUP_ALIASES.items() if b in classes]
                raise KvbedError(f"{what}: unknown parameter group {given!r} in {given}.{k} (groups: "
                                 f"{', '.join(classes)}{'; ' + ', '.join(also) if also else ''})")
            if k not in field_types(classes[g]):
                raise KvbedError(unknown_key_text(what, k, (labels or {}).get(g, g), field_types(classes[g])))
            out[g].append(f"{k}={v}")
            continue
        owners = [g for g, c in classes.items() if k in field_types(c)]
        if not owners:
            raise KvbedError(unknown_in_groups(what, k, classes, labels))
        if len(owners) > 1 and apart & set(owners):
            sets = " and ".join(f"{(labels or {}).get(g, g)} ({g}.{k})" for g in owners)
            raise KvbedError(f"{what}: {k!r} is a key of more than one parameter set: {sets}; say which, as "
                             f"{' or '.join(f'{g}.{k}={v}' for g in owners)}")
        out[owners[0]].append(f"{k}={v}")
    return out


def unknown_in_groups(what: str, key: str, classes: dict[str, type], labels: dict[str, str] | None = None) -> str:
    """The one-line error for ``key`` found in none of ``classes``: the sets by name (groups with the same
    label merged), each with its keys, and the nearest matches over all of them."""
    by_owner: dict[str, list[str]] = {}
    for g, c in classes.items():
        keys = by_owner.setdefault((labels or {}).get(g, g), [])
        keys += [f for f in field_types(c) if f not in keys]
    hint = did_you_mean(near_matches(key, sorted({f for ks in by_owner.values() for f in ks})))
    listing = "; ".join(f"{o}: {', '.join(ks)}" for o, ks in by_owner.items() if ks)
    return f"{what}: unknown parameter {key!r} for {', '.join(o for o, ks in by_owner.items() if ks)}{hint}; keys of {listing}"


def expand_presets(pairs: list[str], classes: dict[str, type], *, what: str = "--param") -> list[str]:
    """``pairs`` with the group of ``k=v`` of every preset field they set (a field declared with
    ``param(presets=...)``) put first, in order: a value given explicitly comes later and wins."""
    first: list[str] = []
    for pair in pairs:
        k, v = _split_pair(pair, what)
        k = k.strip().replace("-", "_").rpartition(".")[2]
        for c in classes.values():
            fld = {f.name: f for f in dataclasses.fields(c)}.get(k)
            if fld is None or "presets" not in fld.metadata:
                continue
            table = fld.metadata["presets"]()
            check_choice(k, v.strip(), tuple(table))
            known = {f for cc in classes.values() for f in field_types(cc)}
            # a preset may span groups this caller does not have (FDP fields for a conv device)
            first += [f"{kk}={format_value(kk, vv)}" for kk, vv in table[v.strip()].items() if kk in known]
    return first + pairs


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
    """A parameter set as a saved config: every field, except ``quiet_default`` ones at their default."""
    d = dataclasses.asdict(obj)
    for f in dataclasses.fields(obj):
        if f.metadata.get("quiet_default") and d.get(f.name) == f.default:
            d.pop(f.name)
    return d


def from_dict(cls: type[D], data: dict[str, Any], *, where: str = "config") -> D:
    """Rebuild a dataclass from a saved config; unknown keys are an error, not ignored."""
    known = field_types(cls)
    unknown = set(data) - set(known)
    if unknown:
        raise KvbedError(f"{where}: unknown keys for {cls.__name__}: {', '.join(sorted(unknown))}")
    for f in dataclasses.fields(cls):
        if f.name in data:
            check_choice(f"{where}: {f.name}", data[f.name], choices_of(f))
    return cls(**data)
