"""Run a synthetic workload on a device model: fill, warm up, measure (``kvbed device run``).

The fill (one sequential pass) and warm-up (``warmup_x`` x capacity of the same
workload) are counted apart: counters, histograms and device clocks are reset
before the measured ``writes_x`` x capacity. The result is fio-shaped and
records the simulator's own speed (page programs per wall-clock second).
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from devicemodels.base import DEVICES
from devicemodels.workloads import WORKLOADS, WorkloadSpec
from kvbed.core.version import __version__
from kvbed.core.errors import KvbedError


def auto_iops(dev, bs_pages: int, load: float) -> float:
    """Op rate that keeps the dies of one write frontier ``load`` busy with host programs (WAF 1).

    The runner divides it by the WAF measured in the warm-up, so ``load`` is the share of the
    program bandwidth used by host writes plus GC copies; near 1 the device saturates and
    latencies grow without bound (as on a real drive written flat out)."""
    f = getattr(dev, "flash", None)
    if f is None:
        return 0.0
    per_page_ns = f.page_program_ns * f.nand_pages_per_page
    dies = getattr(dev, "write_dies", f.dies)  # one write frontier spans one line's dies
    return load * dies * 1e9 / per_page_ns / bs_pages


def run_synthetic(device: str, workload: str, *, overrides: Iterable[str] | dict = (), writes_x: float = 10.0,
                  warmup_x: float = 1.0, fill: bool = True, bs_pages: int = 1, read_frac: float = 0.0,
                  iops: float | None = None, load: float = 0.5, placement: str | None = None,
                  seed: int = 0, progress=None) -> dict[str, Any]:
    """Build ``device`` with ``overrides``, run ``workload`` and return the result dict."""
    if writes_x <= 0:
        raise KvbedError(f"--writes-x must be > 0, got {writes_x}")
    if warmup_x < 0:
        raise KvbedError(f"--warmup-x must be >= 0, got {warmup_x}")
    # (a workload takes rate 0 as "every op arrives at t=0": a saturated run, not what was asked)
    if iops is not None and not iops > 0:
        raise KvbedError(f"--iops must be > 0, got {iops:g}")
    if iops is None and not load > 0:
        raise KvbedError(f"--load must be > 0, got {load:g}")
    cls = DEVICES.get(device)
    wl_cls = WORKLOADS.get(workload)
    dev = cls.from_params(overrides)
    if placement is None:
        placement = "separate" if (workload == "hotcold" and dev.n_placement_ids > 1) else "mixed"
    L = dev.logical_pages

    def spec(x: float, s: int, rate: float) -> WorkloadSpec:
        return WorkloadSpec(host_pages=max(1, int(round(x * L))), bs_pages=bs_pages, read_frac=read_frac,
                            iops=rate, placement=placement, seed=s)

    t0 = time.perf_counter()
    programs = 0
    warm_waf = 1.0
    if fill or warmup_x > 0:
        wl = wl_cls(dev, spec(max(warmup_x, 1e-9), seed + 1, 0.0))
        with dev.untimed():
            if fill:
                for b in wl.fill_batches():
                    dev.submit(b)
            c0 = dev.counters()
            if warmup_x > 0:
                for b in wl.batches():
                    dev.submit(b)
        c = dev.counters()
        programs += c.get("media_pages_written", 0)
        dh = c.get("host_pages_written", 0) - c0.get("host_pages_written", 0)
        if warmup_x > 0 and dh > 0:
            warm_waf = (c.get("media_pages_written", 0) - c0.get("media_pages_written", 0)) / dh
        dev.reset_counters()
    rate = auto_iops(dev, bs_pages, load) / warm_waf if iops is None else iops
    t_meas = time.perf_counter()
    wl = wl_cls(dev, spec(writes_x, seed + 2, rate))
    first_arrival = last_done = None
    for b in wl.batches():
        c = dev.submit(b)
        if first_arrival is None:
            first_arrival = int(b["arrival_ns"][0])
        last_done = int(c.done_ns.max()) if last_done is None else max(last_done, int(c.done_ns.max()))
        if progress is not None:
            progress(dev.counters().get("host_pages_written", 0), wl.spec.host_pages)
    t1 = time.perf_counter()
    c = dev.counters()
    measured_programs = c.get("media_pages_written", 0)
    programs += measured_programs
    stats = dev.stats()
    sim_ns = (last_done - first_arrival) if stats.get("timing") and last_done is not None else 0
    return {
        "tool": "kvbed device run",
        "kvbed_version": __version__,
        "config": {
            "device": device, "workload": workload, "writes_x": writes_x, "warmup_x": warmup_x, "fill": fill,
            "bs_pages": bs_pages, "read_frac": read_frac, "iops": rate, "load": load if iops is None else None,
            "warmup_waf": warm_waf,
            "placement": placement, "seed": seed, "params": dev.config(),
        },
        "job": {
            "jobname": workload,
            **stats,
            "simulated_time_ns": sim_ns,
        },
        "sim": {
            "wall_s": t1 - t0,
            "measured_wall_s": t1 - t_meas,
            "page_programs": programs,
            "page_programs_per_s": measured_programs / (t1 - t_meas) if t1 > t_meas else 0.0,
        },
    }
