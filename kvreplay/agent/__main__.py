"""Guest entry point: ``python3 -m kvbed_agent`` (PID 1 after the image's init script).

Settings come from the kernel command line the host built: ``kvbed.device=``
(conv|fdp|zns|cxl), ``kvbed.token=`` (echoed in ``hello`` so the host knows it
reached its own VM, not whatever else listens on a port) and ``kvbed.port=``.
A device that fails to set up does not stop the agent: ``hello`` reports the
reason, so the host prints it instead of timing out.
"""

from __future__ import annotations

import glob
import sys
import time

from .server import Agent, log
from .wire import AGENT_PORT


def kernel_args(path: str = "/proc/cmdline") -> dict[str, str]:
    try:
        with open(path) as f:
            words = f.read().split()
    except OSError:
        words = []
    return {k[len("kvbed."):]: v for k, _, v in (w.partition("=") for w in words) if k.startswith("kvbed.")}


def make_executor(device: str):
    if device == "cxl":
        from .cxl import CxlExecutor, setup_region

        return CxlExecutor(setup_region(log))
    from .executor import NvmeExecutor
    from .nvme import NvmeDevice

    end = time.monotonic() + 20
    while not glob.glob("/dev/nvme0n1"):
        if time.monotonic() > end:
            raise RuntimeError("no /dev/nvme0n1 appeared within 20 s")
        time.sleep(0.05)
    return NvmeExecutor(NvmeDevice("nvme0n1", "nvme0"))


def main(argv: list[str] | None = None) -> int:
    args = kernel_args()
    for a in argv if argv is not None else sys.argv[1:]:
        k, _, v = a.partition("=")
        args[k.lstrip("-")] = v
    device = args.get("device", "conv")
    port = int(args.get("port", AGENT_PORT))
    ex, err = None, None
    try:
        ex = make_executor(device)
        log(f"device {device}: {ex.info()}")
    except Exception as exc:  # reported through hello
        err = f"{type(exc).__name__}: {exc}"
        log(f"device setup failed: {err}")
    Agent(ex, token=args.get("token", ""), device=device, setup_error=err).serve(port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
