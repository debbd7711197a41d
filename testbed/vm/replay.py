"""``kvbed replay --target vm``: the replay's ops through a guest kernel onto QEMU's emulated device.

The trace side is the embedded replay's own (:class:`kvreplay.replay.engine.Replay`: same scan, hints,
layout and op segments); only the target changes:

- :class:`VmReplayTarget` sends every op segment to the guest agent (:class:`~testbed.vm.target.VmTarget`:
  batches of ``batch_ops`` with at most ``inflight`` outstanding), then feeds the ops that completed to
  a device model with the VM's own parameters - QEMU models the NVMe protocol, not flash, so WAF, GC
  and erases come from the model - and to the cross-check trackers of :mod:`testbed.vm.checks`;
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
:class:`Leg` with its own log pages and trackers; the cross-checks are per leg (``before_power_loss.*``,
``after_restart.*``) plus ``power_loss_scan_vs_model``.

A failed cross-check is never silent: result.json has ``"cross_checks_ok": false`` and the CLI prints
one ``kvbed: cross-check FAILED`` line per failed check and exits with status 1 (the run directory is
complete). A VM that dies, an agent that stops answering or a device that refuses an op stops the run:
the completed part is kept (result marked incomplete, ``error`` set), the ephemeral VM is torn down,
and the CLI prints one error line and exits 2.
"""

from __future__ import annotations

import secrets
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from devicemodels import DEVICES
from devicemodels.base import OP_WRITE, OP_ZONE_APPEND, OP_ZONE_RESET, op_batch
from kvreplay.hints import HINTS
from kvreplay.replay.engine import Replay, RunConfig, build_config
from kvreplay.replay.params import LayoutParams, ReplayParams
from kvbed.core.errors import KvbedError
from kvbed.core.params import field_types, format_size, from_dict, param, split_overrides, to_dict, with_overrides
from testbed.vm import backends, checks, qemu, state
from testbed.vm.client import AgentTimeout, VmDied, VmError
from testbed.vm.powerloss import GuestPowerLoss
from testbed.vm.target import VmCompletion, VmTarget, merge_histograms
from testbed.vm.vm import Vm

VM_KINDS = tuple(qemu.VM_DEVICES.names())
#: what QEMU was started with (and the mapping unit the agent turns into LBAs): fixed once a VM is up
FIXED = {"flash": ("logical_bytes", "page_bytes"), "fdp": ("ru_bytes", "nruh", "nrg", "ruh_type"),
         "zns": ("zone_bytes", "zone_cap_bytes", "max_open_zones", "max_active_zones", "implicit_close"),
         "cxl": ("cxl_bytes", "page_bytes")}
SOURCES_NVME = {"lat_ns": "guest", "object_lat_ns": "guest", "waf": "model", "media_bytes_written": "model",
                "gc": "model", "gc_stall": "model", "erases": "model", "wear": "model", "per_ruh": "model",
                "zone_resets": "layout", "host_gc": "layout",
                "saturation": "guest"}  # from the guest's completion times, as the latency


@dataclass(frozen=True)
class VmLinkParams:
    """How the replay talks to the guest agent (``--param batch_ops=512`` ...)."""

    batch_ops: int = param(256, "ops per message to the agent")
    inflight: int = param(2, "messages outstanding, so the agent always has the next batch queued")
    reply_timeout_s: float = param(60.0, "an agent silent for this long is declared stuck")

    def validate(self) -> "VmLinkParams":
        if self.batch_ops < 1 or self.inflight < 1:
            raise KvbedError(f"batch_ops and inflight must be >= 1, got {self.batch_ops}, {self.inflight}")
        if not self.reply_timeout_s > 0:
            raise KvbedError(f"reply_timeout_s must be positive, got {self.reply_timeout_s}")
        return self


