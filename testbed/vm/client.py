"""Host side of the agent protocol: a ZMQ DEALER with request ids and hard timeouts.

A DEALER (not REQ) socket lets several requests be in flight and never wedges
after a lost reply; each reply carries the request id, and stale replies (from
a request that already timed out) are dropped. Every wait is sliced into short
polls that also ask ``alive()`` whether the VM still exists, so a killed QEMU
is reported at once instead of after the reply timeout.
"""

from __future__ import annotations

import time
from typing import Callable

import msgspec
import numpy as np
import zmq

from kvreplay.agent.wire import WIRE_VERSION, encode
from kvreplay.replay.target import TargetFailed

POLL_SLICE_MS = 100


class VmError(TargetFailed):
    """The VM or its agent failed; ``partial`` holds what completed before (if a stream was running)."""


class AgentTimeout(VmError):
    pass


class VmDied(VmError):
    pass


class AgentError(VmError):
    """The agent answered ok=false (bad request, device refused an op, setup failure)."""


_np_codes = {"b": np.int8, "h": np.int16, "i": np.int32, "I": np.uint32, "q": np.int64}
_header_decoder = msgspec.json.Decoder(dict)


def decode_reply(frames: list[bytes]) -> tuple[dict, dict[str, np.ndarray]]:
    try:
        header = _header_decoder.decode(frames[0])
    except msgspec.DecodeError as exc:
        raise VmError(f"agent sent a malformed header: {exc}") from None
    if header.get("v") != WIRE_VERSION:
        raise VmError(f"agent speaks wire version {header.get('v')!r}, this kvbed speaks {WIRE_VERSION}: rebuild the image")
    cols = header.get("cols") or []
    if len(cols) != len(frames) - 1:
        raise VmError(f"agent reply names {len(cols)} columns but carries {len(frames) - 1}")
    arrays = {}
    for (name, code), buf in zip(cols, frames[1:]):
        arrays[name] = np.frombuffer(buf, dtype=_np_codes[code])
    return header, arrays


class AgentClient:
    def __init__(self, port: int, *, host: str = "127.0.0.1", alive: Callable[[], str | None] | None = None,
                 where: str | None = None):
        self.endpoint = f"tcp://{host}:{port}"
        self.alive = alive or (lambda: None)
        self.where = where
        self.ctx = zmq.Context.instance()
        self.sock = None
        self._next_id = 0
        self._pending: dict[int, tuple[dict, dict]] = {}
        self._open()

    def _open(self) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.IMMEDIATE, 1)  # queue only on a live connection
        self.sock.connect(self.endpoint)
        self._pending.clear()

    def reconnect(self) -> None:
        self._open()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
            self.sock = None

    def send(self, cmd: str, header: dict | None = None, arrays=None, cols=None, *, timeout_s: float = 10.0) -> int:
        self._next_id += 1
        rid = self._next_id
        h = dict(header or {}, cmd=cmd, id=rid)
        frames = encode(h, arrays, cols)
        end = time.monotonic() + timeout_s
        while True:
            try:
                self.sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                return rid
            except zmq.Again:
                self._check_alive()
                if time.monotonic() > end:
                    raise AgentTimeout(f"could not send '{cmd}' to the agent at {self.endpoint} within {timeout_s:g} s",
                                       where=self.where) from None
                time.sleep(POLL_SLICE_MS / 1000)

    def recv(self, rid: int, *, timeout_s: float, what: str = "reply") -> tuple[dict, dict[str, np.ndarray]]:
        if rid in self._pending:
            return self._finish(self._pending.pop(rid))
        end = time.monotonic() + timeout_s
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise AgentTimeout(f"the agent did not answer {what} within {timeout_s:g} s", where=self.where)
            if self.sock.poll(min(POLL_SLICE_MS, max(1, int(left * 1000)))):
                frames = self.sock.recv_multipart(copy=True)
                h, a = decode_reply(frames)
                got = h.get("id")
                if got == rid:
                    return self._finish((h, a))
                if isinstance(got, int) and got > rid:
                    self._pending[got] = (h, a)
                continue  # a stale reply to a request that already timed out
            self._check_alive()

    def _finish(self, reply):
        h, a = reply
        if not h.get("ok"):
            raise AgentError(f"agent: {h.get('error', 'unknown error')}", where=self.where)
        return h, a

    def _check_alive(self) -> None:
        reason = self.alive()
        if reason:
            raise VmDied(reason, where=self.where)

    def request(self, cmd: str, header: dict | None = None, arrays=None, cols=None, *, timeout_s: float = 30.0):
        rid = self.send(cmd, header, arrays, cols, timeout_s=timeout_s)
        return self.recv(rid, timeout_s=timeout_s, what=f"'{cmd}'")
