"""``kvbed replay --target vm``: the replay's ops through a guest kernel onto QEMU's emulated device.

The trace side is the embedded replay's own (:class:`kvreplay.replay.engine.Replay`: same scan, hints,
layout and op segments); only the target changes:

- :class:`~testbed.vm.replay_legs.VmReplayTarget` sends every op segment to the guest agent
  (:class:`~testbed.vm.target.VmTarget`: batches of ``batch_ops`` with at most ``inflight`` outstanding),
  then feeds the ops that completed to a device model with the VM's own parameters - QEMU models the NVMe
  protocol, not flash, so WAF, GC and erases come from the model - and to the cross-check trackers of
  :mod:`testbed.vm.checks`;
- :class:`VmReplay` runs the whole thing on an attached VM (``--vm NAME``: its namespace size and
  FDP/ZNS geometry were fixed at ``kvbed up`` and are read from its recorded state; a trace whose live
  data cannot fit is refused, unless ``strict_capacity=false`` lets the layout evict) or on an
  ephemeral VM sized from the trace, started after the scan and always torn down (its namespace on
  QEMU's ``null-co`` driver, so a large namespace costs no host disk; ``--param backing=file`` keeps
  the data for read round trips);
- afterwards it collects the guest's latency histograms and the device's log pages (SMART, FDP
  statistics, RUH status, zone report) into ``vm.json``, runs the cross-checks and adds ``sources``
  (where every figure in result.json comes from), ``target`` and ``vm`` sections to result.json.

Where figures come from (``result["sources"]``, also per job):

========================  ==============================================================
latency (``lat_ns``)      ``guest``: each op's NVMe commands timed around their ioctls by
                          the agent; an op completes at its arrival + that latency (the
                          agent issues one command at a time; the VM is not paced)
host bytes written        ``device log``: FDP statistics HBMW (fdp); ``guest`` (the agent's
                          byte counter, checked against SMART) for conv, zns, cxl
WAF, media bytes, GC,     ``model``: the device model of the VM's parameters, fed with
erases, wear, per-RUH     exactly the ops the guest completed
zone resets, host GC      ``layout``: the replay's zone layout (host-side, as embedded)
========================  ==============================================================

On a backend whose device counts flash (FEMU, :mod:`testbed.vm.backends`), an FDP VM's WAF, media
bytes and erases come from its FDP statistics (``device log (FEMU FDP statistics)``), and
``vm.device_vs_model`` puts the model's figures for the same completed command stream beside them
with their ratio; the FDP cross-checks are FEMU's (:class:`~testbed.vm.checks.FemuFdpTracker`).

With ``--fault power-loss@T`` (:mod:`testbed.vm.powerloss`) the ephemeral VM's namespace is file-backed and
every user write carries an object payload; the model runs every op first and its completions are the run's
(``lat_ns``: ``model``); the guest gets what the model has on the media at T, QEMU is SIGKILLed, restarted on
the same disks and scanned, and the replay goes on on the restarted VM. Each QEMU process is a
:class:`~testbed.vm.replay_legs.Leg` with its own log pages and trackers; the cross-checks are per leg
(``before_power_loss.*``, ``after_restart.*``) plus ``power_loss_scan_vs_model``.

A failed cross-check is never silent: result.json has ``"cross_checks_ok": false`` and the CLI prints
one ``kvbed: cross-check FAILED`` line per failed check and exits with status 1 (the run directory is
complete). A VM that dies, an agent that stops answering or a device that refuses an op stops the run:
the completed part is kept (result marked incomplete, ``error`` set), the ephemeral VM is torn down,
and the CLI prints one error line and exits 2.

This module is the orchestration; the run config is :mod:`~testbed.vm.replay_config`, the target and its legs
:mod:`~testbed.vm.replay_legs`, the cross-checks :mod:`~testbed.vm.replay_checks` and what is added to the
result :mod:`~testbed.vm.replay_result`.
"""

from __future__ import annotations

import secrets
import signal
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np

from devicemodels import DEVICES
from devicemodels.base import OP_ZONE_RESET, op_batch
from kvreplay.replay.engine import Replay, RunConfig
from kvbed.core.errors import KvbedError
from kvbed.core.params import format_size, from_dict, with_overrides
from testbed.vm import qemu
from testbed.vm.replay_config import VM_KINDS, VmLinkParams, fixed_of, guest_power_loss
from testbed.vm.replay_legs import VmReplayTarget
from testbed.vm.replay_result import assemble
from testbed.vm.target import VmTarget
from testbed.vm.vm import Vm