def split_vm_params(params: list[str] | tuple[str, ...]) -> tuple[list[str], list[str], list[str]]:
    """``--param`` pairs -> (replay/layout/hint/model pairs, VM machine pairs, agent link pairs)."""
    vm_keys, link_keys = set(field_types(qemu.VmParams)), set(field_types(VmLinkParams))
    rest, vm, link = [], [], []
    for p in params:
        k, sep, v = p.partition("=")
        g, _, bare = k.strip().replace("-", "_").rpartition(".")
        if g == "vm" or (not g and bare in vm_keys):
            vm.append(f"{bare}={v}" if sep else p)
        elif g == "link" or (not g and bare in link_keys):
            link.append(f"{bare}={v}" if sep else p)
        else:
            rest.append(p)
    return rest, vm, link


def _fixed_of(groups: dict[str, Any]) -> dict[str, Any]:
    return {f"{g}.{f}": getattr(groups[g], f) for g, fs in FIXED.items() if g in groups for f in fs}


# ----------------------------------------------------------------------------------------------- config


def build_vm_config(trace: str, device: str | None, hints: str, params: list[str] | tuple[str, ...] = (),
                    options: dict[str, Any] | None = None, *, vm: str | None = None) -> RunConfig:
    """The run config of a VM replay: on VM ``vm`` (its recorded parameters), or on an ephemeral VM."""
    rest, vm_pairs, link_pairs = split_vm_params(params)
    link = with_overrides(VmLinkParams(), link_pairs).validate()
    if vm is None:
        device = device or "fdp"
        if device not in VM_KINDS:
            raise KvbedError(f"--target vm: no VM device {device!r} (VM devices: {', '.join(VM_KINDS)})")
        cfg = build_config(trace, device, hints, rest, options)
        # a power loss is checked by reading the namespace back after QEMU restarts: it must keep its data
        backing = "file" if cfg.faults.active else "null"
        vm_params = with_overrides(qemu.VmParams(backing=backing), vm_pairs).validate()
        cfg.target = {"kind": "vm", "vm": None, "ephemeral": True, "vm_params": to_dict(vm_params),
                      "link": to_dict(link)}
        return cfg
    st = state.find(vm)
    if device and device != st.device:
        raise KvbedError(f"--vm {vm} is a {st.device} VM, not {device} (leave --device out or pick another VM)")
    if vm_pairs:
        raise KvbedError(f"--vm {vm}: the VM's machine parameters ({', '.join(p.split('=')[0] for p in vm_pairs)}) "
                         f"are fixed at `kvbed up`; leave them out")
    device = st.device
    cfg = build_config(trace, device, hints, rest, options)
    model_cls = DEVICES.get(device)
    routed = split_overrides(rest, {"replay": ReplayParams, "layout": LayoutParams, "hint": HINTS.get(hints).Params,
                                    **model_cls.param_classes})
    groups = {}
    for g, c in model_cls.param_classes.items():
        base = from_dict(c, st.params.get(g, {}), where=f"VM {vm}: recorded params.{g}")
        for kv in routed[g]:
            k = kv.split("=", 1)[0].strip().replace("-", "_")
            if k in FIXED.get(g, ()):
                raise KvbedError(f"--vm {vm}: {k} is fixed at `kvbed up` (the VM has {k}={format_size(getattr(base, k))}); "
                                 f"start a VM with another {k}, or drop --vm for one sized from the trace")
        groups[g] = with_overrides(base, routed[g])
    if "flash" in groups and not any(kv.split("=")[0].strip() in ("seed", "flash.seed") for kv in rest):
        groups["flash"] = with_overrides(groups["flash"], {"seed": cfg.replay.seed})
    cfg.device_params = groups
    # every field is the VM's or the user's: sizing only checks that the trace fits
    cfg.explicit = sorted({f for c in model_cls.param_classes.values() for f in field_types(c)})
    cfg.target = {"kind": "vm", "vm": vm, "ephemeral": False, "vm_params": st.params.get("vm"), "link": to_dict(link)}
    return cfg


# ----------------------------------------------------------------------------------------------- target


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


