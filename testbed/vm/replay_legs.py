"""What a VM replay sends its ops to: :class:`VmReplayTarget`, the engine's target, which sends every op
segment to the guest agent and feeds the ops the guest completed to the device model and the cross-check
trackers (:mod:`testbed.vm.checks`); and its :class:`Leg` s, the stretches of the op stream on one QEMU
process each (a power-loss run has two).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from devicemodels.base import OP_WRITE, OP_ZONE_APPEND
from kvbed.core.errors import KvbedError
from testbed.vm import backends, checks
from testbed.vm.client import VmError
from testbed.vm.powerloss import GuestPowerLoss
from testbed.vm.target import VmCompletion, VmTarget


@dataclass
class Leg:
    """One stretch of the op stream on one QEMU process (a power-loss run has two: up to the kill, and after
    the restart): the device's log pages at its start and end, the trackers that predict them, and what the
    guest was sent and said."""

    name: str
    before: dict[str, Any]
    fdp: Any = None
    zns: Any = None
    ops: int = 0
    write_cmds: int = 0
    bytes_written: int = 0
    submit_s: float = 0.0  # host wall time in VmTarget.submit
    after: dict[str, Any] | None = None  # filled when the leg ends: log pages, histograms, agent counters
    hists: dict[str, Any] | None = None
    counters: dict[str, int] | None = None
    by_pid: dict[str, int] | None = None

    @classmethod
    def start(cls, name: str, tg: VmTarget, before: dict[str, Any]) -> "Leg":
        info = tg.info
        # QEMU's FDP counters follow the protocol (predicted exactly); FEMU's count flash (GC, erases)
        tracker = checks.FemuFdpTracker if backends.backend(tg.vm.backend).flash_stats else checks.FdpTracker
        return cls(name, before, fdp=tracker(before, info) if info.get("fdp") else None,
                   zns=checks.ZnsTracker(before["zone_report"], info) if info.get("zoned") else None)

    def end(self, tg: VmTarget) -> None:
        """What the guest says at the end of the leg (log pages first: their commands are not in the counters)."""
        self.after = tg.logs()
        self.hists = tg.histograms()
        self.counters = tg.counters()
        self.by_pid = tg.bytes_written_by_pid()


class VmReplayTarget:
    """The engine's target: ops to the guest, the completed ones to the model and the trackers."""

    def __init__(self, tg: VmTarget, model: Any, before: dict[str, Any], *, power: GuestPowerLoss | None = None,
                 on_kill: Callable[[], tuple[VmTarget, dict[str, Any]]] | None = None):
        self.tg = tg
        self.model = model
        self.power = power  # a power-loss run: the model first, the guest up to the kill point, then after it
        self.on_kill = on_kill
        self.wants_events = power is not None  # the engine adds row, object, src, trace time per op
        self.legs = [Leg.start("replay" if power is None else "before_power_loss", tg, before)]
        self.submit_s = 0.0
        self.failed: BaseException | None = None

    @property
    def leg(self) -> Leg:
        return self.legs[-1]

    @property
    def fdp(self) -> Any:
        return self.leg.fdp

    @property
    def zns(self) -> Any:
        return self.leg.zns

    @property
    def ops(self) -> int:
        return sum(leg.ops for leg in self.legs)

    @property
    def write_cmds(self) -> int:
        return sum(leg.write_cmds for leg in self.legs)

    @property
    def bytes_written(self) -> int:
        return sum(leg.bytes_written for leg in self.legs)

    @property
    def page_bytes(self) -> int:
        return self.model.page_bytes

    @property
    def logical_pages(self) -> int:
        return self.model.logical_pages

    @property
    def n_placement_ids(self) -> int:
        return self.model.n_placement_ids

    def submit(self, ops: dict[str, np.ndarray]) -> Any:
        if self.power is not None:
            return self._submit_power(ops)
        t0 = time.perf_counter()
        try:
            c = self.tg.submit(ops)
        except VmError as exc:
            self.submit_s += time.perf_counter() - t0
            self.failed = exc
            exc.partial = exc.partial if exc.partial is not None else VmCompletion.empty()
            self._feed(ops, exc.partial)
            raise
        self.submit_s += time.perf_counter() - t0
        self._feed(ops, c)
        return c

    def _submit_power(self, ops: dict[str, np.ndarray]) -> Any:
        """The model runs every op and its completions are the run's. Up to the kill point the guest gets what
        the model has on the media (GuestPowerLoss.before_kill); then the plug is pulled (``on_kill``: QEMU
        killed, restarted, scanned) and the guest gets every op after it, whole, on the restarted VM."""
        pw = self.power
        mc = self.model.submit({f: ops[f] for f in ("op", "lba", "npages", "pid", "arrival_ns")})
        if pw.fired:  # (nothing scans what is written after the restart: plain filler, as without a fault)
            self._send({k: ops[k] for k in ("op", "lba", "npages", "pid", "arrival_ns")})
            return mc
        send, beyond = pw.before_kill(ops, mc.done_ns)
        self._send(send)
        if beyond:
            self.pull_plug()
            post = ops["rel"] > pw.at_ns
            self._send({k: ops[k][post] for k in ("op", "lba", "npages", "pid", "arrival_ns")})
        return mc

    def pull_plug(self) -> None:
        """End the leg on the running guest, have the VM killed, restarted and scanned, start the next leg."""
        self.leg.end(self.tg)
        self.tg, before = self.on_kill()
        self.legs.append(Leg.start("after_restart", self.tg, before))

    def _send(self, ops: dict[str, np.ndarray]) -> None:
        if not len(ops["op"]):
            return
        t0 = time.perf_counter()
        try:
            c = self.tg.submit(ops)
        except VmError as exc:
            self.failed = exc
            exc.partial = VmCompletion.empty()  # the run's clock is the model's: nothing of it is known
            raise
        finally:
            self.submit_s += time.perf_counter() - t0
            self.leg.submit_s += time.perf_counter() - t0
        self._count(ops, c)

    def _count(self, ops: dict[str, np.ndarray], c: VmCompletion) -> int:
        """Trackers and counters see the ops the guest completed (a prefix of ``ops``); returns how many."""
        n = len(c)
        bad = np.flatnonzero(c.status != 0)
        k = int(bad[0]) if len(bad) else n
        leg = self.leg
        if leg.fdp:
            leg.fdp.feed(ops, c)
        if leg.zns:
            leg.zns.feed(ops, c)
        op = ops["op"][:k]
        w = (op == OP_WRITE) | (op == OP_ZONE_APPEND)
        leg.write_cmds += int(c.ncmds[:k][w].sum())
        leg.bytes_written += int(ops["npages"][:k][w].sum()) * self.page_bytes
        leg.ops += k
        return k

    def _feed(self, ops: dict[str, np.ndarray], c: VmCompletion) -> None:
        """The model and the trackers see exactly the ops the guest completed (a prefix of ``ops``)."""
        if len(c) == 0:
            return
        k = self._count(ops, c)
        if k:
            head = {f: ops[f][:k] for f in ("op", "lba", "npages", "pid", "arrival_ns")}
            try:
                self.model.submit(head)
            except KvbedError as exc:
                err = VmError(f"the {self.model.name} model refused an op the VM's device accepted: {exc}",
                              partial=c)
                self.failed = err
                raise err from None

    def counters(self) -> dict[str, int]:
        return self.model.counters()

    def stats(self) -> dict[str, Any]:
        return {"source": "model", **self.model.stats()}


def log_delta(before: dict | None, after: dict | None) -> dict[str, Any]:
    """What a log page's integer counters (SMART, FDP statistics) grew by between two reads ({} without both)."""
    if not before or not after:
        return {}
    return {k: after[k] - before[k] for k in after if isinstance(after.get(k), int) and isinstance(before.get(k), int)}
