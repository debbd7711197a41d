"""A study spec (TOML) and its grid of points.

Sections:

- ``[study]``: ``name``, ``seeds = [0, 1, 2]`` or ``repeats = N`` (seeds 0..N-1), ``metrics`` (the columns
  of the summary and report; default :data:`~testbed.study.vocabulary.DEFAULT_METRICS`), ``plots`` (default all),
  ``description``;
- ``[trace]``: one of ``path = "x.parquet"``; ``import = "mooncake"`` + ``source = "file.jsonl"`` + any
  ``kvbed trace import`` option by its name with ``_`` (every tier simulator field, and ``policy``);
  ``synth = true`` + any ``kvbed trace synth`` option (synth and tier simulator fields);
- ``[replay]``: ``device``, ``hints``, any replay field (``tier``, ``fill_ratio``, ...) and
  ``param = { ru_bytes = "1GiB", op_ratio = 0.07 }`` for any ``--param`` key;
- ``[axes]``: dotted paths into those sections (``"replay.hints"``, ``"replay.param.op_ratio"``,
  ``"trace.tokens_per_object"``, ``"trace.source"``), each a non-empty list; the grid is their product;
- ``[[zip]]``: groups of axes (lists of equal length) that vary together; each group is one factor. A value
  ``"-"`` leaves the key unset at that level (a parameter only one hint policy or trace kind has, e.g.
  ``"replay.param.error_rate" = ["-", 0.1, 0.3]`` beside ``"replay.hints" = ["none", "noisy-oracle", ...]``).

Every point is checked with the validators the CLI uses (the same dataclasses and registries) before
anything runs; a bad key or value is one located error naming the spec file, line and key. Relative paths
are relative to the spec file. Seeds set the replay's seed and, for a synthetic trace whose spec does not
fix ``seed``, the generator's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbed.core.errors import KvbedError
from kvbed.core.params import field_types, to_dict, with_overrides
from kvbed.core.version import __version__
from kvreplay.schema import FORMAT_VERSION
from testbed.study.vocabulary import DEFAULT_METRICS, METRICS, OLD_NAMES, PLOTS, UNSET, metric_name

STUDY_KEYS = ("name", "description", "seeds", "repeats", "metrics", "plots")
TRACE_KINDS = ("path", "import", "synth")


def _line_of(text: str, section: str, key: str) -> int | None:
    """The line (1-based) where ``key`` is set in ``[section]`` (best effort: TOML keeps no positions)."""
    head = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    want = key.split(".")[0]
    cur = ""
    first = None
    for n, line in enumerate(text.splitlines(), 1):
        m = head.match(line)
        if m:
            cur = m.group(1).strip()
            if cur == section and first is None:
                first = n
            continue
        if cur != section:
            continue
        k = re.match(r'^\s*("([^"]*)"|([A-Za-z0-9_.-]+))\s*=', line)
        if k and (k.group(2) == key or k.group(3) in (key, want)):
            return n
    return first


@dataclass(frozen=True)
class TraceSetting:
    """One distinct trace of a study: where its events come from and every setting that shapes them."""

    kind: str  # path | import | synth
    path: str | None = None  # kind=path: the trace file
    importer: str | None = None  # kind=import
    source: str | None = None  # kind=import: the request trace
    tier: dict[str, Any] = field(default_factory=dict)  # TierSimParams, every field (import, synth)
    synth: dict[str, Any] = field(default_factory=dict)  # SynthParams, every field (synth)

    def key(self) -> dict[str, Any]:
        """What identifies the trace's content: the settings, and the input file's own content."""
        d = dataclasses.asdict(self)
        d["kvbed_version"] = __version__
        # a cached trace of an older format is rebuilt, not read (a release may change the format alone)
        d["trace_format_version"] = FORMAT_VERSION
        inp = self.path or self.source
        if inp:
            d["input_sha256"] = file_sha256(Path(inp))
        return d

    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.key(), sort_keys=True).encode()).hexdigest()[:16]

    def label(self) -> str:
        if self.kind == "path":
            return Path(self.path).name
        if self.kind == "import":
            return f"{self.importer}:{Path(self.source).name}"
        return "synth"


_SHA_CACHE: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes (memoised per path, size and mtime for this process)."""
    st = path.stat()
    k = (str(path), st.st_size, st.st_mtime_ns)
    if k not in _SHA_CACHE:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _SHA_CACHE[k] = h.hexdigest()
    return _SHA_CACHE[k]


