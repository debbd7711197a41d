"""Tier simulator: request traces -> KV lifecycle events over GPU / CPU / CXL / SSD tiers.

See :mod:`kvreplay.tiers.sim` for the model and the event conventions, :mod:`kvreplay.tiers.params` for its
settings.
"""

from kvreplay.tiers.geometry import MODELS, KvGeometry, geometry
from kvreplay.tiers.policies import EVICTION_POLICIES, EvictionPolicy
from kvreplay.tiers.params import SIM_TIERS, TierSimParams
from kvreplay.tiers.sim import TierSimResult, simulate

__all__ = [
    "EVICTION_POLICIES",
    "EvictionPolicy",
    "KvGeometry",
    "MODELS",
    "SIM_TIERS",
    "TierSimParams",
    "TierSimResult",
    "geometry",
    "simulate",
]
