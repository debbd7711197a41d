"""``kvbed crossover``: from which object size does loading KV from a tier beat recomputing it?

For each tier, model, accelerator and queue depth ``q``, the load time of ``q`` concurrent loads of an
``n``-token object (until the last completes) is set against the recompute time of the same ``q`` objects
(``q x n / prefill tokens/s``, :mod:`kvreplay.costmodel`). Load times come from the tiers' device models
(``DEVICES``; ``TIERS`` maps a tier to its device and how its pages are prepared) or, for ``remote``, from
``rtt + q x bytes / bandwidth``. The crossover ``n*`` is the smallest size at and beyond which loading is
no slower over the swept range: a log-spaced grid of sizes, then bisection on the integers between the two
grid points that bracket the last change; "always load" / "always recompute" when nothing changes in range.

A zero-latency, unloaded tier of bandwidth ``B`` reduces to the closed form: always load iff
``B >= bytes_per_token x tokens_per_s``. With latency ``L`` on a single queue of bandwidth ``B`` (``cxl``,
``remote``): ``n* = ceil(L / (q x (1/tps - bytes_per_token/B)))``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from kvreplay.costmodel import CostParams, accelerators
from kvreplay.tiers.geometry import DTYPE_BYTES, MODELS
from kvbed.core.errors import KvbedError
from kvbed.core.params import check_fields, field_types, param, to_dict, with_overrides

KINDS = ("exact", "quantized", "compressed")
GiB = 1 << 30


@dataclass(frozen=True)
class TierSpec:
    """How one tier is measured: its device model (None = analytic), whether its pages must hold data before
    a read costs anything (flash), how its cache is prepared before the timed reads (``none``, ``hit``: a
    warm-up pass of the same reads; ``miss``: a pass over ``flush_key`` bytes of other pages), and which
    parameter is its capacity (raised to fit the sweep unless given)."""

    name: str
    device: str | None
    written: bool
    cache: str
    capacity_key: str | None
    flush_key: str | None
    about: str


_TIER_ROWS = (
    TierSpec("dram", "dram", False, "none", "dram_bytes", None, "host DRAM (device model dram)"),
    TierSpec("cxl", "cxl", False, "none", "cxl_bytes", None, "CXL type-3 memory expander (device model cxl)"),
    TierSpec("cxl-ssd-hit", "cxl-ssd", True, "hit", "logical_bytes", None,
             "CXL-SSD, objects in its DRAM cache (a warm-up pass first)"),
    TierSpec("cxl-ssd-miss", "cxl-ssd", True, "miss", "logical_bytes", "cache_bytes",
             "CXL-SSD, cold cache: every page a NAND read"),
    TierSpec("ssd", "conv", True, "none", "logical_bytes", None,
             "NVMe SSD (device model conv, pages written sequentially so striped over all dies)"),
    TierSpec("remote", None, False, "none", None, None, "remote store: rtt + bytes / network bandwidth"),
)
TIERS: dict[str, TierSpec] = {t.name: t for t in _TIER_ROWS}


def _csv_list(text: str) -> list[str]:
    return [s.strip().lower() for s in text.split(",") if s.strip()]


@dataclass(frozen=True)
class CrossoverParams:
    """The sweep of ``kvbed crossover``: tiers x models x accelerators x queue depths x object sizes."""

    tiers: str = param("all", f"tiers, comma-separated: {', '.join(TIERS)} (all = every tier whose device "
                              "model exists)", cli=True)
    models: str = param("llama-3-8b,llama-3-70b,qwen2.5-7b,mistral-7b", "models, comma-separated "
                        "(kvbed trace models; each needs a prefill profile on each accelerator)", cli=True)
    accelerators: str = param("a100,h100", "accelerators, comma-separated (kvreplay/costmodel.py profiles)",
                              cli=True)
    queue_depths: str = param("1,8", "concurrent loads (and recomputes) of equal objects, comma-separated",
                              cli=True)
    min_tokens: int = param(1, "smallest object swept (tokens)", cli=True)
    max_tokens: int = param(4096, "largest object swept (tokens)", cli=True)
    points_per_decade: int = param(8, "log-spaced grid points per decade of object size")
    kind: str = param("exact", "what the tier stores: exact bytes, or a quantized/compressed copy that loads "
                               "fewer bytes and is decompressed on the GPU", choices=KINDS, cli=True)
    quantized_ratio: float = param(0.5, "bytes of a quantized copy / exact (bf16 -> int8)")
    compressed_ratio: float = param(0.3, "bytes of a compressed copy / exact (CacheGen-like codec)")
    kv_dtype: str = param("bf16", "KV element type (bytes per token)", choices=tuple(DTYPE_BYTES))
    remote_rtt_ns: int = param(50_000, "remote tier: request round trip (assumed: TCP within a datacenter)")
    remote_bytes_per_s: float = param(3.125e9, "remote tier: network bandwidth (25 Gbit/s Ethernet)")

    def tier_names(self) -> list[str]:
        names = list(TIERS) if self.tiers.strip().lower() == "all" else _csv_list(self.tiers)
        for t in names:
            if t not in TIERS:
                raise KvbedError(f"tiers: unknown tier {t!r} (choose from: all, {', '.join(TIERS)})")
        return list(dict.fromkeys(names))

    def model_names(self) -> list[str]:
        names = _csv_list(self.models)
        for m in names:
            if m not in MODELS:
                raise KvbedError(f"models: unknown model {m!r} (choose from: {', '.join(MODELS)})")
        return list(dict.fromkeys(names))

    def accelerator_names(self) -> list[str]:
        names = _csv_list(self.accelerators)
        for a in names:
            if a not in accelerators():
                raise KvbedError(f"accelerators: unknown accelerator {a!r} (choose from: {', '.join(accelerators())})")
        return list(dict.fromkeys(names))

    def qds(self) -> list[int]:
        out = []
        for s in _csv_list(self.queue_depths):
            if not s.isdigit() or int(s) < 1:
                raise KvbedError(f"queue_depths: expected whole numbers >= 1, got {s!r}")
            out.append(int(s))
        return sorted(set(out))

    def stored_ratio(self) -> float:
        return {"exact": 1.0, "quantized": self.quantized_ratio, "compressed": self.compressed_ratio}[self.kind]

    def validate(self) -> "CrossoverParams":
        check_fields(self)
        for what, values in (("tiers", self.tier_names()), ("models", self.model_names()),
                             ("accelerators", self.accelerator_names()), ("queue_depths", self.qds())):
            if not values:
                raise KvbedError(f"{what}: give at least one")
        if self.min_tokens < 1 or self.max_tokens < self.min_tokens:
            raise KvbedError(f"min_tokens/max_tokens: need 1 <= min_tokens <= max_tokens, got "
                             f"{self.min_tokens}..{self.max_tokens}")
        if self.points_per_decade < 1:
            raise KvbedError(f"points_per_decade must be >= 1, got {self.points_per_decade}")
        for name in ("quantized_ratio", "compressed_ratio"):
            if not 0 < getattr(self, name) <= 1:
                raise KvbedError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        if self.remote_rtt_ns < 0:
            raise KvbedError(f"remote_rtt_ns must be >= 0, got {self.remote_rtt_ns}")
        if not self.remote_bytes_per_s > 0:
            raise KvbedError(f"remote_bytes_per_s must be positive, got {self.remote_bytes_per_s}")
        return self


# --- parameters from the command line -------------------------------------------------------------------

#: CostParams fields the sweep sets itself (from --models, --accelerators and its own kv_dtype)
_SWEPT_COST = ("model", "accelerator", "kv_dtype")


def route_overrides(pairs: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Split ``k=v`` pairs into (crossover, cost, device) ones; a ``group.`` prefix picks the group."""
    cross, cost, dev = [], [], []
    cross_keys, cost_keys = set(field_types(CrossoverParams)), set(field_types(CostParams)) - set(_SWEPT_COST)
    for pair in pairs:
        if "=" not in pair:
            raise KvbedError(f"--param: expected key=value, got {pair!r}")
        key, val = pair.split("=", 1)
        key = key.strip().replace("-", "_")
        group, _, k = key.rpartition(".")
        if group in ("", "crossover") and k in cross_keys:
            cross.append(f"{k}={val}")
        elif group in ("", "cost") and k in cost_keys:
            cost.append(f"{k}={val}")
        elif k in ("model", "accelerator") and group in ("", "cost"):
            raise KvbedError(f"--param: {k} is swept; give --{k}s instead")
        else:
            dev.append(f"{key}={val}")
    return cross, cost, dev


