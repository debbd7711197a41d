"""Multi-tier replay: every named tier of a trace on its own device in one run, and the requests on top.

Each tier is an ordinary single-tier replay (:class:`~kvreplay.replay.engine.Replay`), sized from its own
tier's peak live data, with its own device and hint policy; they run one after another over the same trace
(each keeps the trace row and latency of every load it served), then :mod:`kvreplay.replay.ttft` joins those
loads to the requests for KV-ready times and TTFT. The tiers do not interact in device time: the tier
simulator already decided which tier serves each load, so each device sees exactly its tier's events.

``--param k=v`` goes to every tier whose parameter sets know ``k`` (and to the cost or request model when it is
theirs); ``--param ssd:k=v`` to one tier only. ``--hints oracle`` applies to every tier, ``--hints
ssd=oracle`` to one (the others keep ``none``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from devicemodels import DEVICES, jit
from devicemodels.histogram import LatencyHistogram
from kvreplay import schema as S
from kvreplay.costmodel import CostParams
from kvreplay.hints import HINTS
from kvreplay.layout.params import LayoutParams
from kvreplay.replay.config import RunConfig, build_config, replay_labels
from kvreplay.replay.engine import Progress, Replay
from kvreplay.replay.params import ReplayParams
from kvreplay.replay.result import latency_rows
from kvreplay.replay.ttft import RequestParams, request_section, request_starts
from kvreplay.validate import CHECK_COLUMNS, RowCheck
from kvbed.core.errors import Interrupted, KvbedError
from kvbed.core.params import field_types, from_dict, split_overrides, to_dict, with_overrides
from kvbed.core.version import __version__

#: the tiers a device can hold, and the device each gets unless --tier-device says otherwise
TIER_DEVICES = {"cpu": "dram", "cxl": "cxl", "ssd": "fdp"}


def _knows(classes: dict[str, type], key: str) -> bool:
    k = key.strip().replace("-", "_")
    if "." in k:
        g, f = k.split(".", 1)
        return g in classes and f in field_types(classes[g])
    return any(k in field_types(c) for c in classes.values())


def _tier_classes(device: str, hints: str) -> dict[str, type]:
    return {"replay": ReplayParams, "layout": LayoutParams, "hint": HINTS.get(hints).Params,
            **DEVICES.get(device).param_classes}


def parse_tier_map(items: list[str] | tuple[str, ...], what: str, tiers: list[str]) -> dict[str, str]:
    """``["cxl=cxl-ssd", "ssd=zns"]`` (or comma-separated) -> {tier: value}, for tiers of this run only."""
    out: dict[str, str] = {}
    for item in (s.strip() for chunk in items for s in chunk.split(",")):
        if not item:
            continue
        tier, sep, val = item.partition("=")
        if not sep or not val.strip():
            raise KvbedError(f"{what}: expected TIER=NAME, got {item!r}")
        tier = tier.strip()
        if tier not in tiers:
            raise KvbedError(f"{what}: tier {tier!r} is not replayed in this run (--tiers {','.join(tiers)})")
        out[tier] = val.strip()
    return out


@dataclass
class MultiTierConfig:
    """Everything a multi-tier run depends on; ``config.json`` is its ``to_dict()`` and reruns it."""

    trace: str
    tiers: dict[str, RunConfig]  # tier name -> that tier's single-tier run
    cost: CostParams
    requests: RequestParams

    def to_dict(self) -> dict[str, Any]:
        return {
            "kvbed_version": __version__,
            "trace": {"path": self.trace, "fingerprint": next(iter(self.tiers.values())).trace_fingerprint},
            "tiers": {t: c.to_dict() for t, c in self.tiers.items()},
            "cost": to_dict(self.cost),
            "requests": to_dict(self.requests),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, where: str = "config.json") -> "MultiTierConfig":
        try:
            tiers = {t: RunConfig.from_dict(c, where=f"{where}: tiers.{t}") for t, c in d["tiers"].items()}
            if not tiers:
                raise KvbedError("no tiers", where=where)
            return cls(trace=d["trace"]["path"], tiers=tiers,
                       cost=from_dict(CostParams, d["cost"], where=f"{where}: cost").validate(),
                       requests=from_dict(RequestParams, d["requests"], where=f"{where}: requests").validate())
        except KeyError as exc:
            raise KvbedError(f"missing key {exc.args[0]!r}", where=where) from None
        except (TypeError, AttributeError) as exc:
            raise KvbedError(f"malformed config ({exc})", where=where) from None


def build_multitier_config(trace: str | Path, tiers: list[str], tier_devices: dict[str, str],
                           hints: dict[str, str], params: list[str] | tuple[str, ...] = (),
                           options: dict[str, Any] | None = None) -> MultiTierConfig:
    """One RunConfig per tier plus the cost and request models; ``hints`` maps tier -> policy ("" = every tier)."""
    if not tiers:
        raise KvbedError("--tiers: name at least one tier")
    for t in tiers:
        if t not in TIER_DEVICES:
            raise KvbedError(f"--tiers: {t!r} is not a tier a device can hold (choose from: {', '.join(TIER_DEVICES)})")
    if len(set(tiers)) != len(tiers):
        raise KvbedError(f"--tiers: a tier is named twice ({','.join(tiers)})")
    options = dict(options or {})
    if options.get("tier") is not None:
        raise KvbedError("--tier and --tiers exclude each other")
    options.pop("tier", None)
    on_hit = options.pop("on_hit", None)
    devices = {t: tier_devices.get(t, TIER_DEVICES[t]) for t in tiers}
    policies = {t: hints.get(t, hints.get("", "none")) for t in tiers}
    for t in tiers:
        DEVICES.get(devices[t])
        HINTS.get(policies[t])
    model_classes = {"cost": CostParams, "requests": RequestParams}
    per_tier: dict[str, list[str]] = {t: [] for t in tiers}
    model_pairs: list[str] = [f"on_hit={on_hit}"] if on_hit is not None else []
    for pair in params:
        key, sep, val = pair.partition("=")
        if not sep:
            split_overrides([pair], model_classes)  # the standard "expected k=v" error
        tier, colon, key = key.rpartition(":")
        if colon:
            if tier not in per_tier:
                raise KvbedError(f"--param {pair}: tier {tier!r} is not replayed in this run")
            per_tier[tier].append(f"{key}={val}")
            continue
        if _knows(model_classes, key):
            model_pairs.append(pair)
            continue
        owners = [t for t in tiers if _knows(_tier_classes(devices[t], policies[t]), key)]
        if not owners:
            every = {**model_classes, **{f"{g}@{t}": c for t in tiers
                                         for g, c in _tier_classes(devices[t], policies[t]).items()}}
            labels = {f"{g}@{t}": lab if g in ("replay", "layout") else f"tier {t} {lab}" for t in tiers
                      for g, lab in replay_labels(devices[t], policies[t], _tier_classes(devices[t], policies[t])).items()}
            split_overrides([pair], every, labels=labels)  # raises the standard unknown-key error listing every key
        for t in owners:
            per_tier[t].append(pair)
    routed = split_overrides(model_pairs, model_classes)
    # the cost model's KV geometry is the trace's (the model it was made for) unless set
    geo = S.TraceReader(trace).meta.geometry or {}
    given = {p.partition("=")[0].strip().rpartition(".")[2] for p in routed["cost"]}
    base = CostParams()
    for key in ("model", "kv_dtype"):
        if key not in given and geo.get(key):
            base = with_overrides(base, {key: geo[key]})
    cost = with_overrides(base, routed["cost"]).validate()
    requests = with_overrides(RequestParams(), routed["requests"]).validate()
    cfgs = {t: build_config(trace, devices[t], policies[t], [*per_tier[t], f"tier={t}"], options) for t in tiers}
    return MultiTierConfig(trace=str(Path(trace).expanduser().resolve()), tiers=cfgs, cost=cost,
                           requests=requests)


class _TierProgress:
    """Prefixes each phase with the tier being replayed."""

    def __init__(self, inner: Progress, tier: str):
        self.inner, self.tier = inner, tier

    def phase(self, name: str, total: int) -> None:
        self.inner.phase(f"{self.tier}: {name}", total)

    def advance(self, n: int) -> None:
        self.inner.advance(n)


class MultiTierReplay:
    """One multi-tier run: ``run()`` returns the parts :func:`testbed.results.write_run` writes."""

    def __init__(self, config: MultiTierConfig, *, progress: Progress | None = None,
                 should_stop: Callable[[], bool] | None = None):
        self.cfg = config
        self.progress = progress
        self.should_stop = should_stop or (lambda: False)

    def _first_pass(self, reader: S.TraceReader) -> np.ndarray:
        """One read of the trace before the long part: the trace's row checks (:class:`RowCheck`, once for
        every tier's replay), every replayed tier is in it and every tier the requests load from is replayed;
        returns when each request started (``ttft.request_starts``)."""
        served = {S.TIER[t] for t in self.cfg.tiers}
        present = np.zeros(len(S.TIERS), np.int64)
        loads_from: set[int] = set()
        ids, ts = [], []
        check = RowCheck(reader)
        for b in check.checked(reader.iter_batches([*CHECK_COLUMNS, "request_id"])):
            present += np.bincount(b["tier"], minlength=len(S.TIERS))[: len(S.TIERS)]
            loads_from |= set(np.unique(b["tier"][b["op"] == S.OP_LOAD]).tolist())
            m = b["request_id"] >= 0
            ids.append(b["request_id"][m].astype(np.int64))
            ts.append(b["ts_ns"][m])
        for t in self.cfg.tiers:
            if not present[S.TIER[t]]:
                have = ", ".join(S.TIERS[i] for i in np.flatnonzero(present)) or "none"
                raise KvbedError(f"--tiers: tier {t!r} is absent from the trace (tiers present: {have})",
                                 where=self.cfg.trace)
        missing = loads_from - served - {S.TIER_GPU}
        if missing:
            names = ", ".join(S.TIERS[c] for c in sorted(missing))
            raise KvbedError(f"requests load from tier(s) {names}, which --tiers {','.join(self.cfg.tiers)} leaves "
                             f"out: their load latency would be unknown", where=self.cfg.trace)
        return request_starts(np.concatenate(ids) if ids else np.zeros(0, np.int64),
                              np.concatenate(ts) if ts else np.zeros(0, np.int64), self.cfg.trace)

    def run(self) -> dict[str, Any]:
        wall0 = time.perf_counter()
        cfg = self.cfg
        reader = S.TraceReader(cfg.trace)
        req_start = self._first_pass(reader)
        jobs, devices, timeseries, latency, runtime_tiers = [], {}, [], [], {}
        reads: dict[int, Any] = {}
        results: dict[str, Any] = {}
        incomplete = False
        with jit.compile_clock() as compiling:
            for tier, tcfg in cfg.tiers.items():
                prog = _TierProgress(self.progress, tier) if self.progress else None
                rp = Replay(tcfg, progress=prog, should_stop=self.should_stop, keep_reads=True, req_start=req_start,
                            trace_checked=True)
                try:
                    parts = rp.run()
                except Interrupted:  # in a later tier's scan: keep the tiers replayed before it
                    if not results:
                        raise
                    incomplete = True
                    break
                res = parts["result"]
                results[tier] = res
                job = res["jobs"][0]
                jobs.append(job)
                devices[tier] = res["device"]
                timeseries += [{"tier": tier, **row} for row in parts["timeseries"]]
                latency += [(f"{tier}.{s}", b, c) for s, b, c in parts["latency"]]
                runtime_tiers[tier] = parts["runtime"]
                reads[S.TIER[tier]] = rp.reads
                if res["incomplete"]:
                    incomplete = True
                    break
            t_req = time.perf_counter()
            section, series = (None, [])
            incomplete = incomplete or self.should_stop()  # stopped after the last tier's last batch
            if not incomplete:
                section, series = request_section(reader, reads, req_start, rp.t0, rp.cfg.replay.time_scale,
                                                  cfg.cost, cfg.requests, _trace_prefill_rate(reader.meta))
            req_s = time.perf_counter() - t_req
        latency += latency_rows({name: LatencyHistogram.from_values(values) for name, values in series})
        first = next(iter(results.values()))
        result = {
            "kvbed version": first["kvbed version"],
            "incomplete": incomplete,
            "global options": cfg.to_dict(),
            "trace": first["trace"],
            "tiers": {t: {k: r[k] for k in ("scan", "sizing", "window_ns", "precondition")} for t, r in results.items()},
            "jobs": jobs,
            "requests": section,
            "devices": devices,
        }
        for t, r in results.items():
            if r.get("error"):
                result["error"] = f"tier {t}: {r['error']}"
        wall = time.perf_counter() - wall0
        jit_s = jit.compile_seconds(compiling)
        runtime = {"wall_s": wall, "jit_s": jit_s, "request_pass_s": req_s,
                   # trace events per second of the whole run (every tier's replay and the request pass)
                   "events_per_s": reader.num_rows / (wall - jit_s) if wall > jit_s else None,
                   "tiers": runtime_tiers, "incomplete": incomplete}
        return {"config": cfg.to_dict(), "result": result, "timeseries": timeseries, "latency": latency,
                "runtime": runtime}


def _trace_prefill_rate(meta: S.TraceMeta) -> float | None:
    """The aggregate prefill throughput the trace's tier simulator assumed (sets the default instances)."""
    ts = (meta.generator or {}).get("tier_sim") or {}
    v = ts.get("prefill_tokens_per_s")
    return float(v) if v else None
