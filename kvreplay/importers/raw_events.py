"""What the engines' raw capture importers share: the engines differ only in how their frames decode, which
the raw file's header names (the format is :mod:`kvreplay.capture.rawfile`)."""

from __future__ import annotations

from pathlib import Path

from kvreplay.importers.base import Importer
from kvreplay.schema import TraceMeta, TraceWriter


class RawEventsImporter(Importer):
    level = "event"

    def write_events(self, path: Path, writer: TraceWriter) -> TraceMeta:
        from kvreplay.capture.rawimport import import_raw  # the capture stack (zmq) only when used

        return import_raw(self.name, path, writer, self.warn)
