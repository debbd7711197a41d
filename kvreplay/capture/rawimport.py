"""Decode a raw capture file again into a lifecycle trace (``kvbed trace import vllm-events FILE``).

The geometry, topic and medium table are those the capture recorded in the raw file's header, and
records are fed in file order through the same session as the live capture, so the trace is the
one the capture wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from kvreplay.capture.lifecycle import LifecycleMapper
from kvreplay.capture.params import CaptureParams
from kvreplay.capture.rawfile import REPLAY, RawReader
from kvreplay.capture.session import CaptureSession
from kvreplay.capture.subscriber import build_meta
from kvreplay.importers.base import source_info
from kvreplay.schema import TraceMeta, TraceWriter
from kvbed.core.errors import KvbedError

CHUNK_ROWS = 1 << 20


def import_raw(importer: str, path: Path, writer: TraceWriter,
               warn: Callable[[str], None] = lambda s: None) -> TraceMeta:
    r = RawReader(path)
    h = r.header
    try:
        params = CaptureParams(model=h.get("model", CaptureParams.model), kv_dtype=h.get("kv_dtype", "bf16"),
                               tokens_per_block=int(h.get("tokens_per_block", 16)),
                               topic=str(h.get("topic", ""))).validate()
    except (KvbedError, TypeError, ValueError) as exc:
        raise KvbedError(f"raw capture header: {exc}", where=str(path)) from None
    media = h.get("media") or None
    endpoints = [str(e) for e in h["endpoints"]]
    mapper = LifecycleMapper(params.bytes_per_token, params.tokens_per_block, media, str(h.get("engine") or "vllm"))
    session = CaptureSession(endpoints, mapper, params.topic, warn)
    for i, rec in enumerate(r.records()):
        if not 0 <= rec.publisher < len(endpoints):
            raise KvbedError(f"record {i}: publisher {rec.publisher} not in the header's {len(endpoints)} endpoints",
                             where=str(path))
        if rec.source == REPLAY:
            session.feed_replay(rec.publisher, rec.frames)
        else:
            session.feed_live(rec.publisher, rec.frames, rec.arrival_ns)
        if mapper.pending() >= CHUNK_ROWS:
            writer.set_string_tables(mapper.tenants, mapper.scopes or ["default"])
            writer.write(mapper.take())
    writer.set_string_tables(mapper.tenants, mapper.scopes or ["default"])
    writer.write(mapper.take())
    if r.truncated:
        warn(f"{path}: the last record is cut short (capture killed mid-write); decoded everything before it")
    extra = {"started_unix_ns": h.get("started_unix_ns"), "raw_truncated": r.truncated, "complete": True}
    src = {**source_info(importer, path), "engine": h.get("engine"), "endpoints": endpoints,
           "replay": h.get("replay", [])}
    return build_meta(params, endpoints, list(h.get("replay", [])), str(h.get("engine")), session, mapper,
                      media or {}, extra, source=src)