@dataclass(frozen=True)
class Point:
    """One run of the grid: the axis values that made it, its seed, its trace and its replay settings."""

    index: int
    axes: dict[str, Any]
    seed: int
    trace: TraceSetting
    device: str
    hints: str
    replay: dict[str, Any]  # ReplayParams fields set by the spec (the seed included)
    params: dict[str, Any]  # --param keys

    def param_pairs(self) -> list[str]:
        return [f"{k}={_text(v)}" for k, v in self.params.items()]

    def build_config(self, trace_path: str | Path):
        from kvreplay.replay.config import build_config

        return build_config(trace_path, self.device, self.hints, self.param_pairs(),
                            {k: _text(v) for k, v in self.replay.items()})

    def key(self, trace_hash: str) -> dict[str, Any]:
        """What the run depends on: the trace's hash and the replay's parameters as parsed (so ``1GiB`` and
        ``1073741824`` are one point)."""
        d = self.build_config("trace").to_dict()
        for k in ("trace", "sizing"):
            d.pop(k, None)
        d["trace_hash"] = trace_hash
        return d

    def hash(self, trace_hash: str) -> str:
        return hashlib.sha256(json.dumps(self.key(trace_hash), sort_keys=True).encode()).hexdigest()[:16]


def _text(v: Any) -> str:
    """A TOML value as ``--param`` text (booleans as true/false)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


@dataclass
class Study:
    """A parsed, validated spec and its points."""

    path: Path
    text: str
    name: str
    description: str
    seeds: list[int]
    metrics: list[str]
    plots: list[str]
    axes: dict[str, list[Any]]  # every varied key, with its values (zip groups included)
    zips: list[list[str]]  # the keys of each [[zip]] group
    points: list[Point]

    def traces(self) -> dict[str, TraceSetting]:
        """The distinct traces, by hash, in first-use order."""
        out: dict[str, TraceSetting] = {}
        for p in self.points:
            out.setdefault(p.trace.hash(), p.trace)
        return out


class _Spec:
    """Parsing state: the file's text for locating keys in errors."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.text = path.read_text()
        except FileNotFoundError:
            raise KvbedError("no such file", where=str(path)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise KvbedError(f"cannot read ({exc})", where=str(path)) from None
        try:
            self.doc = tomllib.loads(self.text)
        except tomllib.TOMLDecodeError as exc:
            m = re.search(r"line (\d+)", str(exc))
            where = f"{path}:{m.group(1)}" if m else str(path)
            raise KvbedError(f"not valid TOML ({exc})", where=where) from None

    def error(self, section: str, key: str, message: str) -> KvbedError:
        line = _line_of(self.text, section, key)
        where = f"{self.path}:{line}" if line else str(self.path)
        shown = f"{section}.{key}" if key else f"[{section}]"
        return KvbedError(f"{shown}: {message}", where=where)

    def resolve(self, p: str) -> str:
        q = Path(p).expanduser()
        return str((q if q.is_absolute() else self.path.parent / q).resolve())


def _defaults() -> tuple[Any, Any, Any, Any]:
    from kvreplay.replay.params import ReplayParams
    from kvreplay.synth import SYNTH_TIER_DEFAULTS, SynthParams
    from kvreplay.tiers import TierSimParams

    return ReplayParams, TierSimParams, SynthParams, SYNTH_TIER_DEFAULTS


def load(path: str | Path) -> Study:
    """Parse and validate a spec; every point is checked before anything runs."""
    from devicemodels import DEVICES
    from kvreplay.hints import HINTS

    spec = _Spec(Path(path))
    doc = spec.doc
    for sec in doc:
        if sec not in ("study", "trace", "replay", "axes", "zip"):
            raise spec.error(sec, "", "unknown section (known: study, trace, replay, axes, zip)")
    study = doc.get("study", {})
    for k in study:
        if k not in STUDY_KEYS:
            raise spec.error("study", k, f"unknown key (known: {', '.join(STUDY_KEYS)})")
    name = study.get("name", spec.path.stem)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise spec.error("study", "name", f"expected a name of letters, digits, '.', '-', '_', got {name!r}")
    if "seeds" in study and "repeats" in study:
        raise spec.error("study", "repeats", "give seeds or repeats, not both")
    seeds = study.get("seeds", list(range(study["repeats"])) if "repeats" in study else [0])
    if "repeats" in study and (not isinstance(study["repeats"], int) or isinstance(study["repeats"], bool)
                               or study["repeats"] < 1):
        raise spec.error("study", "repeats", f"expected a whole number >= 1, got {study['repeats']!r}")
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                           and s >= 0 for s in seeds):
        raise spec.error("study", "seeds", f"expected a non-empty list of whole numbers >= 0, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise spec.error("study", "seeds", f"seeds repeat: {seeds}")
    metrics = study.get("metrics", list(DEFAULT_METRICS))
    _names_list(spec, "metrics", metrics, {**METRICS, **OLD_NAMES})
    metrics = [metric_name(m) for m in metrics]
    plots = study.get("plots", list(PLOTS))
    _names_list(spec, "plots", plots, PLOTS)
    desc = study.get("description", "")
    if not isinstance(desc, str):
        raise spec.error("study", "description", "expected text")

    base = {"trace": dict(doc.get("trace", {})), "replay": dict(doc.get("replay", {}))}
    for sec in ("trace", "replay", "axes"):
        if sec in doc and not isinstance(doc[sec], dict):
            raise spec.error(sec, "", "expected a table")
    if "param" in base["replay"] and not isinstance(base["replay"]["param"], dict):
        raise spec.error("replay", "param", "expected a table of --param keys, e.g. param = { op_ratio = 0.07 }")
    factors: list[list[dict[str, Any]]] = []  # each factor: its settings, one dict per level
    varied: dict[str, list[Any]] = {}
    for key, values in doc.get("axes", {}).items():
        _check_axis(spec, "axes", key, values)
        factors.append([{key: v} for v in values])
        varied[key] = values
    zips = doc.get("zip", [])
    if not isinstance(zips, list):
        raise spec.error("zip", "", "expected [[zip]] tables")
    for group in zips:
        if not group:
            raise spec.error("zip", "", "an empty [[zip]] group")
        lengths = set()
        for key, values in group.items():
            _check_axis(spec, "zip", key, values)
            if key in varied:
                raise spec.error("zip", key, "already an axis: vary a key in one place only")
            lengths.add(len(values))
            varied[key] = values
        if len(lengths) != 1:
            raise spec.error("zip", next(iter(group)), f"the lists of a [[zip]] group differ in length: "
                                                       f"{ {k: len(v) for k, v in group.items()} }")
        n = lengths.pop()
        levels = [{k: v[i] for k, v in group.items()} for i in range(n)]
        if len({json.dumps(lv, sort_keys=True) for lv in levels}) != n:
            raise spec.error("zip", next(iter(group)), "two levels of this [[zip]] group are the same")
        factors.append(levels)
    points: list[Point] = []
    checked: dict[str, TraceSetting] = {}
    for combo in itertools.product(*factors) if factors else [()]:
        setting = {k: v for level in combo for k, v in level.items()}
        for seed in seeds:
            points.append(_point(spec, len(points), base, setting, seed, checked, DEVICES, HINTS))
    return Study(path=spec.path, text=spec.text, name=name, description=desc, seeds=list(seeds),
                 metrics=list(metrics), plots=list(plots), axes=varied, zips=[list(g) for g in zips],
                 points=points)


def _names_list(spec: _Spec, key: str, got: Any, known: Any) -> None:
    if not isinstance(got, list) or not all(isinstance(x, str) for x in got):
        raise spec.error("study", key, f"expected a list of names, got {got!r}")
    for x in got:
        if x not in known:
            raise spec.error("study", key, f"unknown {key[:-1]} {x!r} (known: {', '.join(known)})")


def _check_axis(spec: _Spec, section: str, key: str, values: Any) -> None:
    parts = key.split(".")
    if len(parts) < 2 or parts[0] not in ("trace", "replay") or (parts[:2] == ["replay", "param"] and len(parts) < 3):
        raise spec.error(section, key, "an axis is a dotted path into [trace] or [replay], e.g. \"replay.hints\", "
                                       "\"replay.param.op_ratio\", \"trace.tokens_per_object\"")
    if not isinstance(values, list) or not values:
        raise spec.error(section, key, f"expected a non-empty list of values, got {values!r}")
    if any(isinstance(v, (list, dict)) for v in values):
        raise spec.error(section, key, "axis values must be single values (text, numbers, booleans)")
    if section == "axes" and len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
        raise spec.error(section, key, f"values repeat: {values}")


def _point(spec: _Spec, index: int, base: dict[str, dict[str, Any]], setting: dict[str, Any], seed: int,
           checked: dict[str, TraceSetting], DEVICES: Any, HINTS: Any) -> Point:
    trace = dict(base["trace"])
    replay = dict(base["replay"])
    param = dict(replay.pop("param", {}))
    where: dict[str, tuple[str, str]] = {}  # key -> (section, key) of the spec that set it, for errors
    for key, v in setting.items():
        if v == UNSET:
            continue
        sec, rest = key.split(".", 1)
        sec_name = "axes" if key in (spec.doc.get("axes") or {}) else "zip"
        if sec == "trace":
            trace[rest] = v
            where[f"trace.{rest}"] = (sec_name, key)
        elif rest.startswith("param."):
            param[rest[len("param."):]] = v
            where[f"replay.param.{rest[len('param.'):]}"] = (sec_name, key)
        else:
            replay[rest] = v
            where[f"replay.{rest}"] = (sec_name, key)

    def err(full: str, message: str) -> KvbedError:
        sec, _, key = full.partition(".")  # "trace": the section itself
        sec, key = where.get(full, (sec, key))
        return spec.error(sec, key, message)

    ts = _trace_setting(spec, trace, seed, err, checked)
    ReplayParams = _defaults()[0]
    device = replay.pop("device", "fdp")
    hints = replay.pop("hints", "none")
    for k, v in (("device", device), ("hints", hints)):
        if not isinstance(v, str):
            raise err(f"replay.{k}", f"expected a name, got {v!r}")
    if device not in DEVICES:
        raise err("replay.device", f"unknown device {device!r} (choose from: {', '.join(DEVICES.names())})")
    hints = _plugin_path(spec, hints)
    try:
        HINTS.get(hints)  # a registered name, an entry point, or module:Class / path/file.py:Class
    except KvbedError as exc:
        raise err("replay.hints", str(exc)) from None
    known = field_types(ReplayParams)
    for k, v in replay.items():
        if k not in known:
            raise err(f"replay.{k}", f"unknown key (known: device, hints, param, {', '.join(known)})")
        try:
            with_overrides(ReplayParams(), {k: v})
        except KvbedError as exc:
            raise err(f"replay.{k}", str(exc)) from None
    if "seed" in replay:
        raise err("replay.seed", "the study's seeds set the replay seed: use [study] seeds")
    replay["seed"] = seed
    pt = Point(index=index, axes=dict(setting), seed=seed, trace=ts, device=device, hints=hints,
               replay=replay, params=param)
    try:
        pt.build_config("trace.parquet")
    except KvbedError as exc:
        msg = str(exc)
        m = re.search(r"unknown parameter '?([A-Za-z0-9_.]+)'?", msg)
        key = m.group(1) if m else next(iter(param), "")
        raise err(f"replay.param.{key}" if key in param else "replay.param", msg) from None
    for k, v in param.items():  # every value on its own, so the error names its key
        try:
            Point(index, {}, seed, ts, device, hints, {}, {k: v}).build_config("trace.parquet")
        except KvbedError as exc:
            raise err(f"replay.param.{k}", str(exc)) from None
    _check_ranges(pt, replay, param, err)
    return pt


def _check_ranges(pt: Point, replay: dict[str, Any], param: dict[str, Any], err: Any) -> None:
    """The ranges the replay checks only once it has read the trace (device and hint parameters), checked
    now; the error names the key the message names, else the one key whose value alone is refused."""
    from testbed.study.check import check_config

    try:
        check_config(pt.build_config("trace.parquet"))
    except KvbedError as exc:
        msg = str(exc)
        keys = [*param, *(r for r in replay if r != "seed")]
        named = [k for k in keys if re.search(rf"(?<![A-Za-z0-9_]){re.escape(k.split('.')[-1])}\b", msg)]
        if not named:
            for k, v in param.items():
                try:
                    check_config(Point(pt.index, {}, pt.seed, pt.trace, pt.device, pt.hints, {}, {k: v})
                                 .build_config("trace.parquet"))
                except KvbedError:
                    named = [k]
                    break
        k = named[0] if named else None
        raise err(f"replay.param.{k}" if k in param else f"replay.{k}" if k else "replay.param", msg) from None


def _plugin_path(spec: _Spec, hints: str) -> str:
    """A plugin policy given as ``path/file.py:Class`` with the path relative to the spec file."""
    path, sep, cls = hints.rpartition(":")
    if sep and path.endswith(".py") and not Path(path).expanduser().is_absolute():
        return f"{spec.resolve(path)}:{cls}"
    return hints


def _trace_setting(spec: _Spec, trace: dict[str, Any], seed: int, err: Any,
                   checked: dict[str, TraceSetting]) -> TraceSetting:
    from kvreplay.importers import IMPORTERS

    _, TierSimParams, SynthParams, SYNTH_TIER_DEFAULTS = _defaults()
    kinds = [k for k in TRACE_KINDS if k in trace and trace[k] not in (False, None)]
    if len(kinds) != 1:
        raise err("trace.path" if "path" in trace else "trace.import",
                  "give exactly one of path = \"x.parquet\", import = \"<format>\" with source = \"file\", "
                  "or synth = true")
    kind = kinds[0]
    rest = {k: v for k, v in trace.items() if k not in (kind, "source")}
    if kind == "path":
        if not isinstance(trace["path"], str):
            raise err("trace.path", "expected a file name")
        if rest or "source" in trace:
            raise err(f"trace.{next(iter(rest), 'source')}", "a trace given by path takes no other settings")
        p = spec.resolve(trace["path"])
        if not Path(p).is_file():
            raise err("trace.path", f"no such file: {p}")
        return TraceSetting(kind="path", path=p)
    tier_fields = field_types(TierSimParams)
    synth_fields = field_types(SynthParams) if kind == "synth" else {}
    tier = TierSimParams() if kind == "import" else SYNTH_TIER_DEFAULTS
    synth = SynthParams()
    policy = rest.pop("policy", None)
    if policy is not None:
        try:
            tier = with_overrides(tier, {f"{t}_policy": policy for t in ("gpu", "cpu", "cxl", "ssd")})
        except KvbedError as exc:
            raise err("trace.policy", str(exc)) from None
    if kind == "synth" and "seed" not in rest:
        rest["seed"] = seed
    for k, v in rest.items():
        try:
            if k in tier_fields:
                tier = with_overrides(tier, {k: v})
            elif k in synth_fields:
                synth = with_overrides(synth, {k: v})
            else:
                known = ["policy", *tier_fields, *synth_fields]
                raise KvbedError(f"unknown key for a {kind} trace (known: {', '.join(known)})")
        except KvbedError as exc:
            raise err(f"trace.{k}", str(exc)) from None
    try:
        tier.validate()
        if kind == "synth":
            synth.validate()
    except KvbedError as exc:  # a range error: named by the key its message names, if one was set
        named = [k for k in rest if re.search(rf"(?<![A-Za-z0-9_]){re.escape(k)}\b", str(exc))]
        if not named and policy is not None and "_policy" in str(exc):
            named = ["policy"]
        raise err(f"trace.{named[0]}" if named else "trace", str(exc)) from None
    if kind == "import":
        if not isinstance(trace["import"], str) or trace["import"] not in IMPORTERS:
            raise err("trace.import", f"unknown importer {trace['import']!r} (choose from: {', '.join(IMPORTERS)})")
        if not isinstance(trace.get("source"), str):
            raise err("trace.source", "an imported trace needs source = \"file\"")
        src = spec.resolve(trace["source"])
        if not Path(src).is_file():
            raise err("trace.source", f"no such file: {src}")
        ts = TraceSetting(kind="import", importer=trace["import"], source=src, tier=to_dict(tier))
    else:
        if "source" in trace:
            raise err("trace.source", "a synthetic trace has no source")
        ts = TraceSetting(kind="synth", tier=to_dict(tier), synth=to_dict(synth))
    return checked.setdefault(json.dumps(dataclasses.asdict(ts), sort_keys=True), ts)
