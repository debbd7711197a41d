"""Choose KVM or TCG once per host, never hanging on a broken KVM.

A usable-looking /dev/kvm is not enough: on a host that is itself a VM with a
para-virtual KVM (kvm_pvm), a guest kernel dies with "KVM internal error ...
emulation failure" after ~20 s of firmware. So the probe is layered, each step
bounded: /dev/kvm must open; a kvm_pvm host is refused outright; a 64 KiB test
firmware that writes one byte to isa-debug-exit must finish within seconds.
The verdict is cached (keyed by host kernel, QEMU version and CPU), and a VM
that still fails under KVM at boot marks the cache so later runs go to TCG.
``KVBED_ACCEL=kvm|tcg`` forces a choice.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kvbed.core.atomicio import write_json
from kvbed.core.errors import KvbedError
from testbed.vm import paths

PROBE_TIMEOUT_S = 5.0
_EXIT_VALUE = 0x2A  # the probe firmware writes this; QEMU exits with (v << 1) | 1


@dataclass(frozen=True)
class AccelChoice:
    accel: str  # "kvm" or "tcg"
    reason: str
    cached: bool = False


def qemu_version(qemu_bin: str = "qemu-system-x86_64") -> str:
    try:
        out = subprocess.run([qemu_bin, "--version"], capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        raise KvbedError(f"{qemu_bin} not found: run scripts/setup_host.sh (QEMU 10 from bookworm-backports)") from None
    except subprocess.TimeoutExpired:
        raise KvbedError(f"{qemu_bin} --version did not finish in 10 s") from None
    first = out.stdout.splitlines()[0] if out.stdout else ""
    return first.replace("QEMU emulator version ", "").strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def host_key(qemu_bin: str = "qemu-system-x86_64") -> str:
    return f"{platform.release()}|{qemu_version(qemu_bin)}|{_cpu_model()}"


def _cache_file() -> Path:
    return paths.cache_dir() / "accel.json"


def _load_cache() -> dict:
    try:
        return json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}


def remember(key: str, accel: str, reason: str) -> None:
    data = _load_cache()
    data[key] = {"accel": accel, "reason": reason}
    write_json(_cache_file(), data)


def probe_firmware() -> bytes:
    """64 KiB firmware: at the reset vector, ``mov al, 0x2a; out 0xf4, al; hlt; jmp $-1``."""
    rom = bytearray(b"\xf4" * 65536)
    code = bytes([0xB0, _EXIT_VALUE, 0xE6, 0xF4, 0xF4, 0xEB, 0xFD])
    rom[0xFFF0:0xFFF0 + len(code)] = code
    return bytes(rom)


def probe_kvm(qemu_bin: str = "qemu-system-x86_64", timeout_s: float = PROBE_TIMEOUT_S, *,
              kvm_dev: str = "/dev/kvm", modules_dir: str = "/sys/module") -> tuple[bool, str]:
    """Run the probe firmware under KVM; (usable, reason). Bounded by ``timeout_s``."""
    if not os.path.exists(kvm_dev):
        return False, f"no {kvm_dev}"
    try:
        fd = os.open(kvm_dev, os.O_RDWR)
        os.close(fd)
    except OSError as exc:
        return False, f"{kvm_dev} not usable: {exc.strerror}"
    if Path(modules_dir, "kvm_pvm").exists():
        return False, "host KVM is kvm_pvm (para-virtual, shadow paging): standard guests die with emulation failures"
    with tempfile.NamedTemporaryFile(prefix="kvbed-probe-", suffix=".rom") as f:
        f.write(probe_firmware())
        f.flush()
        argv = [qemu_bin, "-accel", "kvm", "-machine", "q35", "-cpu", "host", "-m", "64M", "-nodefaults",
                "-no-user-config", "-display", "none", "-bios", f.name,
                "-device", "isa-debug-exit,iobase=0xf4,iosize=1"]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False, f"KVM probe did not finish in {timeout_s:g} s"
    if p.returncode == (_EXIT_VALUE << 1) | 1:
        return True, "KVM probe passed"
    err = (p.stderr.strip().splitlines() or ["no output"])[0]
    return False, f"KVM probe failed (exit {p.returncode}): {err}"


def choose(requested: str = "auto", qemu_bin: str = "qemu-system-x86_64") -> AccelChoice:
    requested = (os.environ.get("KVBED_ACCEL") or requested or "auto").lower()
    if requested in ("kvm", "tcg"):
        return AccelChoice(requested, "requested")
    if requested != "auto":
        raise KvbedError(f"accel must be auto, kvm or tcg, got {requested!r}")
    key = host_key(qemu_bin)
    hit = _load_cache().get(key)
    if hit and hit.get("accel") in ("kvm", "tcg"):
        return AccelChoice(hit["accel"], hit.get("reason", ""), cached=True)
    ok, reason = probe_kvm(qemu_bin)
    accel = "kvm" if ok else "tcg"
    remember(key, accel, reason)
    return AccelChoice(accel, reason)