# ----------------------------------------------------------------------------------------------- run


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
        self.power = self._power_loss() if cfg.faults.active else None
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
                want, have = _fixed_of(cfg.device_params), _fixed_of(now)
                diff = [f"{k}={format_size(want[k])} (VM has {format_size(have[k])})" for k in want if have.get(k) != want[k]]
                if diff:
                    raise KvbedError(f"VM {self.vm.name} no longer has this run's geometry: {', '.join(diff)}")

    def _power_loss(self) -> GuestPowerLoss:
        """The one fault a guest can take (a power loss), on a VM it may kill: checked before anything starts."""
        cfg = self.cfg
        faults = cfg.faults.parsed()
        kinds = sorted({f.name for f in faults})
        if len(faults) != 1 or faults[0].name != "power-loss":
            raise KvbedError(f"--target vm: the guest takes one power-loss fault (got {len(faults)}: "
                             f"{', '.join(kinds) or 'none'}); the other kinds, and a contract alone, run on the "
                             f"embedded model (--target embedded)")
        if not self.ephemeral:
            raise KvbedError(f"--fault power-loss kills and restarts QEMU: not on VM {self.cfg.target.get('vm')} "
                             f"(leave --vm out for an ephemeral VM)")
        if self.vm_params.backing != "file":
            raise KvbedError("--fault power-loss needs backing=file (the namespace is read back after the restart; "
                             "null-co keeps nothing)")
        if cfg.device not in ("conv", "fdp"):
            raise KvbedError(f"--fault power-loss on --target vm: device {cfg.device} is not a conv or fdp NVMe "
                             f"namespace (the fault model follows conv/fdp extents; cxl memory is volatile)")
        return GuestPowerLoss(faults[0], cfg.replay.time_scale)

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
        tgt, tg, vm = self.target, self.tg, self.vm
        res = parts["result"]
        job = res["jobs"][0]
        pb = tgt.page_bytes
        failed = tgt.failed
        usable = not isinstance(failed, (VmDied, AgentTimeout))  # the agent still answers
        skipped = None
        last = tgt.leg
        if last.after is None:
            if usable:
                try:
                    last.end(tg)
                except VmError as exc:
                    usable, skipped = False, f"collection failed: {exc}"
            else:
                skipped = f"the VM could not be asked after the failure ({failed})"
            if not usable:  # what the last reply said
                last.after, last.hists, last.counters, last.by_pid = {}, {}, tg.counters(), tg.bytes_written_by_pid()
        legs = tgt.legs
        after = last.after
        hists = merge_histograms([leg.hists for leg in legs])
        guest = _sum([leg.counters for leg in legs])
        by_pid = _sum([leg.by_pid for leg in legs])
        cross: list[dict[str, Any]] = []
        if usable:
            cross = self._checks(rep, complete=not res["incomplete"])
        power = None
        if self.power is not None and self.power.scan is not None:
            power = self.power.compare(rep.fault_run.media.get(0) if rep.fault_run else None)
            cross.append({"check": "power_loss_scan_vs_model", "ok": power["ok"],
                          "expected": power["writes_predicted"], "observed": power["agree"],
                          "note": "writes whose state after the restart (intact, torn, missing, and pages present) "
                                  "the guest's scan and the fault model's media map agree on"})
        model = tgt.model
        mc = model.counters()
        fdp_log = _sum([_delta(leg.before.get("fdp_stats"), leg.after.get("fdp_stats")) for leg in legs])
        smart = _sum([_delta(leg.before.get("smart"), leg.after.get("smart")) for leg in legs])
        is_fdp = bool(tg.info.get("fdp"))
        host_src = "device log" if is_fdp and fdp_log else "guest"
        if is_fdp and fdp_log:
            job["host_bytes_written"] = int(fdp_log["host_bytes_written"])
        else:
            job["host_bytes_written"] = int(guest.get("bytes_written", 0))
        sources = dict(SOURCES_NVME, host_bytes_written=host_src)
        be = backends.backend(vm.backend)
        versus = None
        if be.flash_stats and is_fdp and fdp_log:
            # the device counts flash: its WAF, media bytes and erases are the run's, the model's beside them
            versus = _device_vs_model(fdp_log, model.counters(), pb, self.cfg.device_params["flash"], be.label)
            dev = versus["device"]
            job["waf"], job["media_bytes_written"] = dev["waf"], dev["media_bytes_written"]
            job["erases"], job["media_bytes_erased"] = dev["erases"], dev["media_bytes_erased"]
            sources.update(waf=dev["source"], media_bytes_written=dev["source"], erases=dev["source"])
        if tg.info["kind"] == "cxl":
            sources = {"lat_ns": "guest", "object_lat_ns": "guest", "host_bytes_written": "guest",
                       "media_bytes_written": "model", "waf": "model"}
        if self.power is not None:  # the model's clock drives the kill point: its completions are the run's
            sources.update(lat_ns="model", object_lat_ns="model")
        job["sources"] = sources
        res["sources"] = sources
        res["target"] = {
            "kind": "vm", "vm": vm.name, "ephemeral": self.ephemeral, "device": vm.device, "backend": vm.backend,
            "accel": vm.state.accel,
            "image": vm.state.image, "backing": self.vm_params.backing if tg.info["kind"] != "cxl" else None,
            "qemu_params": vm.state.params, "link": to_dict(self.link),
            "agent": {k: tg.hello.get(k) for k in ("agent_version", "kernel", "python")},
        }
        ruh = None
        if is_fdp and after.get("ruh_status"):
            sent = last.fdp.bytes_by_pid  # (of the last leg: a restarted QEMU starts its handles afresh)
            ruh = [{"pid": int(b["pid"]), "ruamw_lbas_before": int(b["ruamw_lbas"]),
                    "ruamw_lbas_after": int(a["ruamw_lbas"]), "bytes_written": int(sent[i])}
                   for i, (b, a) in enumerate(zip(last.before["ruh_status"], after["ruh_status"]))]
        zones = None
        if after.get("zone_report"):
            st: dict[str, int] = {}
            for z in after["zone_report"]:
                st[z["state"]] = st.get(z["state"], 0) + 1
            zones = {"zones": len(after["zone_report"]), "by_state": st}
        host_model = int(mc.get("host_pages_written", 0)) * pb
        media_model = int(mc.get("media_pages_written", 0)) * pb
        res["vm"] = {
            "guest": {"source": "guest", "ops": {k[4:]: v for k, v in guest.items() if k.startswith("ops_")},
                      **{k: guest.get(k, 0) for k in ("commands", "bytes_written", "bytes_read", "bytes_trimmed",
                                                      "errors")},
                      "bytes_written_by_pid": by_pid,
                      "latency": {op: {k: v for k, v in d.items() if k != "buckets"} for op, d in hists.items()}},
            "device_log": {"source": "device log", "fdp_stats": fdp_log or None, "smart": smart or None,
                           "ruh_status": ruh, "zones": zones},
            "model": {"source": "model", "device": self.cfg.device,
                      "waf": media_model / host_model if host_model else None,
                      "host_bytes_written": host_model, "media_bytes_written": media_model,
                      "gc_runs": int(mc.get("gc_runs", 0)), "gc_pages_moved": int(mc.get("gc_pages_moved", 0)),
                      "erases": int(mc.get("block_erases", 0))},
            "cross_checks": cross,
            "cross_checks_ok": all(c["ok"] for c in cross) if cross else None,
            "cross_checks_skipped": skipped,
        }
        if versus is not None:
            res["vm"]["device_vs_model"] = versus
        if power is not None:
            res["vm"]["power_loss"] = power
        if last.fdp is not None and getattr(last.fdp, "skipped", None):
            res["vm"]["cross_checks_not_predicted"] = last.fdp.skipped
        parts.setdefault("files", {})["vm.json"] = {
            "vm": res["target"], "qemu_pid": vm.pid, "boot_s": vm.state.boot_s, "device_info": tg.info,
            "logs_before": legs[0].before,
            "logs_after": after or None, "latency": hists, "counters": guest,
        }
        if len(legs) > 1:
            parts["files"]["vm.json"]["legs"] = [
                {"leg": leg.name, "ops": leg.ops, "bytes_written": leg.bytes_written,
                 "submit_s": round(leg.submit_s, 3), "logs_before": leg.before,
                 "logs_after": leg.after or None, "counters": leg.counters} for leg in legs]
        rt = parts["runtime"]
        sub = tgt.submit_s
        rt["vm"] = {
            "boot_s": vm.state.boot_s, **{k: round(v, 3) for k, v in self.times.items()},
            "submit_s": round(sub, 3), "ops": tgt.ops, "commands": int(guest.get("commands", 0)),
            "bytes_written": tgt.bytes_written, "bytes_read": int(guest.get("bytes_read", 0)),
            "mb_per_s": (tgt.bytes_written + int(guest.get("bytes_read", 0))) / sub / 1e6 if sub else None,
            "commands_per_s": int(guest.get("commands", 0)) / sub if sub else None,
            "ops_per_s": tgt.ops / sub if sub else None,
        }

    def _checks(self, rep: Replay, *, complete: bool) -> list[dict]:
        """Every leg's checks against its own log pages (named ``LEG.check`` when there are several), then the
        model's."""
        tgt = self.target
        out: list[dict[str, Any]] = []
        for leg in tgt.legs:
            prefix = f"{leg.name}." if len(tgt.legs) > 1 else ""
            out += [dict(c, check=prefix + c["check"]) for c in self._leg_checks(leg)]
        pb = tgt.page_bytes
        host_model = int(tgt.model.counters().get("host_pages_written", 0)) * pb
        if self.power is None:
            out.append({"check": "model_host_bytes_written", "ok": host_model == tgt.bytes_written,
                        "expected": tgt.bytes_written, "observed": host_model,
                        "note": "the model was fed exactly the writes the guest completed"})
        else:
            held = self.power.sent["pages_not_issued"] * pb
            out.append({"check": "model_host_bytes_written", "ok": host_model == tgt.bytes_written + held,
                        "expected": tgt.bytes_written + held, "observed": host_model,
                        "note": "the model was fed every write; the guest all of them but the units the power loss "
                                f"kept from the media ({held} bytes)"})
        if complete and rep.layout.zoned and tgt.zns is not None and tgt.leg.after:
            out.append(_layout_zone_check(rep, self.tg, tgt.leg.after["zone_report"]))
        return out

    def _leg_checks(self, leg: Leg) -> list[dict]:
        out: list[dict[str, Any]] = []
        after, guest = leg.after or {}, leg.counters or {}
        out.append({"check": "agent_bytes_written", "ok": guest.get("bytes_written") == leg.bytes_written,
                    "expected": leg.bytes_written, "observed": guest.get("bytes_written"),
                    "note": "bytes the agent wrote vs the write ops the replay's layout made (completed ones)"})
        if leg.fdp is not None and after:
            out += leg.fdp.checks(after)
            want = {str(p): int(v) for p, v in enumerate(leg.fdp.bytes_by_pid) if v}
            got = {k: int(v) for k, v in (leg.by_pid or {}).items() if v}
            out.append({"check": "bytes_by_placement_id", "ok": want == got, "expected": want, "observed": got,
                        "note": "bytes the agent wrote with each placement id (DTYPE=2, DSPEC) vs the hints' ids"})
        if leg.zns is not None and after:
            out += leg.zns.checks(after["zone_report"])
        if "smart" in after:
            s = _delta(leg.before["smart"], after["smart"])
            out.append({"check": "smart_host_write_commands", "ok": s["host_write_commands"] == leg.write_cmds,
                        "expected": leg.write_cmds, "observed": s["host_write_commands"],
                        "note": "SMART write commands vs the write commands the agent issued (MDTS splits)"})
            units = leg.bytes_written / 512_000  # SMART data units: 1000 x 512 bytes, the total rounded up
            lo, hi = int(np.floor(units)), int(np.ceil(units))
            out.append({"check": "smart_data_units_written", "ok": lo <= s["data_units_written"] <= hi,
                        "expected": [lo, hi], "observed": s["data_units_written"],
                        "note": "SMART data units written (rounded up by the device) vs bytes the agent wrote"})
        return out


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


