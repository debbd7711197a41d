"""Mooncake (FAST'25) request traces: JSON Lines, one request per line.

``{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [int, ...]}``
with one hash id per 512 input tokens; ids form a prefix tree (chained hashing).
The trace has no sessions or tenants (all requests are tenant "default").
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from kvreplay.importers.base import IMPORTERS, Importer, Int64, read_request_columns, source_info
from kvreplay.requests import RequestTrace

BLOCK_TOKENS = 512


class MooncakeRecord(msgspec.Struct):
    timestamp: float  # ms since trace start
    input_length: Int64
    output_length: Int64
    hash_ids: list[Int64]


@IMPORTERS.register("mooncake")
class MooncakeImporter(Importer):
    description = "Mooncake FAST'25 JSONL (timestamp ms, input/output_length, hash_ids per 512 tokens)"

    def read_requests(self, path: Path) -> RequestTrace:
        c = read_request_columns(path, MooncakeRecord, BLOCK_TOKENS, drop_inconsistent=self.drop_inconsistent)
        trace = RequestTrace(
            arrival_ns=np.round(c.timestamp * 1e6).astype(np.int64),
            input_tokens=c.input_tokens,
            output_tokens=c.output_tokens,
            block_offsets=c.block_offsets,
            block_ids=c.block_ids,
            block_tokens=BLOCK_TOKENS,
            source=source_info(self.name, path, c.data),
            dropped=c.dropped,
        )
        # 0 since such lines are refused or dropped (read_request_columns); kept so the source facts of traces
        # imported before and after read alike
        trace.source["short_block_lines"] = 0
        return trace