class VmReplay:
    """One VM replay: VM (attached or ephemeral), the embedded replay with a VM target, collection."""

    def __init__(self, cfg: RunConfig, *, progress=None, should_stop: Callable[[], bool] | None = None,
                 log: Callable[[str], None] | None = None):
        t = cfg.target or {}
        if t.get("kind") != "vm":
            raise KvbedError("not a VM run config (no target.kind = vm)")
        if cfg.replay.precondition > 0:
            raise KvbedError("--precondition: a VM's device cannot be preconditioned by the model; "
                             "run without it (or with --target embedded)")
        if cfg.device not in VM_KINDS:
            raise KvbedError(f"--target vm: no VM device {cfg.device!r} (VM devices: {', '.join(VM_KINDS)})")
        self.cfg = cfg
        self.progress = progress
        self.should_stop = should_stop
        self.log = log or (lambda s: None)
        self.ephemeral = bool(t.get("ephemeral"))
        self.link = from_dict(VmLinkParams, t.get("link") or {}, where="target.link").validate()
        self.vm_params = from_dict(qemu.VmParams, t.get("vm_params") or {}, where="target.vm_params").validate()
        self.power = guest_power_loss(cfg, self.vm_params, ephemeral=self.ephemeral) if cfg.faults.active else None
        self.vm: Vm | None = None
        self.tg: VmTarget | None = None
        self.target: VmReplayTarget | None = None
        self.before: dict[str, Any] = {}
        self.times: dict[str, float] = {}
        if not self.ephemeral:
            self.vm = Vm.attach(t["vm"])
            if cfg.sized:  # a rerun from config.json: the VM must still have the recorded geometry
                now = {g: from_dict(c, self.vm.state.params.get(g, {}), where=f"VM {self.vm.name}")
                       for g, c in DEVICES.get(cfg.device).param_classes.items()}
                want, have = fixed_of(cfg.device_params), fixed_of(now)
                diff = [f"{k}={format_size(want[k])} (VM has {format_size(have[k])})" for k in want if have.get(k) != want[k]]
                if diff:
                    raise KvbedError(f"VM {self.vm.name} no longer has this run's geometry: {', '.join(diff)}")

    def _pull_plug(self) -> tuple[VmTarget, dict[str, Any]]:
        """SIGKILL QEMU, start it again on the same disks, scan every write issued before the kill; the new
        link to the guest and its log pages before anything more is sent."""
        pw, vm = self.power, self.vm
        pb = self.tg.page_bytes
        self.tg.close()
        self.log(f"power loss at {pw.at_ns} ns of trace time: killing QEMU")
        pw.cycle = vm.power_cycle(log=self.log)
        self.tg = tg = VmTarget(vm, batch_ops=self.link.batch_ops, inflight=self.link.inflight,
                                reply_timeout_s=self.link.reply_timeout_s, page_bytes=pb)
        t0 = time.monotonic()
        pw.scan = tg.scan(pw.extents())
        pw.scan["totals"]["scan_s"] = round(time.monotonic() - t0, 3)
        pw.fired = True
        self.log(f"scanned {pw.scan['totals']['writes']} writes after the restart")
        tg.reset_counters()
        return tg, tg.logs()

    # --- engine hooks ---------------------------------------------------------------------------------
    def _fit(self, groups: dict[str, Any]) -> dict[str, Any]:
        """Make the sized geometry one QEMU can emulate, so the model and the VM are the same device."""
        g = dict(groups)
        if "cxl" in g:
            gran = qemu.CxlDevice.GRANULE
            c = g["cxl"]
            if c.cxl_bytes % gran:
                g["cxl"] = with_overrides(c, {"cxl_bytes": -(-c.cxl_bytes // gran) * gran})
            pb = g["cxl"].page_bytes
            if pb < 64 or pb & (pb - 1):
                raise KvbedError(f"--target vm: cxl page_bytes must be a power of two >= 64, got {pb}")
        dev = qemu.device(self.cfg.device)
        p = {k: g[k] for k in dev.param_classes if k in g}
        p["vm"] = self.vm_params
        try:
            dev.validate(p)
        except KvbedError as exc:
            raise KvbedError(f"--target vm: the device sized for this trace cannot be emulated by QEMU: {exc}; "
                             f"set the geometry with --param") from None
        return g

    def _open(self, model: Any) -> VmReplayTarget:
        cfg = self.cfg
        if self.ephemeral:
            dev = qemu.device(cfg.device)
            p = {k: cfg.device_params[k] for k in dev.param_classes if k in cfg.device_params}
            p["vm"] = self.vm_params
            t0 = time.monotonic()
            self.vm = Vm.up(cfg.device, name=f"replay-{cfg.device}-{secrets.token_hex(3)}", params=p, log=self.log,
                            die_with_parent=threading.current_thread() is threading.main_thread())
            self.times["up_s"] = time.monotonic() - t0
        vm = self.vm
        self.tg = tg = VmTarget(vm, batch_ops=self.link.batch_ops, inflight=self.link.inflight,
                                reply_timeout_s=self.link.reply_timeout_s, page_bytes=model.page_bytes)
        if tg.logical_pages < model.logical_pages:
            raise KvbedError(f"VM {vm.name}: the guest sees {tg.logical_pages} units of {model.page_bytes} bytes, "
                             f"fewer than the model's {model.logical_pages}")
        if tg.info.get("zoned"):
            self._reset_zones(tg)
        tg.reset_counters()  # the guest's counters and histograms cover the replay only
        self.before = tg.logs()
        self.target = VmReplayTarget(tg, model, self.before, power=self.power, on_kill=self._pull_plug)
        backing = "" if tg.info["kind"] == "cxl" else f", backing={self.vm_params.backing}"
        self.log(f"replaying through VM {vm.name} ({vm.device}, {vm.state.accel}{backing})")
        return self.target

    def _reset_zones(self, tg: VmTarget) -> None:
        """The zone layout starts from empty zones: reset whatever an earlier run left open or full."""
        rep = tg.logs(["zone_report"])["zone_report"]
        zp = tg.zone_pages
        used = [i for i, z in enumerate(rep) if z["state"] != "empty"]
        if used:
            n = len(used)
            c = tg.submit(op_batch(np.full(n, OP_ZONE_RESET), np.array(used) * zp, np.full(n, zp)))
            if np.any(c.status != 0):
                raise KvbedError(f"VM {tg.vm.name}: could not reset its zones before the replay")
            self.log(f"reset {n} zones left written by an earlier run")

    # --- run ------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        owner = None if self.ephemeral else f"VM {self.vm.name}'s namespace (fixed at `kvbed up`)"
        rep = Replay(self.cfg, progress=self.progress, should_stop=self.should_stop, target_factory=self._open,
                     fit_params=self._fit if self.ephemeral else None, capacity_owner=owner,
                     keep_media=self.power is not None)
        with _terminate_cleanly():
            try:
                parts = rep.run()
                if self.power is not None and not self.power.fired and self.target.failed is None:
                    self.target.pull_plug()  # nothing came after the fault's instant: the plug is pulled at the end
                self._finish(rep, parts)
                return parts
            finally:
                self.close()

    def close(self) -> None:
        if self.tg is not None:
            self.tg.close()
            self.tg = None
        if self.ephemeral and self.vm is not None:
            t0 = time.monotonic()
            vm, self.vm = self.vm, None
            vm.down()
            self.times["down_s"] = time.monotonic() - t0

    # --- collection -----------------------------------------------------------------------------------
    def _finish(self, rep: Replay, parts: dict[str, Any]) -> None:
        assemble(parts, rep, self.cfg, self.target, self.tg, self.vm, power=self.power, link=self.link,
                 vm_params=self.vm_params, ephemeral=self.ephemeral, times=self.times)


@contextmanager
def _terminate_cleanly() -> Iterator[None]:
    """SIGTERM (a CI timeout, `kill`) ends the run through the ``finally`` blocks, so an ephemeral VM is
    torn down instead of left running; SIGKILL is covered by the VM's PR_SET_PDEATHSIG."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def replay_vm(cfg: RunConfig, *, progress=None, should_stop=None, log=None) -> dict[str, Any]:
    """Run a VM replay config (from :func:`~testbed.vm.replay_config.build_vm_config` or a saved config.json);
    the run's parts."""
    return VmReplay(cfg, progress=progress, should_stop=should_stop, log=log).run()