def _layout_zone_check(rep: Replay, tg: VmTarget, report: list[dict]) -> dict[str, Any]:
    """Every zone's write pointer as the replay's zone layout believes it vs the device's zone report."""
    from kvreplay.layout.zone import ZS_WP

    lpp = tg.page_bytes // int(tg.info["lba_bytes"])
    zone_lbas = int(tg.info["zone_lbas"])
    wp = rep.layout.zs[:, ZS_WP]
    n = min(len(wp), len(report))
    expected = np.arange(n, dtype=np.int64) * zone_lbas + wp[:n] * lpp
    observed = checks._zone_wps(report[:n])
    bad = np.flatnonzero(expected != observed)
    return {"check": "zone_write_pointers_vs_layout", "ok": len(bad) == 0 and len(wp) == len(report),
            "expected": int(n), "observed": int(n - len(bad)),
            "mismatches": {str(int(i)): {"expected": int(expected[i]), "observed": int(observed[i])} for i in bad[:20]},
            "note": "zones whose reported write pointer is where the replay's zone layout put it"}


def _device_vs_model(fdp_log: dict[str, int], mc: dict[str, int], pb: int, flash, label: str) -> dict[str, Any]:
    """A flash-counting device's FDP statistics and the model's figures on the same completed command
    stream, side by side with their ratio (device / model); each names its source."""
    block = flash.pages_per_block * pb
    host, media, erased = (int(fdp_log.get(k, 0)) for k in ("host_bytes_written", "media_bytes_written",
                                                             "media_bytes_erased"))
    dev = {"source": f"device log ({label} FDP statistics)", "host_bytes_written": host,
           "media_bytes_written": media, "media_bytes_erased": erased, "erases": erased // block,
           "waf": media / host if host else None}
    mh, mm = int(mc.get("host_pages_written", 0)) * pb, int(mc.get("media_pages_written", 0)) * pb
    me = int(mc.get("block_erases", 0))
    mod = {"source": "model", "host_bytes_written": mh, "media_bytes_written": mm, "media_bytes_erased": me * block,
           "erases": me, "waf": mm / mh if mh else None}

    def ratio(a, b):
        return a / b if a is not None and b else None

    return {"device": dev, "model": mod,
            "ratio": {k: ratio(dev[k], mod[k]) for k in ("waf", "host_bytes_written", "media_bytes_written",
                                                         "media_bytes_erased", "erases")},
            "note": f"ratio = {label} / model; erases in blocks of pages_per_block x page_bytes"}


def _sum(parts: list[dict | None]) -> dict[str, int]:
    """Integer counters of several legs added key by key."""
    out: dict[str, int] = {}
    for d in parts:
        for k, v in (d or {}).items():
            if isinstance(v, int):
                out[k] = out.get(k, 0) + v
    return out


def _delta(before: dict | None, after: dict | None) -> dict[str, Any]:
    if not before or not after:
        return {}
    return {k: after[k] - before[k] for k in after if isinstance(after.get(k), int) and isinstance(before.get(k), int)}


def replay_vm(cfg: RunConfig, *, progress=None, should_stop=None, log=None) -> dict[str, Any]:
    """Run a VM replay config (from :func:`build_vm_config` or a saved config.json); the run's parts."""
    return VmReplay(cfg, progress=progress, should_stop=should_stop, log=log).run()
