"""Live capture: subscribe to engine KV event publishers like a real consumer and write a trace.

One SUB socket per publisher (engine instance or data-parallel rank: rank r publishes on port+r),
subscribed to every topic so a wrong topic is reported instead of silently never arriving. The
socket connects to the engine's endpoint, or binds when the endpoint has ``*`` (an engine configured
to connect to a collector). A sequence jump - or a first message after seq 0, when the capture
joined late - asks the publisher's replay ROUTER (a DEALER here, REQ-style envelope) for everything
from the first missing sequence before the live message is taken; what the replay cannot give
counts as lost. Arrival times come from the wall clock (the raw file records them).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import zmq

from kvreplay.capture import mapkernel
from kvreplay.capture.checkpoint import CheckpointWriter
from kvreplay.capture.lifecycle import LifecycleMapper
from kvreplay.capture.params import CaptureParams
from kvreplay.capture.rawfile import LIVE, REPLAY, RawWriter
from kvreplay.capture.session import CaptureSession
from kvreplay.schema import TraceMeta
from kvbed.core.errors import KvbedError

SUB_HWM = 100_000  # the engines' own send high-water mark
DRAIN = 256  # messages taken from one socket before looking at the others (fairness, timers)


@dataclass
class CaptureResult:
    output: Path
    rows: int
    elapsed_s: float
    facts: dict[str, Any]
    flushes: int
    flush_seconds: float
    stopped_by: str


def _check_endpoint(ep: str, what: str) -> None:
    if "://" not in ep:
        raise KvbedError(f"{what} {ep!r}: expected a ZMQ endpoint such as tcp://HOST:5557 or ipc:///path")


def build_meta(params: CaptureParams, endpoints: list[str], replay: list[str], engine: str,
               session: CaptureSession, mapper: LifecycleMapper, media: dict[str, str],
               extra: dict[str, Any], source: dict[str, Any] | None = None) -> TraceMeta:
    bpt = params.bytes_per_token
    facts = session.facts()
    facts["per_publisher"] = [p.to_dict() for p in session.pubs]
    return TraceMeta(
        source=source or {"importer": f"{engine}-events", "capture": True, "endpoints": endpoints, "replay": replay},
        geometry={"model": params.model, "kv_dtype": params.kv_dtype, "bytes_per_token": bpt,
                  "tokens_per_object": params.tokens_per_block, "object_bytes": params.tokens_per_block * bpt},
        generator={"capture": dataclasses.asdict(params), "media": media},
        source_facts=facts,
        extra={"sessions": mapper.session_names, "scopes": list(mapper.scopes), **extra},
    )


class LiveCapture:
    def __init__(self, endpoints: list[str], out: Path, params: CaptureParams, *, replay: list[str] = (),
                 raw: Path | None = None, engine: str = "vllm", media: dict[str, str] | None = None,
                 warn: Callable[[str], None] = lambda s: None,
                 progress: Callable[[dict[str, Any]], None] = lambda d: None):
        if not endpoints:
            raise KvbedError("give at least one --zmq ENDPOINT")
        for ep in endpoints:
            _check_endpoint(ep, "--zmq")
        for ep in replay:
            _check_endpoint(ep, "--replay")
        if replay and len(replay) != len(endpoints):
            raise KvbedError(f"{len(replay)} --replay endpoints for {len(endpoints)} --zmq endpoints: give one "
                             "per publisher, in the same order, or none")
        if len(set(endpoints)) != len(endpoints):
            raise KvbedError("an endpoint is given twice in --zmq")
        self.endpoints, self.replay, self.out, self.p = list(endpoints), list(replay), Path(out), params
        self.raw_path, self.engine, self.warn, self.progress = raw, engine, warn, progress
        from kvreplay.capture.lifecycle import MEDIA

        self.media = dict(media or MEDIA)
        self.mapper = LifecycleMapper(params.bytes_per_token, params.tokens_per_block, self.media, engine)
        mapkernel.warm()  # the mapping kernels loaded before subscribing, not while the first batches queue up
        # through self.warn at call time: a caller that sets ``warn`` after construction is heard too
        self.session = CaptureSession(self.endpoints, self.mapper, params.topic, lambda s: self.warn(s))

    # ------------------------------------------------------------------ replay
    def _replay(self, ctx: zmq.Context, dealers: list, pub: int, start: int, raw: RawWriter | None) -> None:
        sock = dealers[pub]
        sock.send_multipart([b"", start.to_bytes(8, "big", signed=True)])
        deadline = time.monotonic() + self.p.replay_timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000) + 1):
                self.session.warn_once(("replay-timeout", pub),
                                       f"{self.endpoints[pub]}: no complete replay from {self.replay[pub]} within "
                                       f"{self.p.replay_timeout_s:g}s; the rest of the gap counts as lost (further "
                                       "ones too, not warned again)")
                sock.close(linger=0)  # late replies must not be read as answers to the next request
                dealers[pub] = self._dealer(ctx, pub)
                return
            frames = sock.recv_multipart()
            if raw is not None:
                raw.write(time.time_ns(), pub, REPLAY, frames)
            if not self.session.feed_replay(pub, frames):
                return

    def _dealer(self, ctx: zmq.Context, pub: int) -> zmq.Socket:
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(self.replay[pub])
        return s

    # ------------------------------------------------------------------ main loop
    def run(self, stop: Callable[[], bool] = lambda: False) -> CaptureResult:
        p = self.p
        ctx = zmq.Context()
        subs, dealers, raw = [], [], None
        ck = CheckpointWriter(self.out, p.flush_s)
        started_ns = time.time_ns()
        t0 = time.monotonic()
        stopped_by = "signal"
        try:
            for ep in self.endpoints:
                s = ctx.socket(zmq.SUB)
                s.setsockopt(zmq.RCVHWM, SUB_HWM)
                s.setsockopt(zmq.LINGER, 0)
                s.setsockopt(zmq.SUBSCRIBE, b"")
                try:
                    s.bind(ep) if "*" in ep else s.connect(ep)
                except zmq.ZMQError as exc:
                    raise KvbedError(f"--zmq {ep}: {exc}") from None
                subs.append(s)
            for i in range(len(self.replay)):
                try:
                    dealers.append(self._dealer(ctx, i))
                except zmq.ZMQError as exc:
                    raise KvbedError(f"--replay {self.replay[i]}: {exc}") from None
            if self.raw_path is not None:
                raw = RawWriter(self.raw_path, {
                    "engine": self.engine, "endpoints": self.endpoints, "replay": self.replay,
                    "topic": p.topic, "model": p.model, "kv_dtype": p.kv_dtype,
                    "tokens_per_block": p.tokens_per_block, "media": self.media, "started_unix_ns": started_ns})
            poller = zmq.Poller()
            for s in subs:
                poller.register(s, zmq.POLLIN)
            index = {s: i for i, s in enumerate(subs)}
            quiet_warned = [False] * len(subs)
            last_seen = [time.monotonic()] * len(subs)
            next_progress = 0.0
            sess = self.session
            while True:
                if stop():
                    break
                now = time.monotonic()
                if p.duration_s and now - t0 >= p.duration_s:
                    stopped_by = "duration"
                    break
                ready = poller.poll(100)
                for s, _ in ready:
                    i = index[s]
                    for _ in range(DRAIN):
                        try:
                            frames = s.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        arrival = time.time_ns()
                        last_seen[i] = time.monotonic()
                        if quiet_warned[i]:
                            quiet_warned[i] = False
                            self.warn(f"{self.endpoints[i]}: publishing again")
                        if dealers and len(frames) == 3 and len(frames[1]) == 8 \
                                and frames[0].startswith(sess.topic):
                            start = sess.needs_replay(i, int.from_bytes(frames[1], "big", signed=True))
                            if start is not None:
                                self._replay(ctx, dealers, i, start, raw)
                        if raw is not None:
                            raw.write(arrival, i, LIVE, frames)
                        sess.feed_live(i, frames, arrival)
                now = time.monotonic()
                for i in range(len(subs)):
                    if not quiet_warned[i] and now - last_seen[i] >= p.quiet_s:
                        quiet_warned[i] = True
                        what = "sent nothing" if sess.pubs[i].messages == 0 else "gone quiet"
                        self.warn(f"{self.endpoints[i]}: {what} for {now - last_seen[i]:.0f}s")
                if ck.due():
                    self._flush(ck, raw, started_ns)
                if now >= next_progress:
                    next_progress = now + 0.5
                    self.progress(self._live(now - t0, last_seen, now))
        except KeyboardInterrupt:
            stopped_by = "signal"
        finally:
            try:
                self._flush(ck, raw, started_ns, final=True)
            finally:
                if raw is not None:
                    raw.close()
                for s in subs + dealers:
                    s.close(linger=0)
                ctx.term()
        return CaptureResult(self.out, ck.rows, time.monotonic() - t0, self.session.facts(), ck.flushes,
                             ck.flush_seconds, stopped_by)

    def _flush(self, ck: CheckpointWriter, raw: RawWriter | None, started_ns: int, final: bool = False) -> None:
        if raw is not None:
            raw.flush()
        extra = {"started_unix_ns": started_ns, "flushed_unix_ns": time.time_ns(), "complete": final}
        if self.raw_path is not None:
            extra["raw"] = str(self.raw_path)
        meta = build_meta(self.p, self.endpoints, self.replay, self.engine, self.session, self.mapper, self.media,
                          extra)
        ck.flush(self.mapper.take(), meta, self.mapper.tenants, self.mapper.scopes, wait=final)

    def _live(self, elapsed: float, last_seen: list[float], now: float) -> dict[str, Any]:
        f = self.session.facts()
        f["elapsed_s"] = elapsed
        f["rows"] = self.mapper.pending()
        f["last_seen_s"] = [now - t for t in last_seen]
        return f
