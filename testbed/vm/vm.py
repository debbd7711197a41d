"""VM lifecycle: up (overlay, backing disk, QEMU, readiness), attach, status, down.

`up` never leaves a half-started VM behind: any failure (QEMU refuses its
arguments, the port is taken, the kernel panics, the agent never answers, the
device fails to set up) kills QEMU, removes the state directory, keeps the
console log as ``<state_dir>/.failed-<name>.log`` and raises one line saying why.
"""

from __future__ import annotations

import ctypes
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from kvbed.core.errors import KvbedError
from testbed.vm import accel as accel_mod
from testbed.vm import image as image_mod
from testbed.vm import backends, cmdline, paths, qemu, state
from testbed.vm.client import AgentClient, AgentError, AgentTimeout, VmDied, VmError

DEFAULT_BOOT_TIMEOUT_S = 90.0
READY_MARK = "kvbed-agent: ready on port"  # what the agent prints on the console once it listens
KVM_BOOT_GRACE_S = 30.0  # a KVM boot that has not reached the agent by then falls back to TCG


def _tail(path: Path, n: int = 40) -> list[str]:
    try:
        data = path.read_bytes()[-16384:].decode(errors="replace")
    except OSError:
        return []
    lines = [re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", ln).strip() for ln in data.splitlines()]
    return [ln for ln in lines if ln][-n:]


def console_reason(console: Path) -> str | None:
    """The most telling console line after a guest failure (panic, traceback, agent error)."""
    lines = _tail(console, 80)
    for pat in ("Kernel panic", "kvbed-agent: device setup failed", "Traceback", "Error", "kvbed initramfs"):
        for ln in reversed(lines):
            if pat in ln:
                return re.sub(r"^\[\s*[0-9.]+\]\s*", "", ln)
    return None


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _next_name(device: str) -> str:
    taken = {s.name for s in state.list_states()}
    i = 0
    while f"{device}{i}" in taken or (paths.state_dir() / f"{device}{i}").exists():
        i += 1
    return f"{device}{i}"


class Vm:
    """A running VM known by its state directory (this process may or may not have started it)."""

    def __init__(self, st: state.VmState, proc: subprocess.Popen | None = None):
        self.state = st
        self.proc = proc
        self._die_with_parent = False

    # --- identity ---------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.state.name

    @property
    def device(self) -> str:
        return self.state.device

    @property
    def backend(self) -> str:
        return self.state.backend

    @property
    def port(self) -> int:
        return self.state.port

    @property
    def pid(self) -> int:
        return self.state.pid

    def params(self) -> dict[str, Any]:
        return qemu.resolve_params(self.state.device, base=self.state.params)

    # --- liveness -----------------------------------------------------------------
    def alive_reason(self) -> str | None:
        """None while QEMU runs; else one line on how it ended (the client prefixes the VM's name)."""
        if self.proc is not None:
            rc = self.proc.poll()
            if rc is None:
                return None
        elif state.is_alive(self.state):
            return None
        else:
            rc = None
        why = console_reason(self.state.file("console.log"))
        noise = backends.backend(self.state.backend).log_noise
        qlog = [ln for ln in _tail(self.state.file("qemu.log"), 20) if not any(n in ln for n in noise)][-5:]
        tail = why or (qlog[-1] if qlog else None)
        code = f" (exit status {rc})" if rc is not None else ""
        return f"QEMU exited{code}" + (f": {tail}" if tail else "")

    def client(self) -> AgentClient:
        return AgentClient(self.port, alive=self.alive_reason, where=f"VM {self.name}")

    # --- lifecycle ------------------------------------------------------------------
    @classmethod
    def attach(cls, name: str) -> "Vm":
        st = state.find(name)
        vm = cls(st)
        if not state.is_alive(st):
            raise VmDied(f"VM {name} is not running (QEMU pid {st.pid} is gone): `kvbed down {name}` cleans it up")
        return vm

    @classmethod
    def up(cls, device: str, *, name: str | None = None, overrides=(), params: dict[str, Any] | None = None,
           accel: str = "auto", port: int | None = None, boot_timeout_s: float = DEFAULT_BOOT_TIMEOUT_S,
           log: Callable[[str], None] | None = None, qemu_bin: str | None = None,
           die_with_parent: bool = False, backend: str = "qemu") -> "Vm":
        """Start a VM. ``die_with_parent``: QEMU gets SIGKILL when the calling thread's process ends (an
        ephemeral VM must not outlive a ``kvbed replay`` that was killed); call it from the main thread.
        ``backend``: the emulator (testbed.vm.backends: qemu, femu); it checks the device first."""
        log = log or (lambda s: None)
        be = backends.backend(backend)
        p = params if params is not None else be.resolve_params(device, overrides)
        be.check(device, p)
        qemu_bin = qemu_bin or be.binary()
        forced = be.forced_accel()
        if forced and accel not in ("auto", forced[0]):
            raise KvbedError(f"--accel {accel}: {forced[1]} (use --accel {forced[0]} or auto)")
        name = state.check_name(name) if name else _next_name(device)
        if port is not None and not (1 <= port <= 65535):
            raise KvbedError(f"--port must be in 1..65535, got {port}")
        if port is not None and not port_free(port):
            raise KvbedError(f"port 127.0.0.1:{port} is already in use: choose another --port or leave it out")
        img = image_mod.find()
        if img is None:
            log("building the guest image (first run; about a minute)")
            img = image_mod.build(log=log)
        choice = accel_mod.AccelChoice(*forced) if forced else accel_mod.choose(accel, qemu_bin)
        root = paths.state_dir()
        root.mkdir(parents=True, exist_ok=True)
        d = root / name
        try:
            d.mkdir()
        except FileExistsError:
            existing = state.VmState.load(d) if (d / state.STATE_FILE).exists() else None
            if existing and state.is_alive(existing):
                raise KvbedError(f"VM {name} is already running (pid {existing.pid}, port {existing.port})") from None
            raise KvbedError(f"VM {name}: stale state in {d}: run `kvbed down {name}` first") from None
        st = state.VmState(name=name, device=device, dir=str(d), backend=backend, accel=choice.accel, accel_reason=choice.reason,
                           image=img.hash, params=qemu.params_to_dict(p), created_unix=time.time(),
                           token=secrets.token_hex(6))
        st.save()
        vm = cls(st)
        vm._die_with_parent = die_with_parent
        try:
            vm._prepare_disks(img, p)
            attempts = 3 if port is None else 1
            for attempt in range(attempts):
                try:
                    vm._start(img, p, port or pick_port(), qemu_bin, log)
                    vm._wait_ready(boot_timeout_s if vm.state.accel == "tcg" else min(boot_timeout_s, KVM_BOOT_GRACE_S))
                    break
                except _PortTaken:
                    vm._kill()
                    if attempt == attempts - 1:
                        raise KvbedError(f"VM {name}: port 127.0.0.1:{vm.state.port} is already in use") from None
                    log(f"port {vm.state.port} was taken meanwhile; retrying with another")
                except VmError as exc:
                    if vm.state.accel != "kvm" or accel != "auto" or os.environ.get("KVBED_ACCEL"):
                        raise
                    # KVM looked usable but the guest did not come up under it: remember, then use TCG
                    accel_mod.remember(accel_mod.host_key(qemu_bin), "tcg", f"guest boot under KVM failed: {exc}")
                    log(f"KVM boot failed ({exc}); falling back to TCG")
                    vm._kill()
                    vm.state.accel, vm.state.accel_reason = "tcg", f"KVM boot failed: {exc}"
                    vm._start(img, p, pick_port() if port is None else port, qemu_bin, log)
                    vm._wait_ready(boot_timeout_s)
                    break
        except BaseException as exc:
            vm._fail_cleanup()
            if isinstance(exc, KvbedError):
                saved = root / f".failed-{name}.log"
                if saved.exists():
                    raise type(exc)(f"{exc} (console log: {saved})") from None
            raise
        return vm

    def _prepare_disks(self, img: image_mod.Image, p) -> None:
        d = self.state.path
        r = subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(img.root), "-F", "qcow2",
                            str(d / "overlay.qcow2")], capture_output=True, text=True)
        if r.returncode != 0:
            raise KvbedError(f"qemu-img create failed: {r.stderr.strip() or r.returncode}")
        nbytes = backends.backend(self.backend).disk_bytes(self.device, p)
        if nbytes:
            with open(d / "nvme.raw", "wb") as f:
                f.truncate(nbytes)  # sparse: costs nothing until written

    def _paths(self, img: image_mod.Image) -> qemu.VmPaths:
        d = self.state.path
        return qemu.VmPaths(kernel=img.kernel, initrd=img.initrd, overlay=d / "overlay.qcow2",
                            disk=(d / "nvme.raw") if (d / "nvme.raw").exists() else None,
                            console=d / "console.log", qmp=d / "qmp.sock")

    def _start(self, img, p, port: int, qemu_bin: str, log) -> None:
        st = self.state
        st.port = port
        argv = cmdline.build_argv(st.device, p, self._paths(img), accel=st.accel, host_port=port, token=st.token,
                               qemu_bin=qemu_bin, backend=st.backend)
        st.argv = argv
        log(f"starting VM {st.name} ({st.device} on {st.backend}, {st.accel}) on 127.0.0.1:{port}")
        self._spawn(argv)

    def _spawn(self, argv: list[str]) -> None:
        st = self.state
        for f in ("console.log", "qemu.log"):
            st.file(f).unlink(missing_ok=True)
        with open(st.file("qemu.log"), "wb") as qlog:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=qlog, stderr=subprocess.STDOUT,
                                         start_new_session=True, close_fds=True,
                                         preexec_fn=_die_with_parent(os.getpid()) if self._die_with_parent else None)
        st.pid = self.proc.pid
        st.pid_start = state.proc_start_ticks(self.proc.pid) or 0
        st.save()

    def _wait_ready(self, timeout_s: float) -> None:
        st = self.state
        t0 = time.monotonic()
        end = t0 + timeout_s
        client = AgentClient(st.port, alive=self.alive_reason, where=f"VM {st.name}")
        next_try = t0 + 2.0
        try:
            while True:
                reason = self.alive_reason()
                if reason:
                    qlog = " ".join(_tail(st.file("qemu.log"), 5))
                    if "host forwarding" in qlog or "Address already in use" in qlog:
                        raise _PortTaken()
                    raise VmDied(reason.replace("QEMU exited", "QEMU exited during boot", 1), where=f"VM {st.name}")
                qlog = " ".join(_tail(st.file("qemu.log"), 5))
                if "KVM internal error" in qlog:
                    raise VmDied(f"VM {st.name}: KVM internal error during boot")
                # Ask as soon as the agent says on the console that it listens; until then only now and
                # then (slirp accepts and drops connections while nothing listens in the guest).
                ready = any(READY_MARK in ln for ln in _tail(st.file("console.log"), 10))
                now = time.monotonic()
                if not ready and now < next_try and now < end:
                    time.sleep(0.05)
                    continue
                try:
                    h, _ = client.request("hello", timeout_s=min(5.0 if ready else 1.0, max(0.2, end - now)))
                except VmDied:
                    continue  # the checks at the top of the loop say why (port taken, panic, ...)
                except AgentTimeout:
                    if time.monotonic() > end:
                        why = console_reason(st.file("console.log"))
                        raise AgentTimeout(f"VM {st.name}: the agent did not answer within {timeout_s:g} s of boot"
                                           + (f" (console: {why})" if why else "")) from None
                    client.reconnect()  # slirp may have eaten the request while the guest was not listening
                    next_try = time.monotonic() + 2.0
                    continue
                if h.get("token") != st.token:
                    raise KvbedError(f"VM {st.name}: port {st.port} answers, but not with this VM's agent "
                                     f"(token {h.get('token')!r})")
                if h.get("setup_error"):
                    raise AgentError(f"VM {st.name}: the guest could not set up the {st.device} device: {h['setup_error']}")
                st.boot_s = round(time.monotonic() - t0, 3)
                st.ready_unix = time.time()
                st.agent = {k: h.get(k) for k in ("agent_version", "kernel", "python", "info", "logs", "guest_uptime_s")}
                st.save()
                return
        finally:
            client.close()

    def _kill(self) -> None:
        st = self.state
        if self.proc is not None:
            state.kill_process(self.proc.pid, st.pid_start, term_timeout_s=3.0)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        else:
            state.kill_process(st.pid, st.pid_start, term_timeout_s=3.0)

    def _fail_cleanup(self) -> None:
        self._kill()
        d = self.state.path
        console = d / "console.log"
        if console.exists():
            try:
                shutil.copyfile(console, d.parent / f".failed-{self.name}.log")
            except OSError:
                pass
        shutil.rmtree(d, ignore_errors=True)

    def down(self) -> None:
        """Stop QEMU (TERM, then KILL) and remove the state directory with its overlay and disk."""
        self._kill()
        if state.is_alive(self.state):
            raise KvbedError(f"VM {self.name}: QEMU pid {self.pid} would not die")
        shutil.rmtree(self.state.path, ignore_errors=True)

    def power_cycle(self, *, boot_timeout_s: float = DEFAULT_BOOT_TIMEOUT_S,
                    log: Callable[[str], None] | None = None) -> dict[str, float]:
        """Pull the plug: SIGKILL QEMU (no flush, no shutdown, nothing in flight finishes), then start it again
        with the same command line on the same disks (overlay and namespace backing file) and wait for the
        agent. Only a VM this process started (its QEMU is our child)."""
        log = log or (lambda s: None)
        if self.proc is None:
            raise KvbedError(f"VM {self.name}: power_cycle needs a VM this process started")
        st = self.state
        t0 = time.monotonic()
        killed_pid = self.proc.pid
        self.proc.kill()
        rc = self.proc.wait(timeout=30)
        killed_s = time.monotonic() - t0
        console = st.file("console.log")
        if console.exists():  # the first boot's console stays readable beside the new one
            shutil.copyfile(console, st.file("console.before-power-loss.log"))
        log(f"VM {st.name}: QEMU killed (SIGKILL, exit status {rc}); starting it again on the same disks")
        t1 = time.monotonic()
        self._spawn(list(st.argv))
        try:
            self._wait_ready(boot_timeout_s)
        except _PortTaken:
            self._kill()
            raise VmDied(f"VM {st.name}: port 127.0.0.1:{st.port} was taken while QEMU was down; the VM could "
                         f"not come back after the power loss") from None
        return {"killed_pid": killed_pid, "qemu_exit_status": rc, "kill_s": round(killed_s, 3),
                "reboot_s": round(time.monotonic() - t1, 3), "restarted_pid": self.pid}

    # --- fault injection for tests ------------------------------------------------------
    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)


