"""The tier simulator's settings: :class:`TierSimParams` (every number of the model in :mod:`kvreplay.tiers.sim`,
overridable) and the names its fields choose from.

Kept apart from the simulator so the kernel's state builder (:mod:`kvreplay.tiers.state`) can read the
settings without importing the driver that imports it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kvreplay.tiers.geometry import DEFAULT_MODEL, DTYPE_BYTES, MODELS, geometry
from kvreplay.tiers.policies import EVICTION_POLICIES
from kvreplay.tiers.sharing import SHARE_CHOICES
from kvbed.core.errors import KvbedError
from kvbed.core.params import check_choice, check_fields, name_value_pairs, nonneg_number, param

GiB = 1 << 30
TiB = 1 << 40
SIM_TIERS = ("gpu", "cpu", "cxl", "ssd")
WRITE_POLICIES = ("write-through", "spill")
SSD_KINDS = ("exact", "quantized", "compressed")


@dataclass(frozen=True)
class TierSimParams:
    """Tier simulator settings. Capacities are the cluster's aggregate; 0 disables a tier (not GPU)."""

    model: str = param(DEFAULT_MODEL, "model whose KV geometry sets bytes per token (kvbed trace models)",
                       choices=tuple(MODELS))
    kv_dtype: str = param("bf16", "KV element type", choices=tuple(DTYPE_BYTES))
    tokens_per_object: int = param(256, "storage object = chunk of this many prompt tokens (LMCache chunk: 256)")
    share: str = param("global", "sharing domain of cached prefixes (cache_salt): reused only within the same "
                                 "request, session, tenant, or by anyone (global)", choices=SHARE_CHOICES)
    gpu_bytes: int = param(128 * GiB, "HBM available to the prefix cache, all GPUs together")
    cpu_bytes: int = param(512 * GiB, "host DRAM KV pool (0 = none)")
    cxl_bytes: int = param(0, "CXL memory tier between DRAM and SSD (0 = none)")
    ssd_bytes: int = param(2 * TiB, "SSD KV tier (0 = none)")
    gpu_policy: str = param("lru", "GPU eviction policy", choices=EVICTION_POLICIES.names)
    cpu_policy: str = param("lru", "CPU eviction policy", choices=EVICTION_POLICIES.names)
    cxl_policy: str = param("lru", "CXL eviction policy", choices=EVICTION_POLICIES.names)
    ssd_policy: str = param("lru", "SSD eviction policy", choices=EVICTION_POLICIES.names)
    pinning: bool = param(True, "chunks in use by the running request are passed over by eviction, in every tier "
                                "(off: each tier is a plain cache, as cache simulators such as libCacheSim model one)")
    write_policy: str = param("write-through", "write-through: every new chunk to every lower tier at commit; "
                                               "spill: to the next tier only when evicted", choices=WRITE_POLICIES)
    promote_on_load: bool = param(True, "write-through: a load also refills the tiers above its source")
    prefill_tokens_per_s: float = param(100_000.0, "aggregate prefill throughput of the cluster (tokens/s)")
    decode_tokens_per_s: float = param(40.0, "decode speed of one request (tokens/s; sets request end times)")
    cpu_read_bytes_per_s: float = param(100e9, "aggregate DRAM -> GPU load bandwidth (B/s)")
    cxl_read_bytes_per_s: float = param(60e9, "aggregate CXL -> GPU load bandwidth (B/s)")
    ssd_read_bytes_per_s: float = param(24e9, "aggregate SSD -> GPU load bandwidth (B/s)")
    ssd_kind: str = param("exact", "what the SSD stores: exact, quantized or compressed copies (transform)",
                          choices=SSD_KINDS)
    ssd_kind_tenants: str = param("", "per-tenant SSD kind, e.g. 'batch=quantized,rag=compressed'")
    ttl_s: float = param(0.0, "prompt-cache retention: an object unused this long is deleted from every tier "
                              "(0 = kept until evicted)")
    ttl_tenants: str = param("", "per-tenant retention in seconds, e.g. 'agent=180,batch=60' (0 = none)")
    quantized_ratio: float = param(0.5, "bytes of a quantized copy / exact (bf16 -> int8)")
    compressed_ratio: float = param(0.3, "bytes of a compressed copy / exact (CacheGen-like codec)")

    @property
    def bytes_per_token(self) -> int:
        return geometry(self.model).bytes_per_token(self.kv_dtype)

    @property
    def object_bytes(self) -> int:
        return self.tokens_per_object * self.bytes_per_token

    def capacity(self, tier: str) -> int:
        return int(getattr(self, f"{tier}_bytes"))

    def policy(self, tier: str) -> str:
        return getattr(self, f"{tier}_policy")

    def validate(self) -> "TierSimParams":
        check_fields(self)
        if self.tokens_per_object <= 0:
            raise KvbedError(f"tokens_per_object must be positive, got {self.tokens_per_object}")
        for t in SIM_TIERS:
            cap = self.capacity(t)
            if cap < 0:
                raise KvbedError(f"{t}_bytes must not be negative, got {cap}")
            if (cap > 0 or t == "gpu") and cap < self.object_bytes:
                raise KvbedError(
                    f"{t}_bytes ({cap}) is smaller than one object ({self.object_bytes} bytes = "
                    f"{self.tokens_per_object} tokens x {self.bytes_per_token} B/token of {self.model})"
                )
        for name in ("prefill_tokens_per_s", "decode_tokens_per_s", "cpu_read_bytes_per_s", "cxl_read_bytes_per_s",
                     "ssd_read_bytes_per_s"):
            if not getattr(self, name) > 0:
                raise KvbedError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("quantized_ratio", "compressed_ratio"):
            if not 0 < getattr(self, name) <= 1:
                raise KvbedError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        self.tenant_kinds()
        self.tenant_ttls()
        return self

    def tenant_ttls(self) -> tuple[float, dict[str, float]]:
        if self.ttl_s < 0:
            raise KvbedError(f"ttl_s must be >= 0, got {self.ttl_s}")
        pairs = name_value_pairs(self.ttl_tenants, "ttl_tenants", "tenant=seconds")
        per = {ten: nonneg_number("ttl_tenants", ten, val, "a number of seconds") for ten, val in pairs}
        return self.ttl_s, per

    def tenant_kinds(self) -> tuple[str, dict[str, str]]:
        def check(tenant: str, kind: str) -> str:
            check_choice(f"ssd_kind_tenants: {tenant}", kind, SSD_KINDS)
            return kind

        pairs = name_value_pairs(self.ssd_kind_tenants, "ssd_kind_tenants", "tenant=kind")
        per = {ten: check(ten, kind) for ten, kind in pairs}
        return self.ssd_kind, per


def params_dict(p: TierSimParams) -> dict[str, Any]:
    d = dataclasses.asdict(p)
    d["bytes_per_token"] = p.bytes_per_token
    d["object_bytes"] = p.object_bytes
    return d
