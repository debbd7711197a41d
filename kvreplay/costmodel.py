"""Load-vs-recompute cost model: what a missed KV object costs to rebuild on the accelerator.

Recomputing ``n`` missed tokens takes ``n / prefill_tokens_per_s`` (prefill of a stated model on a
stated accelerator); loading them from a tier pays off when the tier delivers the bytes faster, i.e.
when its bandwidth exceeds ``bytes_per_token x prefill_tokens_per_s`` (about 2 GB/s for Llama-3-8B on
an A100). A compressed or quantized copy also pays ``decompress_ns`` to turn it back into exact bytes.

Where the throughputs come from (``PREFILL_PROFILES``; every row's ``source`` says it again):

* A100 rows sum vidur's per-operator medians (microsoft/vidur ``data/profiling/compute/a100/<model>/
  mlp.csv``, A100 80GB): per layer input_layernorm + attn_pre_proj + attn_rope + attn_post_proj +
  post_attention_layernorm + mlp_up_proj + mlp_act + mlp_down_proj + 2 x add, times the layers, at
  ``num_tokens`` = 32768 for prefill and 1 for the first decode step. These are the linear (GEMM)
  operators only: attention kernels, the LM head and tensor-parallel all-reduce are profiled apart
  and left out, so recompute is slightly optimistic (the break-even bandwidth slightly high). The
  implied MFU is 67% of the A100's 312 TFLOP/s dense BF16 (2 x 6.98e9 linear parameters per token).
* Models vidur has no profile for are scaled from a profiled one by FLOPs per token (2 x linear
  parameters from the model's config.json), i.e. the same MFU.
* H100 rows (no H100 profile of these models in vidur) are FLOPs-derived: 2 x linear parameters per
  token at an assumed 50% MFU of the H100 SXM's 989 TFLOP/s dense BF16 (times TP); the decode step is
  the A100 row's scaled by HBM bandwidth (2039 GB/s A100 80GB SXM -> 3350 GB/s H100 SXM).

Every figure is overridable (``prefill_tokens_per_s``, ``decode_step_ns``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

import numpy as np

from kvreplay.tiers.geometry import DTYPE_BYTES, MODELS, geometry
from kvbed.core.errors import KvbedError
from kvbed.core.params import check_fields, param
from kvbed.core.registry import Registry

IntOrArray = Union[int, np.ndarray]


@dataclass(frozen=True)
class PrefillProfile:
    """Prefill throughput and first decode step of one model on one accelerator (at ``tp`` GPUs)."""

    model: str
    accelerator: str
    tp: int
    prefill_tokens_per_s: float
    decode_step_ns: int
    source: str

    @property
    def key(self) -> str:
        return f"{self.model}@{self.accelerator}"


PREFILL_PROFILES: Registry[PrefillProfile] = Registry("prefill profile")

_VIDUR = "microsoft/vidur data/profiling/compute/a100/meta-llama"
_LINEAR = "linear operators only (attention kernels, LM head, all-reduce excluded)"
_H100 = ("FLOPs-derived: 2 x {p} linear params per token at an assumed 50% MFU of H100 SXM 989 TFLOP/s "
         "dense BF16{tp}; decode = the a100 row x 2039/3350 (HBM GB/s)")
_ROWS = (
    PrefillProfile("llama-3-8b", "a100", 1, 15_056.0, 9_760_000,
                   f"vidur {_VIDUR}/Meta-Llama-3-8B/mlp.csv, TP1: sum of per-layer operator medians x 32 layers = "
                   f"2176 ms for 32768 tokens; 9.76 ms at 1 token; {_LINEAR}"),
    PrefillProfile("mistral-7b", "a100", 1, 15_056.0, 9_760_000,
                   "the llama-3-8b@a100 vidur row: Mistral-7B-v0.1 has the same layer shapes (32 layers, hidden "
                   f"4096, 8 KV heads, MLP 14336); {_LINEAR}"),
    PrefillProfile("qwen2.5-7b", "a100", 1, 16_104.0, 9_125_000,
                   "llama-3-8b@a100 (vidur) scaled by linear FLOPs per token, 6.98e9 / 6.53e9 params "
                   "(Qwen2.5-7B: 28 layers, hidden 3584, 4 KV heads, MLP 18944)"),
    PrefillProfile("llama-3-70b", "a100", 4, 6_168.0, 25_040_000,
                   f"vidur {_VIDUR}/Meta-Llama-3-70B/mlp.csv, TP4: per-layer operator medians x 80 layers = "
                   f"5313 ms for 32768 tokens; 25.04 ms at 1 token; {_LINEAR}"),
    PrefillProfile("llama-3-8b", "h100", 1, 35_426.0, 5_940_000, _H100.format(p="6.98e9", tp="")),
    PrefillProfile("mistral-7b", "h100", 1, 35_426.0, 5_940_000, _H100.format(p="6.98e9", tp="")),
    PrefillProfile("qwen2.5-7b", "h100", 1, 37_891.0, 5_554_000, _H100.format(p="6.53e9", tp="")),
    PrefillProfile("llama-3-70b", "h100", 4, 14_448.0, 15_241_000, _H100.format(p="68.45e9", tp=" x TP4")),
)
for _row in _ROWS:
    PREFILL_PROFILES.register(_row.key)(_row)


def accelerators() -> list[str]:
    """The accelerators the profile table knows (the choices of ``CostParams.accelerator``)."""
    return sorted({PREFILL_PROFILES.get(k).accelerator for k in PREFILL_PROFILES})


def _ceil_ns(amount: IntOrArray, per_s: float) -> IntOrArray:
    """ceil(amount / per_s seconds) in ns; int for an int, int64 array for an array."""
    if isinstance(amount, np.ndarray):
        return np.ceil(amount.astype(np.float64) * 1e9 / per_s).astype(np.int64)
    return int(math.ceil(int(amount) * 1e9 / per_s))


@dataclass(frozen=True)
class CostParams:
    """What rebuilding a missed KV object costs: prefill of ``model`` on ``accelerator``."""

    model: str = param("llama-3-8b", "model whose KV geometry sets bytes per token and whose prefill is "
                                     "recomputed (kvbed trace models)", choices=tuple(MODELS))
    accelerator: str = param("a100", "accelerator of the prefill profile (PREFILL_PROFILES, "
                                     "kvreplay/costmodel.py)", choices=accelerators)
    kv_dtype: str = param("bf16", "KV element type (bytes per token)", choices=tuple(DTYPE_BYTES))
    prefill_tokens_per_s: float = param(0.0, "prefill throughput of one model instance, tokens/s (0 = the "
                                             "profile table's figure for model@accelerator)")
    decode_step_ns: int = param(0, "first decode step after the prefill (0 = the profile table's)")
    decompress_bytes_per_s: float = param(
        100e9, "GPU dequantize/decompress throughput, exact bytes/s (assumed: an HBM-bound int8->bf16 "
               "dequantize reaches ~1.3e12 on an A100; derated 10x for per-chunk kernels and CacheGen-like codecs)")

    def profile(self) -> PrefillProfile | None:
        key = f"{self.model}@{self.accelerator}".lower()
        return PREFILL_PROFILES.get(key) if key in PREFILL_PROFILES else None

    def validate(self) -> "CostParams":
        check_fields(self)
        for name in ("prefill_tokens_per_s", "decode_step_ns"):
            if getattr(self, name) < 0:
                raise KvbedError(f"{name} must be >= 0 (0 = the profile's), got {getattr(self, name)}")
        if not self.decompress_bytes_per_s > 0:
            raise KvbedError(f"decompress_bytes_per_s must be positive, got {self.decompress_bytes_per_s}")
        if self.profile() is None and not (self.prefill_tokens_per_s > 0 and self.decode_step_ns > 0):
            raise KvbedError(
                f"model/accelerator: no prefill profile for {self.model}@{self.accelerator} (known: "
                f"{', '.join(PREFILL_PROFILES.names())}); give prefill_tokens_per_s and decode_step_ns")
        return self

    @property
    def bytes_per_token(self) -> int:
        return geometry(self.model).bytes_per_token(self.kv_dtype)

    def tokens_per_s(self) -> float:
        """The prefill throughput in use: the override, else the profile's."""
        if self.prefill_tokens_per_s > 0:
            return float(self.prefill_tokens_per_s)
        prof = self.profile()
        if prof is None:
            self.validate()  # raises the one-line error naming model/accelerator
        return float(prof.prefill_tokens_per_s)

    def step_ns(self) -> int:
        """The first decode step in use: the override, else the profile's."""
        if self.decode_step_ns > 0:
            return int(self.decode_step_ns)
        prof = self.profile()
        if prof is None:
            self.validate()
        return int(prof.decode_step_ns)

    def recompute_ns(self, tokens: IntOrArray) -> IntOrArray:
        """Prefill time of ``tokens`` missed tokens (ceil ns); vectorised over an int array."""
        return _ceil_ns(tokens, self.tokens_per_s())

    def decompress_ns(self, exact_bytes: IntOrArray) -> IntOrArray:
        """Time to turn a compressed/quantized copy back into ``exact_bytes`` exact bytes (ceil ns)."""
        return _ceil_ns(exact_bytes, self.decompress_bytes_per_s)

    def breakeven_bytes_per_s(self) -> float:
        """Load bandwidth at which loading an object costs as much as recomputing it (zero latency)."""
        return self.bytes_per_token * self.tokens_per_s()
