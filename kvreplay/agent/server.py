"""The agent's request loop: a ZMQ ROUTER socket, one request at a time, in order.

The host may queue several ``ops`` batches (bounded in-flight); they run in
arrival order. A handler that fails answers ``ok: false`` with a one-line error
and the loop goes on; only ``shutdown`` and ``crash`` end the guest.
"""

from __future__ import annotations

import ctypes
from collections import deque
import os
import platform
import sys
import time
import traceback

import zmq

from . import AGENT_VERSION
from .executor import BaseExecutor, OpRefused, not_run
from .nvme import NvmeError
from .wire import (DONE_COLUMNS, OP_COLUMNS, SCAN_COLUMNS, SCAN_DONE_COLUMNS, WIRE_VERSION, WireError, decode,
                   encode)

LINUX_REBOOT_CMD_POWER_OFF = 0x4321FEDC


def log(msg: str) -> None:
    print(f"kvbed-agent: {msg}", file=sys.stderr, flush=True)


class Agent:
    def __init__(self, executor: BaseExecutor | None, *, token: str = "", device: str = "", setup_error: str | None = None):
        self.ex = executor
        self.token = token
        self.device = device
        self.setup_error = setup_error
        self.started = time.monotonic()
        self.failed_groups: deque[int] = deque(maxlen=64)

    # --- handlers: (header, arrays) -> (reply header, arrays, cols) -------------
    def hello(self, h, a):
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return {
            "agent_version": AGENT_VERSION, "wire": WIRE_VERSION, "token": self.token, "device": self.device,
            "setup_error": self.setup_error, "info": self.ex.info() if self.ex else None,
            "logs": self.ex.log_names() if self.ex else [],
            "counters": self.ex.counters.to_dict() if self.ex else None,
            "guest_uptime_s": uptime, "agent_uptime_s": time.monotonic() - self.started,
            "kernel": platform.release(), "python": platform.python_version(), "pid": os.getpid(),
        }, None, None

    def ops(self, h, a):
        ex = self._need_executor()
        missing = [n for n, _ in OP_COLUMNS if n not in a]
        if missing:
            raise WireError(f"ops: missing columns {missing}")
        if "page_bytes" in h and hasattr(ex, "set_page_bytes"):
            ex.set_page_bytes(int(h["page_bytes"]))
        n = len(a["op"])
        group = h.get("group")
        if group is not None and group in self.failed_groups:
            # an earlier chunk of this stream was refused: queued chunks behind it must not reach the device
            return {"n": n, "ran": 0, "error": None, "skipped": True, "counters": ex.counters.to_dict()}, \
                not_run(n), DONE_COLUMNS
        stop = bool(h.get("stop_on_error", True))
        out, ran, err = ex.run(a, stop_on_error=stop, stamp=bool(h.get("stamp")), crc=bool(h.get("crc")),
                               first_index=int(h.get("first_index", 0)))
        if err and stop and group is not None:
            self.failed_groups.append(group)
        return {"n": n, "ran": ran, "error": err, "counters": ex.counters.to_dict()}, out, DONE_COLUMNS

    def scan(self, h, a):
        ex = self._need_executor()
        if not hasattr(ex, "scan"):
            raise OpRefused(-95, f"scan: the {ex.kind} device keeps nothing to scan")
        missing = [n for n, _ in SCAN_COLUMNS if n not in a]
        if missing:
            raise WireError(f"scan: missing columns {missing}")
        if "page_bytes" in h and hasattr(ex, "set_page_bytes"):
            ex.set_page_bytes(int(h["page_bytes"]))
        out, totals = ex.scan(a)
        return totals, out, SCAN_DONE_COLUMNS

    def log(self, h, a):
        ex = self._need_executor()
        logs, errors = {}, {}
        for name in h.get("names") or ex.log_names():
            try:
                logs[name] = ex.log(name)
            except (OpRefused, NvmeError) as exc:
                errors[name] = str(exc)
        return {"logs": logs, "errors": errors}, None, None

    def hist(self, h, a):
        ex = self._need_executor()
        out = {k: v.to_dict() for k, v in ex.counters.hists.items() if v.n}
        return {"hists": out, "counters": ex.counters.to_dict()}, None, None

    def ping(self, h, a):
        return {}, None, None

    def reset(self, h, a):
        ex = self._need_executor()
        ex.counters.reset()
        return {}, None, None

    def stall(self, h, a):
        # fault injection: stop answering for a while (the host must time out, not hang)
        time.sleep(float(h.get("seconds", 60)))
        return {}, None, None

    def crash(self, h, a):
        if os.getpid() != 1:  # only ever panic the guest this agent is init of
            raise OpRefused(-1, "crash is only allowed in the guest (agent as PID 1)")
        log("crash requested: panicking the guest")
        with open("/proc/sysrq-trigger", "w") as f:
            f.write("c")
        return {}, None, None

    def _need_executor(self) -> BaseExecutor:
        if self.ex is None:
            raise OpRefused(-5, f"device setup failed: {self.setup_error}")
        return self.ex

    # --- loop ----------------------------------------------------------------------
    def stop(self) -> None:
        self.stopping = True

    def serve(self, port: int, *, host: str = "0.0.0.0") -> None:
        self.stopping = False
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.bind(f"tcp://{host}:{port}")
        log(f"ready on port {port} (device={self.device}, token={self.token})")
        try:
            self._loop(sock)
        finally:
            sock.close(linger=0)
            ctx.term()

    def _loop(self, sock) -> None:
        handlers = {"hello": self.hello, "ping": self.ping, "ops": self.ops, "log": self.log, "hist": self.hist, "reset": self.reset,
                    "scan": self.scan, "stall": self.stall, "crash": self.crash, "shutdown": None}
        while not self.stopping:
            if not sock.poll(200):
                continue
            frames = sock.recv_multipart(copy=True)
            ident, frames = frames[0], frames[1:]
            rid = None
            try:
                h, a = decode(frames)
                rid = h.get("id")
                cmd = h.get("cmd")
                if cmd not in handlers:
                    raise WireError(f"unknown command {cmd!r}")
                if cmd == "shutdown":
                    sock.send_multipart([ident] + encode({"id": rid, "ok": True}))
                    time.sleep(0.2)
                    self.power_off()
                    return
                rh, arrays, cols = handlers[cmd](h, a)
                rh.update({"id": rid, "ok": True})
                reply = encode(rh, arrays, cols)
            except (WireError, OpRefused, NvmeError, OSError, ValueError, KeyError, TypeError) as exc:
                reply = encode({"id": rid, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
            except Exception as exc:  # keep serving; the host gets the one-line reason
                traceback.print_exc()
                reply = encode({"id": rid, "ok": False, "error": f"agent internal error: {type(exc).__name__}: {exc}"})
            sock.send_multipart([ident] + reply)

    @staticmethod
    def power_off() -> None:
        if os.getpid() != 1:  # never power off a machine the agent is not init of
            log("shutdown: not PID 1, just exiting")
            return
        os.sync()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.reboot(LINUX_REBOOT_CMD_POWER_OFF)
