"""Request-level traces: what importers and the synthesiser produce and the tier simulator consumes.

A request trace is a set of numpy columns, one row per request in arrival order,
plus the request's prefix as a flattened list of source block ids (``block_ids``
with CSR ``block_offsets``). Equal block ids mean equal reusable prefix KV, as in
Mooncake (512 tokens per id) and the Alibaba traces (16 tokens per id). The tier
simulator re-chunks these blocks into storage objects of its own size.

Optional ``invalidations`` (time, scope) say when every KV object of a scope
(model / adapter / version) becomes stale, e.g. a LoRA adapter update.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvbed.core.errors import KvbedError


@dataclass
class RequestTrace:
    arrival_ns: np.ndarray  # int64, non-decreasing
    input_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    block_offsets: np.ndarray  # int64, n+1 (CSR into block_ids)
    block_ids: np.ndarray  # int64 prefix block ids (chained: an id identifies the whole prefix up to it)
    block_tokens: int  # tokens covered by one block id
    session_id: np.ndarray | None = None  # int64, -1 unknown
    turn: np.ndarray | None = None  # int32, 0-based turn within the session, -1 unknown
    tenant: np.ndarray | None = None  # int32 codes into ``tenants``
    scope: np.ndarray | None = None  # int32 codes into ``scopes``
    tenants: list[str] = field(default_factory=lambda: ["default"])
    scopes: list[str] = field(default_factory=lambda: ["default"])
    inv_ts_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    inv_scope: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    source: dict[str, Any] = field(default_factory=dict)
    #: source lines the importer dropped as inconsistent, by reason (None: it was not asked to drop any)
    dropped: dict[str, int] | None = None

    def __post_init__(self) -> None:
        n = len(self.arrival_ns)
        self.arrival_ns = np.ascontiguousarray(self.arrival_ns, np.int64)
        self.input_tokens = np.ascontiguousarray(self.input_tokens, np.int64)
        self.output_tokens = np.ascontiguousarray(self.output_tokens, np.int64)
        self.block_offsets = np.ascontiguousarray(self.block_offsets, np.int64)
        self.block_ids = np.ascontiguousarray(self.block_ids, np.int64)
        defaults = {"session_id": (-1, np.int64), "turn": (-1, np.int32), "tenant": (0, np.int32), "scope": (0, np.int32)}
        for name, (val, dt) in defaults.items():
            arr = getattr(self, name)
            setattr(self, name, np.full(n, val, dt) if arr is None else np.ascontiguousarray(arr, dt))
        self.inv_ts_ns = np.ascontiguousarray(self.inv_ts_ns, np.int64)
        self.inv_scope = np.ascontiguousarray(self.inv_scope, np.int32)
        self.check()

    @property
    def n(self) -> int:
        return len(self.arrival_ns)

    def check(self) -> None:
        """Internal consistency (importers check the source file row by row before this)."""
        n = self.n
        for name in ("input_tokens", "output_tokens", "session_id", "turn", "tenant", "scope"):
            if len(getattr(self, name)) != n:
                raise KvbedError(f"request trace column {name} has {len(getattr(self, name))} rows, expected {n}")
        if len(self.block_offsets) != n + 1 or self.block_offsets[0] != 0 or self.block_offsets[-1] != len(self.block_ids):
            raise KvbedError("request trace block offsets do not match the block ids")
        if n and np.any(np.diff(self.arrival_ns) < 0):
            raise KvbedError("request trace arrivals are not sorted")
        if self.block_tokens <= 0:
            raise KvbedError(f"block_tokens must be positive, got {self.block_tokens}")
        if n and (self.tenant.max() >= len(self.tenants) or self.scope.max() >= len(self.scopes)):
            raise KvbedError("request trace tenant/scope code out of range")
        if len(self.inv_ts_ns) != len(self.inv_scope) or np.any(np.diff(self.inv_ts_ns) < 0):
            raise KvbedError("request trace invalidations must be (ts, scope) pairs sorted by time")

    def facts(self) -> dict[str, Any]:
        """The source facts the importers print and keep: requests, distinct ids, references, reuse share, span."""
        refs = len(self.block_ids)
        distinct = int(np.unique(self.block_ids).size) if refs else 0
        span_ns = int(self.arrival_ns[-1] - self.arrival_ns[0]) if self.n else 0
        sessions = self.session_id[self.session_id >= 0]
        return {
            "requests": self.n,
            "distinct_block_ids": distinct,
            "block_references": refs,
            "references_to_seen_id": refs - distinct,
            "references_to_seen_id_share": (refs - distinct) / refs if refs else 0.0,
            "time_span_s": span_ns / 1e9,
            "block_tokens": self.block_tokens,
            "input_tokens": int(self.input_tokens.sum()),
            "output_tokens": int(self.output_tokens.sum()),
            "mean_input_tokens": float(self.input_tokens.mean()) if self.n else 0.0,
            "sessions": int(np.unique(sessions).size) if len(sessions) else 0,
            "tenants": len(self.tenants),
            "invalidations": len(self.inv_ts_ns),
            **{f"lines_dropped_{why}": n for why, n in (self.dropped or {}).items()},
        }