def cost_params(p: CrossoverParams, model: str, accelerator: str, cost_pairs: list[str]) -> CostParams:
    return with_overrides(CostParams(model=model, accelerator=accelerator, kv_dtype=p.kv_dtype), cost_pairs,
                          what="--param").validate()


# --- loaders: the time until q concurrent loads of one object size complete ------------------------------

class RemoteLoader:
    """``rtt + ceil(q x bytes / bandwidth)``: one round trip, then the objects share the link."""

    def __init__(self, p: CrossoverParams):
        self.rtt_ns = p.remote_rtt_ns
        self.bytes_per_s = p.remote_bytes_per_s
        self.config = {"remote_rtt_ns": p.remote_rtt_ns, "remote_bytes_per_s": p.remote_bytes_per_s}

    def load_ns(self, obj_bytes: int, q: int) -> int:
        return self.rtt_ns + int(math.ceil(q * obj_bytes * 1e9 / self.bytes_per_s))


def _takes(classes: dict[str, type], pair: str) -> bool:
    """Whether a device of these parameter groups takes ``key=value`` (``group.key``: only that group)."""
    group, _, key = pair.split("=", 1)[0].strip().replace("-", "_").rpartition(".")
    return any(key in field_types(c) for g, c in classes.items() if group in ("", g))


