"""Settings of ``kvbed trace capture`` and of the raw-file importers (vllm-events, sglang-events)."""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay.tiers.geometry import DEFAULT_MODEL, DTYPE_BYTES, MODELS, geometry
from kvbed.core.errors import KvbedError
from kvbed.core.params import check_fields, param


@dataclass(frozen=True)
class CaptureParams:
    """How engine KV events become lifecycle events, and how the capture runs."""

    model: str = param(DEFAULT_MODEL, "model whose KV geometry sets an object's bytes (block tokens x bytes/token)",
                       choices=tuple(MODELS), cli=True)
    kv_dtype: str = param("bf16", "KV element type", choices=tuple(DTYPE_BYTES))
    tokens_per_block: int = param(16, "tokens per block when an event does not state block_size (vLLM's default 16)",
                                  cli=True)
    duration_s: float = param(0.0, "stop after this many seconds (0 = until Ctrl-C or SIGTERM)", cli=True)
    topic: str = param("", "capture only messages whose topic starts with this (\"\" = every topic)", cli=True)
    flush_s: float = param(2.0, "write captured events into the trace at least this often (a crash loses at "
                                "most this much)")
    quiet_s: float = param(10.0, "warn once when a publisher has sent nothing for this long")
    replay_timeout_s: float = param(2.0, "give up on a replay request after this long (the gap counts as lost)")

    @property
    def bytes_per_token(self) -> int:
        return geometry(self.model).bytes_per_token(self.kv_dtype)

    def validate(self) -> "CaptureParams":
        check_fields(self)
        if self.tokens_per_block <= 0:
            raise KvbedError(f"tokens_per_block must be positive, got {self.tokens_per_block}")
        for name in ("duration_s", "flush_s", "quiet_s", "replay_timeout_s"):
            if not getattr(self, name) >= 0:
                raise KvbedError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.flush_s <= 0 or self.replay_timeout_s <= 0:
            raise KvbedError("flush_s and replay_timeout_s must be positive")
        return self
