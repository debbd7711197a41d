"""SGLang KV events (``--kv-events-config``) recorded by ``kvbed trace capture --raw``: lifecycle events
directly, no tier simulation (the format is :mod:`kvreplay.capture.rawfile`)."""

from __future__ import annotations

from kvreplay.importers.base import IMPORTERS
from kvreplay.importers.raw_events import RawEventsImporter


@IMPORTERS.register("sglang-events")
class SglangEventsImporter(RawEventsImporter):
    description = "raw capture of SGLang's ZMQ KV event stream (kvbed trace capture --raw)"
