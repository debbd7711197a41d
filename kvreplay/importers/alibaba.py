"""Alibaba Qwen/Bailian "KVCache in the wild" (ATC'25) request traces: JSON Lines.

``{"chat_id": int, "parent_chat_id": int (-1 = root), "timestamp": float s,
"input_length": int, "output_length": int, "type": "text"|"search"|..., "turn": int,
"hash_ids": [int, ...]}`` with one hash id per 16 tokens (the last block may be padded).

Sessions: a request's session is the root of its parent_chat_id chain (a parent
missing from the file stands for its own root, so its children stay together).
Tenants: the traces carry no customer id, so the request ``type`` is used as the
tenant label (it separates workloads with different reuse, which is what the
``type`` and ``predicted`` hint policies look at).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from kvreplay.importers.base import IMPORTERS, Importer, Int64, read_request_columns, source_info
from kvreplay.requests import RequestTrace

BLOCK_TOKENS = 16


class AlibabaRecord(msgspec.Struct):
    chat_id: Int64
    parent_chat_id: Int64
    timestamp: float  # seconds
    input_length: Int64
    output_length: Int64
    type: str
    turn: Int64
    hash_ids: list[Int64]


@IMPORTERS.register("alibaba")
class AlibabaImporter(Importer):
    description = "Alibaba Qwen/Bailian ATC'25 JSONL (chat_id, parent_chat_id, turn, type, hash_ids per 16 tokens)"

    def read_requests(self, path: Path) -> RequestTrace:
        c = read_request_columns(path, AlibabaRecord, BLOCK_TOKENS, extra_counts=("turn",),
                                 drop_inconsistent=self.drop_inconsistent)
        recs, ts_s, n = c.records, c.timestamp, len(c.records)
        # session = root of the parent chain
        root: dict[int, int] = {}
        session = np.empty(n, np.int64)
        for i, r in enumerate(recs):
            p = r.parent_chat_id
            s = r.chat_id if p < 0 else root.get(p, p)
            root[r.chat_id] = s
            session[i] = s
        types = sorted({r.type for r in recs})
        code = {t: i for i, t in enumerate(types)}
        tenant = np.fromiter((code[r.type] for r in recs), np.int32, n)
        t0 = ts_s[0] if n else 0.0
        trace = RequestTrace(
            arrival_ns=np.round((ts_s - t0) * 1e9).astype(np.int64),
            input_tokens=c.input_tokens,
            output_tokens=c.output_tokens,
            block_offsets=c.block_offsets,
            block_ids=c.block_ids,
            block_tokens=BLOCK_TOKENS,
            session_id=session,
            turn=c.extra["turn"].astype(np.int32),
            tenant=tenant,
            tenants=types,
            source=source_info(self.name, path, c.data),
            dropped=c.dropped,
        )
        trace.source["start_timestamp_s"] = float(t0)
        return trace