def _user_keys(pairs: list[str]) -> set[str]:
    return {p.split("=", 1)[0].strip().replace("-", "_").rpartition(".")[2] for p in pairs}


class DeviceLoader:
    """q reads of ``ceil(bytes / page_bytes)`` pages each (object i at LBA i x pages), all at t=0, on an idle
    device (clocks reset before every measurement); the load time is the last completion."""

    def __init__(self, spec: TierSpec, device_pairs: list[str], max_obj_bytes: int, max_q: int):
        from devicemodels import DEVICES

        self.spec = spec
        cls = DEVICES.get(spec.device)
        known = {f for c in cls.param_classes.values() for f in field_types(c)}
        mine = [kv for kv in device_pairs if _takes(cls.param_classes, kv)]
        dev = cls.from_params(mine)
        self.page_bytes = dev.page_bytes
        obj_pages = max_q * -(-max_obj_bytes // self.page_bytes)

        def needs(d: Any) -> tuple[int, int]:
            """(pages read to flush the cache, pages the sweep needs) on device ``d``: a cache sized from the
            capacity (cxl-ssd: 1/20 of the flash) grows with it."""
            flush = self._group_value(d, spec.flush_key) // self.page_bytes if spec.flush_key else 0
            return flush, obj_pages + flush

        self.flush_pages, need_pages = needs(dev)
        if need_pages > dev.logical_pages:
            key = spec.capacity_key
            if key is None or key not in known or key in _user_keys(mine):
                raise KvbedError(
                    f"tier {spec.name}: {max_q} objects of up to {max_obj_bytes} bytes need "
                    f"{need_pages * self.page_bytes} bytes, device {spec.device} holds "
                    f"{dev.logical_pages * self.page_bytes}" + (f"; raise {key} or lower max_tokens" if key else ""))
            size = -(-need_pages * self.page_bytes // GiB) * GiB
            while need_pages > dev.logical_pages:
                dev = cls.from_params(mine + [f"{key}={size}"])
                self.flush_pages, need_pages = needs(dev)
                size *= 2
        self.dev = dev
        self.config = dev.config()
        if spec.written:
            dev.precondition(min(1.0, (need_pages - self.flush_pages + 1) / dev.logical_pages))
        self.flush_base = need_pages - self.flush_pages
        self._prepare: dict[str, Callable[[dict], None]] = {"none": lambda ops: None, "hit": self._warm,
                                                            "miss": self._flush}
        self._prepare[spec.cache]  # a tier row with an unknown cache mode fails here, not mid-sweep

    @staticmethod
    def _group_value(dev: Any, key: str) -> int:
        """The device's value of ``key``: its own resolved attribute when it has one (cxl-ssd's cache_bytes,
        where the parameter's 0 means 1/20 of the flash), else the parameter."""
        if isinstance(getattr(dev, key, None), int):
            return int(getattr(dev, key))
        for group in dev.params.values():
            if hasattr(group, key):
                return int(getattr(group, key))
        raise KvbedError(f"device {dev.name} has no parameter {key}")

    def _warm(self, ops: dict) -> None:
        self.dev.submit(ops)

    def _flush(self, ops: dict) -> None:
        from devicemodels.base import OP_READ, op_batch

        self.dev.submit(op_batch(np.array([OP_READ]), np.array([self.flush_base]), np.array([self.flush_pages])))

    def load_ns(self, obj_bytes: int, q: int) -> int:
        from devicemodels.base import OP_READ, op_batch

        pages = -(-obj_bytes // self.page_bytes)
        ops = op_batch(np.full(q, OP_READ), np.arange(q, dtype=np.int64) * pages, np.full(q, pages))
        self._prepare[self.spec.cache](ops)
        self.dev.reset_counters()
        return int(self.dev.submit(ops).done_ns.max())


# --- the sweep ---------------------------------------------------------------------------------------------

def size_grid(lo: int, hi: int, per_decade: int) -> np.ndarray:
    """Log-spaced integer sizes from lo to hi inclusive (duplicates after rounding dropped)."""
    n = max(2, int(math.ceil(math.log10(hi / lo) * per_decade)) + 1) if hi > lo else 1
    return np.unique(np.round(np.logspace(math.log10(lo), math.log10(hi), n)).astype(np.int64).clip(lo, hi))


def find_crossover(grid: np.ndarray, load: Callable[[int], int], recompute: Callable[[int], int]
                   ) -> tuple[int | None, str]:
    """Smallest n in [grid[0], grid[-1]] at and beyond which load(n) <= recompute(n) on the grid, refined by
    bisection between the two grid points that bracket the last change. Returns (n*, verdict)."""
    wins = [load(int(n)) <= recompute(int(n)) for n in grid]
    if all(wins):
        return None, "always load"
    if not wins[-1]:
        return None, "always recompute"
    last_loss = max(i for i, w in enumerate(wins) if not w)
    lo, hi = int(grid[last_loss]), int(grid[last_loss + 1])  # load loses at lo, wins at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if load(mid) <= recompute(mid):
            hi = mid
        else:
            lo = mid
    return hi, "crossover"


def verdict_text(row: dict[str, Any]) -> str:
    """A crossover row as a table cell: ``>= n tok``, ``always load`` or ``always recompute``."""
    n = row["crossover_tokens"]
    return f">= {n} tok" if n is not None else row["verdict"]


def run_crossover(p: CrossoverParams, cost_pairs: list[str] = (), device_pairs: list[str] = (),
                  log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The whole sweep: crossover rows, curves (load and recompute per grid size) and skipped tiers."""
    from devicemodels import DEVICES

    p = p.validate()
    models, accs, qds, ratio = p.model_names(), p.accelerator_names(), p.qds(), p.stored_ratio()
    costs = {(m, a): cost_params(p, m, a, list(cost_pairs)) for m in models for a in accs}
    grid = size_grid(p.min_tokens, p.max_tokens, p.points_per_decade)
    bpt = {m: costs[(m, accs[0])].bytes_per_token for m in models}
    max_obj = int(math.ceil(p.max_tokens * max(bpt.values()) * ratio))
    explicit = p.tiers.strip().lower() != "all"
    rows, curves, skipped, tier_info = [], [], [], {}
    used_devices: set[str] = set()
    for tname in p.tier_names():
        spec = TIERS[tname]
        if spec.device is not None and spec.device not in DEVICES:
            msg = f"device model {spec.device!r} is not in this build (devices: {', '.join(DEVICES.names())})"
            if explicit:
                raise KvbedError(f"tier {tname}: {msg}")
            skipped.append({"tier": tname, "reason": msg})
            log(f"skipped tier {tname}: {msg}")
            continue
        if spec.device is None:
            loader: Any = RemoteLoader(p)
        else:
            loader = DeviceLoader(spec, list(device_pairs), max_obj, max(qds))
            used_devices.add(spec.device)
        tier_info[tname] = {"device": spec.device or "analytic", "about": spec.about, "config": loader.config}
        memo: dict[tuple[int, int], int] = {}

        def device_ns(n: int, q: int, m: str) -> int:
            obj = int(math.ceil(n * bpt[m] * ratio))
            if (q, obj) not in memo:
                memo[(q, obj)] = loader.load_ns(obj, q)
            return memo[(q, obj)]

        for m in models:
            for q in qds:
                def load(n: int, q: int = q, m: str = m) -> int:
                    extra = 0 if p.kind == "exact" else costs[(m, accs[0])].decompress_ns(q * n * bpt[m])
                    return device_ns(n, q, m) + extra

                for a in accs:
                    c = costs[(m, a)]
                    rec = lambda n, c=c, q=q: c.recompute_ns(q * n)  # noqa: E731
                    n_star, verdict = find_crossover(grid, load, rec)
                    lo, hi = int(grid[0]), int(grid[-1])
                    prof = c.profile()
                    rows.append({
                        "tier": tname, "device": spec.device or "analytic", "model": m, "accelerator": a,
                        "tp": prof.tp if prof else None, "qd": q, "kind": p.kind,
                        "bytes_per_token": bpt[m], "prefill_tokens_per_s": c.tokens_per_s(),
                        "breakeven_bytes_per_s": c.breakeven_bytes_per_s(),
                        "crossover_tokens": n_star,
                        "crossover_bytes": None if n_star is None else n_star * bpt[m],
                        "verdict": verdict,
                        "min_tokens": lo, "max_tokens": hi,
                        "load_ns_at_min": load(lo), "recompute_ns_at_min": rec(lo),
                        "load_ns_at_max": load(hi), "recompute_ns_at_max": rec(hi),
                        # what the tier delivered for the largest objects (stored bytes / device time)
                        "load_bytes_per_s_at_max": q * math.ceil(hi * bpt[m] * ratio) * 1e9 / max(1, device_ns(hi, q, m)),
                    })
                    for n in grid.tolist():
                        curves.append({"tier": tname, "model": m, "accelerator": a, "qd": q, "tokens": n,
                                       "bytes": n * bpt[m], "load_ns": load(n), "recompute_ns": rec(n)})
        log(f"tier {tname}: {len(memo)} load measurements")
    unused = [kv for kv in device_pairs if not any(_takes(DEVICES.get(d).param_classes, kv) for d in used_devices)]
    if unused:
        from kvbed.core.params import unknown_in_groups

        classes = {"crossover": CrossoverParams, "cost": CostParams,
                   **{f"{g}@{d}": c for d in used_devices for g, c in DEVICES.get(d).param_classes.items()}}
        labels = {g: f"device {g.partition('@')[2]}" if "@" in g else g for g in classes}
        key = unused[0].split("=", 1)[0].strip().replace("-", "_").rpartition(".")[2]
        raise KvbedError(unknown_in_groups("--param", key, classes, labels))
    return {
        "config": {"crossover": to_dict(p), "cost_overrides": list(cost_pairs),
                   "device_overrides": list(device_pairs), "grid_tokens": grid.tolist()},
        "tiers": tier_info, "skipped": skipped, "crossover": rows, "curves": curves,
    }



# --- outputs -----------------------------------------------------------------------------------------------

CROSSOVER_COLUMNS = ("tier", "device", "model", "accelerator", "tp", "qd", "kind", "bytes_per_token",
                     "prefill_tokens_per_s", "breakeven_bytes_per_s", "crossover_tokens", "crossover_bytes",
                     "verdict", "min_tokens", "max_tokens", "load_ns_at_min", "recompute_ns_at_min",
                     "load_ns_at_max", "recompute_ns_at_max", "load_bytes_per_s_at_max")
CURVE_COLUMNS = ("tier", "model", "accelerator", "qd", "tokens", "bytes", "load_ns", "recompute_ns")


def _write_csv(path: Path, columns: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    from kvbed.core.atomicio import atomic_path

    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if r[k] is None else r[k]) for k in columns})


def summary_json(result: dict[str, Any]) -> dict[str, Any]:
    """crossover.json (and ``--json``): the configuration and rows, the kvbed version, and ``incomplete`` (false:
    an interrupted write of the outputs sets it, :func:`mark_incomplete`)."""
    from kvbed.core.version import __version__

    return {"kvbed_version": __version__, **{k: v for k, v in result.items() if k != "curves"}, "incomplete": False}


def write_outputs(result: dict[str, Any], out: Path, interrupt: Any = None) -> list[Path]:
    """crossover.csv, curves.csv and crossover.json (the plot is drawn from them by the testbed:
    testbed.crossover_plot).

    ``interrupt`` (testbed.interrupt.Interrupt): after a Ctrl-C each file at hand is finished and
    crossover.json says ``"incomplete": true`` and where it was interrupted."""
    from kvbed.core.atomicio import write_json

    stopped = interrupt if interrupt is not None else (lambda: False)
    if interrupt is not None:
        interrupt.enter("writing results")
    out.mkdir(parents=True, exist_ok=True)
    _write_csv(out / "crossover.csv", CROSSOVER_COLUMNS, result["crossover"])
    _write_csv(out / "curves.csv", CURVE_COLUMNS, result["curves"])
    write_json(out / "crossover.json", summary_json(result))
    if stopped():
        mark_incomplete(out, interrupt.phase)
    return [out / "crossover.csv", out / "curves.csv", out / "crossover.json"]


def mark_incomplete(out: Path, phase: str) -> None:
    """crossover.json says the outputs were interrupted while ``phase``."""
    import json

    from kvbed.core.atomicio import write_json

    doc = json.loads((out / "crossover.json").read_text())
    write_json(out / "crossover.json", {**doc, "incomplete": True, "interrupted": phase})
