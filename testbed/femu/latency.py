"""Per-write latency on FEMU and on the model, same command stream (issue 24).

FEMU's guest (the kvbed agent) runs one op at a time: it issues op i+1 once op i has completed and
it has prepared the next buffer, a closed loop at queue depth 1 whose gaps (the guest's "think time")
are the guest's own. A FEMU run recorded here keeps, per phase, every op's guest issue time and
guest-measured latency, so the gap before each op is known: ``gap[i] = issue[i] - issue[i-1] - lat[i-1]``.

The model can take that stream three ways:

- open loop (``scripts/bench_femu.py``'s way): arrivals = FEMU's guest issue times, whatever the model's
  own latency was for the op before;
- closed loop (:func:`replay_closed`): op i+1 arrives the guest's gap after the model completed op i;
- closed loop with delivery delay: as closed, each completion reaching the guest a delay later, drawn
  from the delays FEMU's guest saw on the fill (:func:`delivery_delays`: sequential writes at queue
  depth 1 on idle dies, where FEMU's timing model gives every write the same latency, so what the guest
  saw beyond it is the emulator's: FEMU posts a completion when its poller next runs after the emulated
  time, under TCG on cores shared with the vCPU and the host's load).

GC is timed alike on both (hw/femu/bbssd/ftl-fdp.c with preset=femu): one background pass after each
command, its reads, programs and erases queued on each LUN's next-free time from the command's time
(FEMU charges them from the wall clock when the FTL thread runs the pass right after the command,
ftl-media.c:160); later host pages queue behind them. docs/guides/femu.md gives the figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from devicemodels.base import DEVICES
from testbed.femu import compare as C

#: the workloads of the latency comparison: ``small`` is test_femu_vm's device (256 MiB on 2 x 4 dies,
#: 4 MiB RUs, 25% OP, two PI handles; ~1 min under TCG), the others bench_femu's
SPECS: dict[str, C.Spec] = {
    "small": C.Spec("uniform", 3, ("logical_bytes=256MiB", "channels=2", "dies_per_channel=4", "pages_per_block=128",
                                   "ru_bytes=4MiB", "op_ratio=0.25", "nruh=2", "ruh_type=persistently"), (90, 95),
                    logical_pages=65536),
    **C.WORKLOADS,
}
QS = (50, 90, 99, 99.9)
#: "no channel time": FEMU's bbssd gates each NAND op on its LUN only (ftl-media.c bb_nand_media_init:
#: channel_mode NAND_CH_OFF), so ch_xfer_lat is charged nowhere; the model's xfer at this rate is 1 ns
NO_CHANNEL = "channel_bytes_per_s=4096000000000"


@dataclass
class FemuRun:
    """One FEMU run's per-op record: per phase, guest issue times (from the phase's first op) and
    guest-measured latencies, ns; the phase's host wall seconds; FEMU's FDP figures."""

    workload: str
    issue_ns: dict[str, np.ndarray]
    lat_ns: dict[str, np.ndarray]
    wall_s: dict[str, float]
    figures: dict[str, Any] = field(default_factory=dict)
    #: how FEMU ran: the nice value of its threads (None: as started), the host's load average before/after
    host: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_run_femu(cls, workload: str, r: dict[str, Any], *, nice: int | None = None,
                      load: Any = None) -> "FemuRun":
        figs = {k: {kk: vv for kk, vv in v.items()} for k, v in r["phases"].items()}
        return cls(workload, dict(r["arrivals"]), dict(r["lat_ns"]),
                   {k: float(v["seconds"]) for k, v in r["phases"].items()}, figs,
                   {"nice": nice, "loadavg_after": load})

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "wall_s": self.wall_s, "figures": self.figures, "host": self.host,
                "issue_ns": {k: v.tolist() for k, v in self.issue_ns.items()},
                "lat_ns": {k: v.tolist() for k, v in self.lat_ns.items()}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "FemuRun":
        arr = lambda m: {k: np.asarray(v, np.int64) for k, v in m.items()}  # noqa: E731
        return cls(d["workload"], arr(d["issue_ns"]), arr(d["lat_ns"]), d["wall_s"], d.get("figures", {}),
                   d.get("host", {}))


def renice(pid: int, nice: int) -> None:
    """Every thread of process ``pid`` (FEMU's QEMU: vCPU, pollers, FTL thread) to ``nice``."""
    import os

    for tid in os.listdir(f"/proc/{pid}/task"):
        os.setpriority(os.PRIO_PROCESS, int(tid), nice)


def loadavg() -> list[float]:
    import os

    return [round(x, 2) for x in os.getloadavg()]


def guest_gaps(issue: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """The guest's time between completing op i-1 and issuing op i (0 for the first op), ns; clipped at 0
    (the guest measures latency around the ioctl, so a gap is never negative beyond clock noise)."""
    g = np.zeros(len(issue), np.int64)
    if len(issue) > 1:
        g[1:] = issue[1:] - issue[:-1] - lat[:-1]
    return np.maximum(g, 0)


def replay_closed(dev, ops: dict[str, np.ndarray], gaps: np.ndarray, t0: int,
                  delay: np.ndarray | None = None) -> np.ndarray:
    """The guest's loop on the model: op i arrives ``gaps[i]`` after the guest saw op i-1 complete (op 0
    at ``t0 + gaps[0]``). The guest sees op i complete ``delay[i]`` after the model completed it (the
    emulator's delivery of the completion; 0 without ``delay``). Returns each op's arrival, the model's
    completion and the guest's (n x 3)."""
    n = len(ops["op"])
    out = np.empty((n, 3), np.int64)
    t = t0
    one = {k: np.ascontiguousarray(v) for k, v in ops.items()}
    for i in range(n):
        a = t + int(gaps[i])
        b = {k: v[i:i + 1] for k, v in one.items()}
        b["arrival_ns"] = np.array([a], np.int64)
        d = int(dev.submit(b).done_ns[0])
        t = d + (int(delay[i]) if delay is not None else 0)
        out[i] = (a, d, t)
    return out


def replay_open(dev, ops: dict[str, np.ndarray], issue: np.ndarray, t0: int) -> np.ndarray:
    o = dict(ops)
    o["arrival_ns"] = np.ascontiguousarray(issue, np.int64) + t0
    d = dev.submit(o).done_ns
    return np.stack([o["arrival_ns"], d, d], axis=1)


def delivery_delays(run: "FemuRun", spec: C.Spec, phases: list[C.Phase], phase: str = "fill") -> np.ndarray:
    """What FEMU's guest saw beyond the device's own latency on ``phase`` (the fill: sequential writes at
    queue depth 1 on empty dies, no GC, so FEMU's timing model gives every write the same latency,
    ftl-fdp.c ssd_stream_write: max over its pages of max(stime, LUN free) + pg_wr_lat, as the model
    does): FEMU's guest latency minus the model's on the same op in the guest's loop, per op, ns."""
    dev = DEVICES.get("fdp").from_params([*spec.femu_params(), NO_CHANNEL])
    t0 = 0
    for ph in phases:
        issue, lat = run.issue_ns[ph.name], run.lat_ns[ph.name]
        ad = replay_closed(dev, ph.ops, guest_gaps(issue, lat), t0)
        if ph.name == phase:
            return np.maximum(lat - (ad[:, 1] - ad[:, 0]), 0)
        t0 = int(ad[-1, 2]) + 1
    raise KeyError(phase)


def lat_stats(lat: np.ndarray) -> dict[str, float]:
    """Percentiles, max and mean of per-op latencies, in ms."""
    lat = np.asarray(lat, np.float64)
    out = {f"p{q:g}": float(np.percentile(lat, q)) / 1e6 for q in QS}
    out["max"] = float(lat.max()) / 1e6
    out["mean"] = float(lat.mean()) / 1e6
    return out


def model_side(params: list[str], phases: list[C.Phase], run: FemuRun, loop: str,
               delays: np.ndarray | None = None, seed: int = 0) -> dict[str, Any]:
    """The model on the run's stream, ``loop`` = open | closed | closed-delay (closed, each completion
    reaching the guest a delay later, drawn with ``seed`` from ``delays``); per phase (n x 3) arrival,
    model completion, guest completion."""
    dev = DEVICES.get("fdp").from_params(list(params))
    rng = np.random.default_rng(seed)
    t0 = 0
    per: dict[str, np.ndarray] = {}
    for ph in phases:
        issue, lat = run.issue_ns[ph.name], run.lat_ns[ph.name]
        if loop == "open":
            ad = replay_open(dev, ph.ops, issue, t0)
        else:
            d = rng.choice(delays, len(lat)) if loop == "closed-delay" else None
            ad = replay_closed(dev, ph.ops, guest_gaps(issue, lat), t0, d)
        per[ph.name] = ad
        t0 = int(ad[:, 1:].max()) + 1
    return {"per_op": per, "counters": dev.counters()}


SIDES = {  # name: (extra params, loop)
    "open": ((), "open"),
    "open-noch": ((NO_CHANNEL,), "open"),
    "closed": ((), "closed"),
    "closed-noch": ((NO_CHANNEL,), "closed"),
    "closed-delay": ((), "closed-delay"),
}


def compare(spec: C.Spec, phases: list[C.Phase], run: FemuRun, sides=tuple(SIDES),
            phase: str = "overwrite") -> dict[str, Any]:
    """FEMU's and the model's write latency figures over ``phase`` (ms), with each side's span (s: the
    phase's first issue to its last completion) and, for FEMU, the host's wall seconds over the phase."""
    issue, lat = run.issue_ns[phase], run.lat_ns[phase]
    span = float(issue[-1] + lat[-1] - issue[0]) / 1e9
    gaps = guest_gaps(issue, lat)
    res: dict[str, Any] = {"workload": run.workload, "phase": phase, "ops": int(len(lat)),
                           "femu": {**lat_stats(lat), "span_s": span, "host_wall_s": run.wall_s.get(phase),
                                    "gap_ms": {"p50": float(np.percentile(gaps, 50)) / 1e6,
                                               "mean": float(gaps.mean()) / 1e6}},
                           "femu_figures": run.figures.get(phase, {})}
    delays = delivery_delays(run, spec, phases)
    res["femu"]["fill_delay_ms"] = {k: float(np.percentile(delays, q)) / 1e6 for k, q in (("p50", 50), ("p90", 90))}
    for name in sides:
        extra, loop = SIDES[name]
        m = model_side([*spec.femu_params(), *extra], phases, run, loop, delays)
        ad = m["per_op"][phase]
        ml = ad[:, 2] - ad[:, 0]
        res[name] = {**lat_stats(ml), "span_s": float(ad[-1, 2] - ad[0, 0]) / 1e9,
                     "corr_with_femu": float(np.corrcoef(ml, lat)[0, 1]) if len(ml) > 2 else None}
    return res


def table(res: dict[str, Any]) -> str:
    cols = ["side", *(f"p{q:g} ms" for q in QS), "max ms", "mean ms", "span s", "corr"]
    rows = [cols]
    for side in ("femu", *SIDES):
        if side not in res:
            continue
        r = res[side]
        rows.append([side, *(f"{r[f'p{q:g}']:.2f}" for q in QS), f"{r['max']:.2f}", f"{r['mean']:.2f}",
                     f"{r['span_s']:.1f}", "" if side == "femu" else f"{r['corr_with_femu']:.2f}"])
    w = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    f = res["femu"]
    head = (f"{res['workload']}, {res['phase']} phase, {res['ops']} writes; FEMU guest gap p50 {f['gap_ms']['p50']:.2f} ms, "
            f"mean {f['gap_ms']['mean']:.2f} ms; guest span {f['span_s']:.1f} s vs host wall {f['host_wall_s'] or 0:.1f} s;"
            f" fill: FEMU's guest latency beyond the device's p50 {f['fill_delay_ms']['p50']:.2f} ms,"
            f" p90 {f['fill_delay_ms']['p90']:.2f} ms")
    return head + "\n" + "\n".join("  ".join(c.ljust(x) for c, x in zip(r, w)) for r in rows)
