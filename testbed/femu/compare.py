"""FEMU and the model on the same command stream: workloads, a FEMU runner and a model runner.

Why a harness of its own: a replay turns a trace into ops through hint policies and a layout, which
hides the plain workloads FTL figures are usually quoted for. Here a workload is a list of phases,
each an op batch in the model's contract (pages of ``page_bytes``, placement ids); the very same
arrays go to a FEMU guest (through the in-guest agent, :class:`testbed.vm.target.VmTarget`) and to
the model, and each phase is measured apart (FEMU's FDP statistics log before/after it, the
model's counters before/after it), so a fill phase does not dilute the WAF of an overwrite phase.

Workloads (all 1 MiB aligned objects unless said otherwise):

- ``uniform``: fill the logical space sequentially on placement id 0, then ``writes_x`` times the
  logical space of uniformly random overwrites on placement id 0;
- ``hotcold``: the first ``hot_frac`` of the space is hot and written with placement id 0, the rest
  cold with id 1; fill both, then overwrites go to a hot object with probability ``hot_share``.

The model's arrival times are FEMU's guest issue times when FEMU ran (the same stream at the same
pace: the latency tails compare), else one object per ``pace_ns``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from devicemodels.base import DEVICES, OP_WRITE, op_batch

MiB = 1 << 20


@dataclass
class Phase:
    name: str
    ops: dict[str, np.ndarray]


@dataclass
class Workload:
    name: str
    params: list[str]  # device parameters (k=v) this workload is defined on (FEMU and the model)
    phases: list[Phase]
    note: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


def _writes(lba: np.ndarray, npages: int, pid: np.ndarray | int = 0, pace_ns: int = 0) -> dict[str, np.ndarray]:
    n = len(lba)
    pid_col = np.broadcast_to(np.asarray(pid, np.int16), (n,)).copy()
    return op_batch(np.full(n, OP_WRITE, np.int8), lba, np.full(n, npages, np.int32), pid_col,
                    np.arange(n, dtype=np.int64) * pace_ns)


def uniform(logical_pages: int, *, obj_pages: int = 256, writes_x: float = 3.0, seed: int = 0,
            pace_ns: int = 10_000_000) -> list[Phase]:
    """Sequential fill then uniformly random aligned overwrites, all on placement id 0."""
    nobj = logical_pages // obj_pages
    rng = np.random.default_rng(seed)
    fill = np.arange(nobj, dtype=np.int64) * obj_pages
    over = rng.integers(0, nobj, int(round(writes_x * nobj)), dtype=np.int64) * obj_pages
    return [Phase("fill", _writes(fill, obj_pages, 0, pace_ns)), Phase("overwrite", _writes(over, obj_pages, 0, pace_ns))]


def hotcold(logical_pages: int, *, obj_pages: int = 256, writes_x: float = 3.0, hot_frac: float = 0.2,
            hot_share: float = 0.8, seed: int = 0, pace_ns: int = 10_000_000) -> list[Phase]:
    """Hot objects (first ``hot_frac`` of the space, placement id 0) get ``hot_share`` of the overwrites;
    cold ones (id 1) the rest."""
    nobj = logical_pages // obj_pages
    nhot = max(1, int(round(hot_frac * nobj)))
    rng = np.random.default_rng(seed)
    fill = np.arange(nobj, dtype=np.int64)
    n = int(round(writes_x * nobj))
    hot = rng.random(n) < hot_share
    obj = np.where(hot, rng.integers(0, nhot, n), rng.integers(nhot, nobj, n)).astype(np.int64)
    pid = lambda o: (o >= nhot).astype(np.int16)  # noqa: E731
    return [Phase("fill", _writes(fill * obj_pages, obj_pages, pid(fill), pace_ns)),
            Phase("overwrite", _writes(obj * obj_pages, obj_pages, pid(obj), pace_ns))]


#: the comparison's device: 1 GiB on 4 x 4 dies, 128-page blocks: 8 MiB reclaim units (one line, as
#: FEMU's RU is), so 141-160 of them: small enough for FEMU under TCG to run in about a minute
GEO = ["logical_bytes=1GiB", "channels=4", "dies_per_channel=4", "pages_per_block=128", "ru_bytes=8MiB"]


@dataclass(frozen=True)
class Spec:
    """One workload of the comparison: its kind, size and the FDP device it runs on (``params``: the
    geometry and RUH setup both sides share; ``pct``: FEMU's gc_thres_pcent/gc_thres_pcent_high)."""

    kind: str  # uniform | hotcold
    writes_x: float
    params: tuple[str, ...]
    pct: tuple[int, int]
    default_extra: tuple[str, ...] = ()  # the model's own setting where FEMU's is not (II: one GC RU)
    logical_pages: int = 262144

    def phases(self, seed: int = 0) -> list[Phase]:
        fn = uniform if self.kind == "uniform" else hotcold
        return fn(self.logical_pages, writes_x=self.writes_x, seed=seed)

    def femu_params(self) -> list[str]:
        """FEMU's device (and the model with FEMU's behaviour): the thresholds as FEMU's percents."""
        return [*self.params, "preset=femu", f"gc_bg_used_pct={self.pct[0]}", f"gc_fg_used_pct={self.pct[1]}"]

    def default_params(self) -> list[str]:
        """The model's own FTL with the closest knobs it had before the FEMU preset (as in
        ../shared/notes/femu-facts.md): GC when a write opens a line, at FEMU's RU counts."""
        lines = DEVICES.get("fdp").from_params([*self.params, *self.default_extra, "timing=false"]).geo.lpr
        bg, fg = (int((1 - p / 100.0) * lines) for p in self.pct)
        return [*self.params, *self.default_extra, "gc_bg_trigger=threshold", f"gc_bg_free_lines={bg}",
                f"gc_fg_free_lines={fg}"]


WORKLOADS: dict[str, Spec] = {
    "uniform-op25": Spec("uniform", 3, (*GEO, "op_ratio=0.25", "nruh=4", "ruh_type=persistently"), (90, 95)),
    # at 10% OP FEMU's 90% threshold would hold more RUs free than there is spare: 97/98 (4 and 2 RUs)
    "uniform-op10": Spec("uniform", 2, (*GEO, "op_ratio=0.10", "nruh=2", "ruh_type=persistently"), (97, 98)),
    "hotcold-pi": Spec("hotcold", 3, (*GEO, "op_ratio=0.25", "nruh=2", "ruh_type=persistently"), (90, 95)),
    # FEMU's II: isolation_mode=1 makes the last RUH (the cold one here) initially isolated
    "hotcold-ii": Spec("hotcold", 3, (*GEO, "op_ratio=0.25", "nruh=2", "ruh_type=last-initially",
                                      "ii_gc_dest=last-ruh"), (90, 95),
                       default_extra=("ruh_type=initially", "ii_gc_dest=gc-ru")),
}


def _phase_figures(host: int, media: int, erased: int, erases: int, seconds: float) -> dict[str, Any]:
    return {"host_bytes_written": host, "media_bytes_written": media, "media_bytes_erased": erased,
            "erases": erases, "waf": media / host if host else None, "seconds": seconds}


def run_model(params: list[str], phases: list[Phase], *, arrivals: dict[str, np.ndarray] | None = None,
              device: str = "fdp") -> dict[str, Any]:
    """The model (``device`` with ``params``) on ``phases``; per phase: host/media/erased bytes, erases
    (in blocks of pages_per_block x page_bytes), WAF, write latency percentiles, wall seconds."""
    dev = DEVICES.get(device).from_params(list(params))
    pb, block = dev.page_bytes, dev.flash.pages_per_block * dev.page_bytes
    out: dict[str, Any] = {"params": list(params), "phases": {}}
    t_off = 0
    for ph in phases:
        ops = dict(ph.ops)
        if arrivals and ph.name in arrivals:
            ops["arrival_ns"] = np.ascontiguousarray(arrivals[ph.name], np.int64)
        ops["arrival_ns"] = ops["arrival_ns"] + t_off
        c0 = dev.counters()
        t0 = time.perf_counter()
        done = dev.submit(ops).done_ns
        dt = time.perf_counter() - t0
        c1 = dev.counters()
        d = {k: c1[k] - c0[k] for k in c1}
        fig = _phase_figures(d["host_pages_written"] * pb, d["media_pages_written"] * pb,
                             d["block_erases"] * block, d["block_erases"], dt)
        lat = done - ops["arrival_ns"]
        fig["write_lat_ns"] = {f"p{q:g}": int(np.percentile(lat, q)) for q in (50, 99, 99.9)} if len(lat) else {}
        fig["gc"] = {"fg_runs": d["gc_fg_runs"], "bg_runs": d["gc_bg_runs"], "pages_moved": d["gc_pages_moved"]}
        out["phases"][ph.name] = fig
        t_off = int(max(int(done.max()) if len(done) else 0, int(ops["arrival_ns"][-1]) if len(done) else 0)) + 1
    out["stats_free_lines"] = dev.stats()["gc"]["free_lines"]
    return out


def run_femu(params: list[str], phases: list[Phase], *, name: str = "femucmp", log: Callable[[str], None] = print,
             chunk_ops: int = 4096, mem: str = "mem_bytes=512MiB", mdts: str = "mdts_bytes=1MiB",
             keep_log: str | None = None, on_up: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """``phases`` on a FEMU guest started for the fdp device with ``params``; per phase FEMU's FDP
    statistics (delta), the guest's write latency percentiles and wall seconds; plus the FEMU argv,
    each phase's guest issue times (``arrivals``, for the model run) and the guest-measured latency of
    each op (``lat_ns``). ``on_up(vm)`` runs once the VM is up, before the first phase. The VM is taken
    down afterwards."""
    from testbed.vm.target import VmTarget
    from testbed.vm.vm import Vm

    t_boot = time.perf_counter()
    vm = Vm.up("fdp", name=name, overrides=[*params, mem, mdts], backend="femu", log=log, die_with_parent=True)
    out: dict[str, Any] = {"params": list(params), "phases": {}, "boot_s": time.perf_counter() - t_boot,
                           "argv_device": [a for a in vm.state.argv if a.startswith("femu")]}
    arrivals: dict[str, np.ndarray] = {}
    lats: dict[str, np.ndarray] = {}
    try:
        if on_up:
            on_up(vm)
        tg = VmTarget(vm, batch_ops=64, inflight=2, reply_timeout_s=600.0)
        block = tg.page_bytes * _pages_per_block(params)
        try:
            for ph in phases:
                s0 = tg.logs(["fdp_stats"])["fdp_stats"]
                h0 = tg.histograms().get("write", {}).get("buckets")
                t0 = time.perf_counter()
                n = len(ph.ops["op"])
                issue = np.empty(n, np.int64)
                lat = np.empty(n, np.int64)
                for a in range(0, n, chunk_ops):
                    b = min(n, a + chunk_ops)
                    comp = tg.submit({k: v[a:b] for k, v in ph.ops.items()})
                    bad = np.flatnonzero(comp.status != 0)
                    if len(bad):
                        raise RuntimeError(f"FEMU refused op {a + bad[0]} of {ph.name}: status {comp.status[bad[0]]}")
                    issue[a:b] = comp.guest_done_ns - comp.lat_ns
                    lat[a:b] = comp.lat_ns
                    if log and (b // chunk_ops) % 8 == 0:
                        log(f"  {ph.name}: {b}/{n} ops, {time.perf_counter() - t0:.0f} s")
                dt = time.perf_counter() - t0
                s1 = tg.logs(["fdp_stats"])["fdp_stats"]
                hist = tg.histograms().get("write", {})
                d = {k: int(s1[k]) - int(s0[k]) for k in s1}
                fig = _phase_figures(d["host_bytes_written"], d["media_bytes_written"], d["media_bytes_erased"],
                                     d["media_bytes_erased"] // block, dt)
                fig["write_lat_ns"] = _hist_delta_percentiles(h0, hist.get("buckets"))
                out["phases"][ph.name] = fig
                arrivals[ph.name] = issue - issue[0] if n else issue
                lats[ph.name] = lat
        finally:
            tg.close()
    finally:
        if keep_log:  # FEMU's own log (with FEMU_FDP_DEBUG=1 in the environment: every GC pass)
            import shutil

            shutil.copy(vm.state.file("qemu.log"), keep_log)
        vm.down()
    out["arrivals"] = arrivals
    out["lat_ns"] = lats
    return out


def _pages_per_block(params: list[str]) -> int:
    for p in params:
        k, _, v = p.partition("=")
        if k.strip() == "pages_per_block":
            return int(v)
    from devicemodels.params import FlashParams

    return FlashParams().pages_per_block


def _hist_delta_percentiles(b0, b1) -> dict[str, int]:
    """Write latency percentiles of one phase from the guest's cumulative ``[[bucket, count], ...]``."""
    from kvreplay.agent.hist import percentiles

    if not b1:
        return {}
    before = {int(i): int(c) for i, c in (b0 or [])}
    d = [[int(i), int(c) - before.get(int(i), 0)] for i, c in b1]
    ps = percentiles([x for x in d if x[1] > 0], [50, 99, 99.9])
    return {f"p{k}": int(v) for k, v in ps.items()}
