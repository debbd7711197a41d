"""Per-VM state directory: what `kvbed status` and `kvbed down` need after `kvbed up` has exited.

``<state_dir>/<name>/state.json`` records the QEMU pid together with the
process start time (so a recycled pid is never mistaken for our VM), the
loopback port, the parameters and the files; the overlay, the NVMe backing
file, the console and QEMU logs live beside it and go away with ``down``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kvbed.core.atomicio import write_json
from kvbed.core.errors import KvbedError
from testbed.vm import paths

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
STATE_FILE = "state.json"


def check_name(name: str) -> str:
    if not NAME_RE.match(name or ""):
        raise KvbedError(f"VM name must be 1-32 of [a-z0-9_-] starting with a letter or digit, got {name!r}")
    return name


@dataclass
class VmState:
    name: str
    device: str
    dir: str
    backend: str = "qemu"  # testbed.vm.backends entry (qemu, femu)
    pid: int = 0
    pid_start: int = 0  # /proc/<pid>/stat field 22 (start time in clock ticks since boot)
    port: int = 0
    token: str = ""
    accel: str = ""
    accel_reason: str = ""
    image: str = ""
    params: dict = field(default_factory=dict)
    argv: list = field(default_factory=list)
    created_unix: float = 0.0
    ready_unix: float = 0.0
    boot_s: float = 0.0
    agent: dict = field(default_factory=dict)  # hello reply at readiness (device info, versions)

    @property
    def path(self) -> Path:
        return Path(self.dir)

    def file(self, name: str) -> Path:
        return self.path / name

    def save(self) -> None:
        write_json(self.path / STATE_FILE, asdict(self))

    @classmethod
    def load(cls, d: Path) -> "VmState":
        try:
            data = json.loads((d / STATE_FILE).read_text())
            return cls(**data)
        except (OSError, ValueError, TypeError) as exc:
            raise KvbedError(f"{d / STATE_FILE}: unreadable VM state ({exc})") from None


def proc_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` or None if it is gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rindex(")") + 2:].split()
    if rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


def is_alive(st: VmState) -> bool:
    if st.pid <= 0:
        return False
    ticks = proc_start_ticks(st.pid)
    return ticks is not None and (st.pid_start == 0 or ticks == st.pid_start)


def is_stopped(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return raw[raw.rindex(")") + 2:].split()[0] in ("T", "t")


def list_states() -> list[VmState]:
    root = paths.state_dir()
    if not root.is_dir():
        return []
    out = []
    for d in sorted(root.iterdir()):
        if d.is_dir() and (d / STATE_FILE).is_file():
            try:
                out.append(VmState.load(d))
            except KvbedError:
                continue
    return out


def find(name: str) -> VmState:
    d = paths.state_dir() / check_name(name)
    if not (d / STATE_FILE).is_file():
        running = ", ".join(s.name for s in list_states()) or "none"
        raise KvbedError(f"no VM named {name!r} (VMs: {running})")
    return VmState.load(d)


def kill_process(pid: int, pid_start: int, *, term_timeout_s: float = 5.0) -> bool:
    """SIGTERM (after SIGCONT, for a stopped QEMU), then SIGKILL; True if the process is gone."""
    def ours() -> bool:
        t = proc_start_ticks(pid)
        return t is not None and (pid_start == 0 or t == pid_start)

    if pid <= 0 or not ours():
        return True
    for sig in (signal.SIGCONT, signal.SIGTERM):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
    end = time.monotonic() + term_timeout_s
    while time.monotonic() < end:
        if not ours():
            return True
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    end = time.monotonic() + 5.0
    while time.monotonic() < end:
        if not ours():
            return True
        time.sleep(0.05)
    return not ours()
