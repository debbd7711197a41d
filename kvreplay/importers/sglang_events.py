"""SGLang KV events (``--kv-events-config``) recorded by ``kvbed trace capture --raw``: lifecycle events
directly, no tier simulation (the format is :mod:`kvreplay.capture.rawfile`)."""

from __future__ import annotations

from pathlib import Path

from kvreplay.importers.base import IMPORTERS, Importer
from kvreplay.schema import TraceMeta, TraceWriter


@IMPORTERS.register("sglang-events")
class SglangEventsImporter(Importer):
    level = "event"
    description = "raw capture of SGLang's ZMQ KV event stream (kvbed trace capture --raw)"

    def write_events(self, path: Path, writer: TraceWriter) -> TraceMeta:
        from kvreplay.capture.rawimport import import_raw

        return import_raw(self.name, path, writer)
