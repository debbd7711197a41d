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

BLOCK_TOKENS = 16


class AlibabaRecord(msgspec.Struct):
    chat_id: int
    parent_chat_id: int
    timestamp: float  # seconds
    input_length: int
    output_length: int
    type: str
    turn: int
    hash_ids: list[int]


@IMPORTERS.register("alibaba")
class AlibabaImporter(Importer):
    name = "alibaba"
    description = "Alibaba Qwen/Bailian ATC'25 JSONL (chat_id, parent_chat_id, turn, type, hash_ids per 16 tokens)"

    def read_requests(self, path: Path) -> RequestTrace:
        where = str(path)
        recs, lineno, data = read_jsonl(path, AlibabaRecord)
        n = len(recs)
        ts_s = np.fromiter((r.timestamp for r in recs), np.float64, n)
        inp = np.fromiter((r.input_length for r in recs), np.int64, n)
        out = np.fromiter((r.output_length for r in recs), np.int64, n)
        turn = np.fromiter((r.turn for r in recs), np.int64, n)
        off, ids = flatten_ids([r.hash_ids for r in recs])
        check_column(where, lineno, ~np.isfinite(ts_s) | (ts_s < 0), "timestamp must be a finite number >= 0")
        check_column(where, lineno, np.r_[False, np.diff(ts_s) < 0], "timestamp goes backwards (lines must be in time order)")
        check_column(where, lineno, inp < 0, "input_length must be >= 0")
        check_column(where, lineno, out < 0, "output_length must be >= 0")
        check_column(where, lineno, turn < 0, "turn must be >= 0")
        nblk = np.diff(off)
        check_column(where, lineno, nblk > (inp + BLOCK_TOKENS - 1) // BLOCK_TOKENS,
                     f"more hash_ids than input_length covers at {BLOCK_TOKENS} tokens per id")
        check_column(where, lineno, negative_id_rows(off, ids), "hash_ids must be >= 0")

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
            input_tokens=inp,
            output_tokens=out,
            block_offsets=off,
            block_ids=ids,
            block_tokens=BLOCK_TOKENS,
            session_id=session,
            turn=turn.astype(np.int32),
            tenant=tenant,
            tenants=types,
            source=source_info(self.name, path, data),
        )
        trace.source["start_timestamp_s"] = float(t0)
        return trace
