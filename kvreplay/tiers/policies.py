"""Eviction policies of a tier, as parameters of one queue engine run in numba.

Every policy here is a point in the S3-FIFO design space (Yang et al., SOSP'23):
a small probationary FIFO, a main FIFO with frequency-based reinsertion, and a
ghost FIFO of recently evicted keys. LRU is the main queue with move-to-head on
access; FIFO is the main queue alone; CLOCK (FIFO-reinsertion) is the main queue
with a 1-bit frequency. Expressing them as parameters keeps one compiled kernel
for any per-tier mix (numba compiles a kernel per combination of function
arguments), and adding a policy of this family is one registration here.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.core.registry import Registry


@dataclass(frozen=True)
class EvictionPolicy:
    name: str
    doc: str
    small_ratio: float = 0.0  # share of the tier's bytes for the probationary FIFO (0 = none)
    ghost_ratio: float = 0.0  # bytes of evicted keys remembered, as a share of capacity (0 = no ghost)
    promote_freq: int = 0  # small -> main when accessed at least this often while in small
    max_freq: int = 0  # saturating access counter; >0 gives reinsertion at the main tail
    touch_to_head: bool = False  # LRU: an access moves the entry to the head of its queue


EVICTION_POLICIES: Registry[EvictionPolicy] = Registry("eviction policy")


def _reg(p: EvictionPolicy) -> EvictionPolicy:
    return EVICTION_POLICIES.register(p.name)(p)


_reg(EvictionPolicy("lru", "least recently used: an access moves the entry to the head", touch_to_head=True))
_reg(EvictionPolicy("fifo", "first in, first out: accesses change nothing"))
_reg(EvictionPolicy("clock", "FIFO with reinsertion (second chance): 1-bit access flag", max_freq=1))
_reg(
    EvictionPolicy(
        "s3fifo",
        "S3-FIFO: 10% probationary FIFO, main FIFO with 2-bit reinsertion, ghost FIFO (scan resistant)",
        small_ratio=0.10,
        ghost_ratio=0.90,
        promote_freq=2,
        max_freq=3,
    )
)
