"""A replay run's configuration: what ``config.json`` holds, how options and ``--param`` pairs become it, and
how the device is sized from the trace's first pass.

Everything a run depends on is in :class:`RunConfig`; ``config.json`` is its ``to_dict()`` and reruns the
run exactly (``kvbed replay --config``). The trace is identified by a fingerprint of its Parquet footer, so
a rerun on a changed trace is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from devicemodels import DEVICES
from kvreplay import schema as S
from kvreplay.faults import FaultParams
from kvreplay.hints import HINTS
from kvreplay.hints.provenance import check_plugin_source, plugin_source
from kvreplay.layout import LayoutParams
from kvreplay.replay.params import ReplayParams
from kvreplay.replay.scan import ScanResult
from kvreplay.replay.sizing import CAPACITY_FIELDS, apply_defaults, explicit_keys, size_device
from kvbed.core.errors import KvbedError
from kvbed.core.registry import canonical_spec, is_spec
from kvbed.core.params import from_dict, split_overrides, to_dict, with_options, with_overrides
from kvbed.core.version import __version__


def trace_fingerprint(path: Path) -> str:
    """sha256 of the Parquet footer (schema, metadata, row counts, per-chunk statistics, compressed sizes
    and offsets) and the file size, without reading a multi-GB file. It changes with almost any edit of
    the content; an edit that keeps every chunk's compressed size and min/max (e.g. two ids swapped within
    a chunk) goes unnoticed."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        if size < 8:
            return f"size:{size}"
        f.seek(size - 8)
        tail = f.read(8)
        flen = int.from_bytes(tail[:4], "little")
        f.seek(max(0, size - 8 - flen))
        footer = f.read(flen + 8)
    return "sha256:" + hashlib.sha256(footer + str(size).encode()).hexdigest()


@dataclass
class RunConfig:
    """Everything a run depends on; ``config.json`` is its ``to_dict()`` and reruns it exactly."""

    trace: str
    device: str
    hints: str
    replay: ReplayParams
    layout: LayoutParams
    hint_params: Any
    device_params: dict[str, Any]
    explicit: list[str] = field(default_factory=list)  # device fields the user set (sizing leaves them alone)
    sized: bool = False  # device_params already hold the capacity (a rerun from config.json)
    sizing: dict[str, Any] | None = None
    trace_fingerprint: str | None = None
    #: where the ops go when not to the embedded model, e.g. {"kind": "vm", ...} (testbed.vm.replay)
    target: dict[str, Any] | None = None
    #: injected faults and the recovery contract (kvreplay.faults); recorded only when set
    faults: FaultParams = field(default_factory=FaultParams)
    #: a plugin policy's code: {"file": absolute path, "sha256": ...} (kvreplay.hints.provenance.plugin_source);
    #: None for kvbed's own policies. A rerun from config.json refuses code that changed since
    hint_source: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {
            "kvbed_version": __version__,
            "trace": {"path": self.trace, "fingerprint": self.trace_fingerprint},
            "device": self.device,
            "hints": self.hints,
            "replay": to_dict(self.replay),
            "layout": to_dict(self.layout),
            "hint_params": to_dict(self.hint_params),
            "device_params": {g: to_dict(p) for g, p in self.device_params.items()},
            "explicit": sorted(self.explicit),
            "sizing": self.sizing,
        }
        if self.target is not None:
            d["target"] = self.target
        if self.faults.active:
            d["faults"] = to_dict(self.faults)
        if self.hint_source is not None:
            d["hint_source"] = dict(self.hint_source)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, where: str = "config.json") -> "RunConfig":
        try:
            device_cls = DEVICES.get(d["device"])
            policy_cls = HINTS.get(d["hints"])
            source = d.get("hint_source")
            if source is not None or not HINTS.is_registered(d["hints"]):
                if source is None:
                    raise KvbedError(f"hint policy {d['hints']!r} is a plugin and the config records no hash of "
                                     f"its code (hint_source): it cannot be rerun as it ran; rerun without --config",
                                     where=where)
                check_plugin_source(d["hints"], source, policy_cls, where=where)
            groups = {g: from_dict(c, d["device_params"][g], where=f"{where}: device_params.{g}")
                      for g, c in device_cls.param_classes.items()}
            return cls(
                trace=d["trace"]["path"], device=d["device"], hints=d["hints"],
                replay=from_dict(ReplayParams, d["replay"], where=f"{where}: replay").validate(),
                layout=from_dict(LayoutParams, d["layout"], where=f"{where}: layout").validate(),
                hint_params=from_dict(policy_cls.Params, d["hint_params"], where=f"{where}: hint_params"),
                device_params=groups, explicit=list(d.get("explicit", [])), sized=True, sizing=d.get("sizing"),
                trace_fingerprint=d["trace"].get("fingerprint"), target=d.get("target"),
                faults=from_dict(FaultParams, d.get("faults", {}), where=f"{where}: faults").validate(),
                hint_source=source,
            )
        except KeyError as exc:
            raise KvbedError(f"missing key {exc.args[0]!r}", where=where) from None
        except (TypeError, AttributeError) as exc:  # a value of the wrong JSON type (a number for a name...)
            raise KvbedError(f"malformed config ({exc})", where=where) from None


