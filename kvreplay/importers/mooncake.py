"""Mooncake (FAST'25) request traces: JSON Lines, one request per line.

``{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [int, ...]}``
with one hash id per 512 input tokens; ids form a prefix tree (chained hashing).
The trace has no sessions or tenants (all requests are tenant "default").
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from kvreplay.importers.base import (
    IMPORTERS,
    Importer,
    check_column,
    flatten_ids,
    negative_id_rows,
    read_jsonl,
    source_info,
)
from kvreplay.requests import RequestTrace

BLOCK_TOKENS = 512


class MooncakeRecord(msgspec.Struct):
    timestamp: float  # ms since trace start
    input_length: int
    output_length: int
    hash_ids: list[int]


@IMPORTERS.register("mooncake")
class MooncakeImporter(Importer):
    name = "mooncake"
    description = "Mooncake FAST'25 JSONL (timestamp ms, input/output_length, hash_ids per 512 tokens)"

    def read_requests(self, path: Path) -> RequestTrace:
        where = str(path)
        recs, lineno, data = read_jsonl(path, MooncakeRecord)
        n = len(recs)
        ts_ms = np.fromiter((r.timestamp for r in recs), np.float64, n)
        inp = np.fromiter((r.input_length for r in recs), np.int64, n)
        out = np.fromiter((r.output_length for r in recs), np.int64, n)
        off, ids = flatten_ids([r.hash_ids for r in recs])
        check_column(where, lineno, ~np.isfinite(ts_ms) | (ts_ms < 0), "timestamp must be a finite number >= 0")
        check_column(where, lineno, np.r_[False, np.diff(ts_ms) < 0], "timestamp goes backwards (lines must be in time order)")
        check_column(where, lineno, inp < 0, "input_length must be >= 0")
        check_column(where, lineno, out < 0, "output_length must be >= 0")
        nblk = np.diff(off)
        check_column(where, lineno, nblk > (inp + BLOCK_TOKENS - 1) // BLOCK_TOKENS,
                     f"more hash_ids than input_length covers at {BLOCK_TOKENS} tokens per id")
        check_column(where, lineno, negative_id_rows(off, ids), "hash_ids must be >= 0")
        trace = RequestTrace(
            arrival_ns=np.round(ts_ms * 1e6).astype(np.int64),
            input_tokens=inp,
            output_tokens=out,
            block_offsets=off,
            block_ids=ids,
            block_tokens=BLOCK_TOKENS,
            source=source_info(self.name, path, data),
        )
        trace.source["short_block_lines"] = int(np.sum(nblk < (inp + BLOCK_TOKENS - 1) // BLOCK_TOKENS))
        return trace

