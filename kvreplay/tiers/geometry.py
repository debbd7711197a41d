"""KV geometry of real models: how many bytes of KV cache one token costs.

bytes/token = 2 (K and V) x layers x KV heads x head dim x bytes per element,
from each model's published ``config.json`` (num_hidden_layers,
num_key_value_heads, hidden_size / num_attention_heads or head_dim). Models
with multi-head latent attention (DeepSeek-V2/V3) cache one compressed latent
per layer instead of K and V: layers x (kv_lora_rank + qk_rope_head_dim) x
bytes per element.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbed.core.errors import KvbedError

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


@dataclass(frozen=True)
class KvGeometry:
    name: str
    layers: int
    kv_heads: int
    head_dim: int
    latent: bool = False  # MLA: one latent vector of head_dim per layer, no separate K and V
    source: str = ""

    def bytes_per_token(self, dtype: str = "bf16") -> int:
        if dtype not in DTYPE_BYTES:
            raise KvbedError(f"unknown KV dtype {dtype!r} (choose from: {', '.join(DTYPE_BYTES)})")
        per_layer = self.kv_heads * self.head_dim * (1 if self.latent else 2)
        return self.layers * per_layer * DTYPE_BYTES[dtype]


_MODELS = (
    KvGeometry("llama-3-8b", 32, 8, 128, source="meta-llama/Meta-Llama-3-8B"),
    KvGeometry("llama-3-70b", 80, 8, 128, source="meta-llama/Meta-Llama-3-70B"),
    KvGeometry("llama-3.1-405b", 126, 8, 128, source="meta-llama/Llama-3.1-405B"),
    KvGeometry("mistral-7b", 32, 8, 128, source="mistralai/Mistral-7B-v0.1"),
    KvGeometry("qwen2.5-7b", 28, 4, 128, source="Qwen/Qwen2.5-7B"),
    KvGeometry("qwen2.5-32b", 64, 8, 128, source="Qwen/Qwen2.5-32B"),
    KvGeometry("qwen2.5-72b", 80, 8, 128, source="Qwen/Qwen2.5-72B"),
    KvGeometry("deepseek-v3", 61, 1, 576, latent=True, source="deepseek-ai/DeepSeek-V3 (kv_lora_rank 512 + rope 64)"),
)
MODELS: dict[str, KvGeometry] = {m.name: m for m in _MODELS}
DEFAULT_MODEL = "llama-3-8b"


def geometry(name: str) -> KvGeometry:
    try:
        return MODELS[name.lower()]
    except KeyError:
        raise KvbedError(f"unknown model {name!r} (choose from: {', '.join(MODELS)})") from None