def build_config(trace: str | Path, device: str, hints: str, params: list[str] | tuple[str, ...] = (),
                 options: dict[str, Any] | None = None) -> RunConfig:
    """Route ``--param k=v`` pairs and CLI options (``{field: value}``, the same path) to their dataclasses;
    fail early on anything unknown."""
    device_cls = DEVICES.get(device)
    hints = canonical_spec(hints) if is_spec(hints) else hints  # a plugin's file by its absolute path
    policy_cls = HINTS.get(hints)
    classes = {"replay": ReplayParams, "layout": LayoutParams, "faults": FaultParams, "hint": policy_cls.Params,
               **device_cls.param_classes}
    routed = split_overrides(with_options(params, options), classes, labels=replay_labels(device, hints, classes),
                             apart=("hint",))  # a key a policy shares with kvbed's sets must say which it sets
    replay = with_overrides(ReplayParams(), routed["replay"]).validate()
    layout = with_overrides(LayoutParams(), routed["layout"]).validate()
    faults = with_overrides(FaultParams(), routed["faults"]).validate()
    hint_params = with_overrides(policy_cls.Params(), routed["hint"], label=f"hints {hints}")
    groups = apply_defaults({g: c() for g, c in device_cls.param_classes.items()})
    for g in device_cls.param_classes:
        groups[g] = with_overrides(groups[g], routed[g], label=f"device {device}")
    explicit = set()
    for g in device_cls.param_classes:
        explicit |= explicit_keys(routed[g])
    if "flash" in groups and "seed" not in explicit:  # one seed for the run unless the device's is set apart
        groups["flash"] = with_overrides(groups["flash"], {"seed": replay.seed})
    path = Path(trace).expanduser().resolve()
    return RunConfig(trace=str(path), device=device, hints=hints, replay=replay, layout=layout,
                     hint_params=hint_params, device_params=groups, explicit=sorted(explicit), faults=faults,
                     hint_source=plugin_source(hints, policy_cls))


def replay_labels(device: str, hints: str, classes: dict[str, type]) -> dict[str, str]:
    """What each parameter group of a replay is called in an unknown-key error: the replay's own sets by
    name, the hint policy and the device by theirs."""
    own = {"replay": "replay", "layout": "layout", "faults": "faults", "hint": f"hints {hints}"}
    return {g: own.get(g, f"device {device}") for g in classes}


def tier_policy(meta: S.TraceMeta, tier: str) -> str | None:
    """The replayed tier's eviction policy as recorded by the producer (searched in generator settings)."""
    key = f"{tier}_policy"

    def find(d: Any) -> str | None:
        if isinstance(d, dict):
            if isinstance(d.get(key), str):
                return d[key]
            for v in d.values():
                r = find(v)
                if r:
                    return r
        return None

    return find(meta.generator)


def size_run(cfg: RunConfig, sc: ScanResult, zone_streams: int, *,
             fit_params: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
             owner: str | None = None) -> dict[str, Any]:
    """The device parameter groups for the run, sized from the first pass (``cfg`` records them, and the
    sizing record, once); a rerun from config.json only checks that they still hold the trace. ``fit_params``
    lets a target with a geometry of its own adjust them (the sizing record then says what moved);
    ``owner`` names what fixed the capacity when the replay may not choose it (a running VM)."""
    rp = cfg.replay
    common = dict(peak_live_pages=sc.peak_live_pages, max_object_pages=sc.max_object_pages,
                  fill_ratio=rp.fill_ratio, strict=rp.strict_capacity, zone_streams=zone_streams,
                  gc_free_zones=cfg.layout.gc_free_zones, tier=rp.tier)
    groups = cfg.device_params
    if cfg.sized:
        size_device(groups, set(cfg.explicit) | set(CAPACITY_FIELDS.values()) | {"channels", "ru_bytes",
                                                                                 "blocks_per_line"},
                    owner=owner, **common)
        if fit_params:
            groups = fit_params(groups)
            if groups != cfg.device_params:
                raise KvbedError("the saved device parameters do not fit the target any more "
                                 "(a VM would get a different geometry): rerun without --config")
        return groups
    rate = 0.0 if rp.as_fast_as_possible else sc.peak_write_bytes_per_s * rp.time_scale
    groups, cfg.sizing = size_device(groups, set(cfg.explicit), write_bytes_per_s=rate,
                                     write_utilization=rp.write_utilization, owner=owner, **common)
    if fit_params:
        fitted = fit_params(groups)
        if fitted != groups:  # the target moved the geometry: the sizing record says so
            every = {f.name for p in fitted.values() for f in dataclasses.fields(p)}
            _, rec = size_device(fitted, every, **common)
            moved = {k: (cfg.sizing.get(k), rec[k]) for k in ("logical_bytes", "usable_pages", "zones")
                     if k in rec and cfg.sizing.get(k) != rec[k]}
            cfg.sizing.update({k: v for k, (_, v) in moved.items()}, fill_ratio_effective=rec["fill_ratio_effective"])
            cfg.sizing["notes"].append(
                "the target needs another geometry: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in moved.items()))
            groups = fitted
    cfg.device_params = groups
    cfg.sized = True
    return groups
