"""The full emulator command line of one VM: the VM device's machine, memory and kernel arguments
(:mod:`testbed.vm.qemu`) around the backend's firmware and device arguments (:mod:`testbed.vm.backends`).

It stands on both, so neither needs the other's caller; nothing here starts a process, so it is unit-tested
without QEMU.
"""

from __future__ import annotations

import shlex
from typing import Any

from kvbed.core.errors import KvbedError
from testbed.vm.backends import backend as get_backend
from testbed.vm.qemu import QEMU_BIN, VmParams, VmPaths, device

GUEST_IP = "10.0.2.15"


def build_argv(device_name: str, p: dict[str, Any], paths: VmPaths, *, accel: str, host_port: int, token: str,
               qemu_bin: str = QEMU_BIN, guest_port: int = 5555, backend: str = "qemu") -> list[str]:
    """The full QEMU command line for one VM; ``backend`` (testbed.vm.backends) gives the device args."""
    be = get_backend(backend)
    dev = device(device_name)
    vm: VmParams = p["vm"]
    if accel not in ("kvm", "tcg"):
        raise KvbedError(f"accel must be kvm or tcg, got {accel!r}")
    cpu = ("host" if accel == "kvm" else "max") + dev.cpu_flags()
    append = " ".join([
        "console=ttyS0", "panic=-1", "quiet", "loglevel=4", "mitigations=off",
        f"kvbed.device={device_name}", f"kvbed.token={token}", f"kvbed.port={guest_port}",
        *dev.kernel_args(p),
    ])
    argv = [
        qemu_bin,
        "-name", f"kvbed-{token}",
        "-machine", f"q35{dev.machine_opts}",
        "-accel", accel,
        "-cpu", cpu,
        "-smp", str(vm.cpus),
        "-m", dev.mem_args(p),
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
    ]
    bios, fw_args = be.firmware()
    argv += fw_args
    if not dev.needs_seabios:
        argv += ["-bios", bios]
    argv += [
        "-kernel", str(paths.kernel), "-initrd", str(paths.initrd), "-append", append,
        "-serial", f"file:{paths.console}",
        "-qmp", f"unix:{paths.qmp},server=on,wait=off",
        "-drive", f"file={paths.overlay},if=none,id=root,format=qcow2,cache=unsafe",
        "-device", "virtio-blk-pci,drive=root,bus=pcie.0",
        "-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{host_port}-{GUEST_IP}:{guest_port}",
        "-device", "virtio-net-pci,netdev=n0,bus=pcie.0",
    ]
    argv += be.device_args(device_name, p, paths)
    return argv


def describe(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)