class _PortTaken(Exception):
    pass


def _die_with_parent(parent: int) -> Callable[[], None]:
    """preexec_fn: SIGKILL this child when its parent goes (Linux PR_SET_PDEATHSIG), even by SIGKILL."""
    def setup() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return setup


def status() -> list[dict]:
    out = []
    for st in state.list_states():
        alive = state.is_alive(st)
        info = (st.agent or {}).get("info") or {}
        out.append({
            "name": st.name, "device": st.device, "backend": st.backend, "state": ("stopped" if state.is_stopped(st.pid) else "running") if alive else "dead",
            "pid": st.pid, "port": st.port, "accel": st.accel, "boot_s": st.boot_s,
            "uptime_s": round(time.time() - st.ready_unix, 1) if alive and st.ready_unix else 0.0,
            "capacity_bytes": int(info.get("capacity_pages", 0)) * int(info.get("page_bytes", 0)),
            "params": st.params, "dir": st.dir,
        })
    return out


def down(names: list[str] | None = None, *, all_: bool = False) -> list[str]:
    if all_:
        targets = state.list_states()
    else:
        if not names:
            raise KvbedError("down: name a VM (see `kvbed status`) or pass --all")
        targets = [state.find(n) for n in names]
    done = []
    for st in targets:
        Vm(st).down()
        done.append(st.name)
    # forget logs of failed starts too
    root = paths.state_dir()
    if all_ and root.is_dir():
        for f in root.glob(".failed-*.log"):
            f.unlink(missing_ok=True)
    return done
