"""A fake engine for the capture tests: a real PUB socket sending the exact KV event wire format of
each vLLM/SGLang vintage, and a ROUTER replay socket answering like the engines' (both reply shapes)."""

from __future__ import annotations

import socket
import threading
from typing import Any

import msgspec
import zmq

END = (-1).to_bytes(8, "big", signed=True)


def stored(hashes, parent=None, bs=16, medium="GPU", lora_id=None, lora_name=None, extra_keys=None,
           vintage="vllm-array", salt=None, session=None, hashes_as_bytes=False) -> Any:
    """One BlockStored event in the encoding of ``vintage``."""
    if hashes_as_bytes:
        hashes = [b"\xaa" * 24 + h.to_bytes(8, "big") for h in hashes]
        parent = None if parent is None else b"\xaa" * 24 + parent.to_bytes(8, "big")
    toks = list(range(bs * len(hashes)))
    if vintage == "vllm-v0.8":  # the first release: no medium
        return ["BlockStored", hashes, parent, toks, bs, lora_id]
    if vintage == "vllm-array":
        return ["BlockStored", hashes, parent, toks, bs, lora_id, medium, lora_name, extra_keys, 0, "full", None]
    if vintage == "sglang-array":
        return ["BlockStored", hashes, parent, toks, bs, lora_id, medium]
    ev = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": toks,
          "block_size": bs, "lora_id": lora_id, "medium": medium}
    if vintage == "vllm-map":
        ev.update(lora_name=lora_name, extra_keys=extra_keys, group_idx=0, kv_cache_spec_kind="full",
                  locality="LOCAL")
    if vintage == "sglang-map":
        ev.update(cache_salt=salt, session_id=session)
    return ev


def removed(hashes, medium="GPU", vintage="vllm-array", hashes_as_bytes=False) -> Any:
    if hashes_as_bytes:
        hashes = [b"\xaa" * 24 + h.to_bytes(8, "big") for h in hashes]
    if vintage == "vllm-v0.8":
        return ["BlockRemoved", hashes]
    if vintage in ("vllm-array", "sglang-array"):
        return ["BlockRemoved", hashes, medium]
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium}


def cleared(vintage="vllm-array") -> Any:
    return ["AllBlocksCleared"] if "array" in vintage or vintage == "vllm-v0.8" else {"type": "AllBlocksCleared"}


def batch(ts: float, events: list, rank: int | None = None, shape: str = "array", engine: str = "vllm") -> bytes:
    if shape == "array":
        return msgspec.msgpack.encode([ts, events] + ([rank] if rank is not None else []))
    key = "attn_dp_rank" if engine == "sglang" else "data_parallel_rank"
    return msgspec.msgpack.encode({"ts": ts, "events": events, key: rank})


class FakeEngine:
    """PUB on ``pub`` (bound), optional ROUTER replay on ``replay``; ``drop`` seqs are buffered but not sent
    live (as if the network lost them); ``unreplayable`` seqs are missing from the replay buffer too."""

    def __init__(self, ctx: zmq.Context, pub: str, replay: str | None = None, topic: bytes = b"",
                 reply_shape: str = "seq", drop: set[int] = frozenset(), unreplayable: set[int] = frozenset()):
        self.sock = ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 100_000)
        self.sock.bind(pub)
        self.topic, self.reply_shape, self.drop, self.unreplayable = topic, reply_shape, drop, unreplayable
        self.buffer: list[tuple[int, bytes]] = []
        self.seq = 0
        self.replays = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        if replay:
            self.router = ctx.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 0)
            self.router.bind(replay)
            self._thread = threading.Thread(target=self._serve, daemon=True)
            self._thread.start()

    def send(self, payload: bytes, frames: list[bytes] | None = None) -> int:
        seq = self.seq
        self.seq += 1
        with self._lock:
            if seq not in self.unreplayable:
                self.buffer.append((seq, payload))
        if seq not in self.drop:
            self.sock.send_multipart(frames or [self.topic, seq.to_bytes(8, "big"), payload])
        return seq

    def send_raw(self, frames: list[bytes]) -> None:
        self.sock.send_multipart(frames)

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(50):
                continue
            ident, empty, start = self.router.recv_multipart()
            start = int.from_bytes(start, "big")
            self.replays += 1
            with self._lock:
                items = [(s, p) for s, p in self.buffer if s >= start]
            for s, p in items:
                mid = [s.to_bytes(8, "big"), p] if self.reply_shape == "seq" else [self.topic, s.to_bytes(8, "big"), p]
                self.router.send_multipart([ident, b""] + mid)
            self.router.send_multipart([ident, b""] + ([END, b""] if self.reply_shape == "seq" else [self.topic, END, b""]))

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
            self.router.close(0)
        self.sock.close(0)


def free_port() -> int:
    """A loopback TCP port nobody holds right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def endpoints() -> tuple[str, str]:
    """(PUB, ROUTER) endpoints of a fake engine on two free loopback ports."""
    a, b = free_port(), free_port()
    return f"tcp://127.0.0.1:{a}", f"tcp://127.0.0.1:{b}"
