"""Eviction policies of a tier, as parameters of one queue engine run in numba.

Every policy here is a point in the S3-FIFO design space (Yang et al., SOSP'23):
a small probationary FIFO, a main FIFO with frequency-based reinsertion, and a
ghost FIFO of recently evicted keys. LRU is the main queue with move-to-head on
access; FIFO is the main queue alone; CLOCK (FIFO-reinsertion) is the main queue
with a 1-bit frequency. Expressing them as parameters keeps one compiled kernel
for any per-tier mix (numba compiles a kernel per combination of function
arguments), and adding a policy of this family is one registration here.

Pinning (``TierSimParams.pinning``, on by default): chunks the running request uses
are passed over by eviction where they stand, in every policy (kernel.pol_victim):
their queue, place and access count stay, the policy takes the next entry it would;
S3-FIFO turns to the other queue when the one it evicts from holds only pinned
entries; if every entry is pinned the policy's own choice goes. A circular CLOCK
whose hand passes a pinned entry would leave it last in line; here it keeps its place
in the queue (first in line once unpinned), as FIFO and S3-FIFO do.

Held against libCacheSim (tests/kvreplay/tiers/test_tiers_libcachesim.py: one isolated tier fed
the Mooncake conversation trace's 571,526 chunk references, 32/128/512 GiB; with
``pinning=False``, the plain cache libCacheSim models):

* ``lru``, ``fifo``, ``clock``: identical hits and evictions to libCacheSim's LRU,
  FIFO and Clock (1-bit counter) at every capacity.
* ``s3fifo`` against libCacheSim's S3FIFO brought to the original insertion rule
  (see the test's ``libcachesim_cache``): identical hits and evictions at every capacity. An entry promoted
  from the small to the main queue enters it with its access count reset to 0, as in
  libCacheSim (and our CXL-SSD cache); keeping the count instead cost 164 hits (-0.029 pp)
  at 512 GiB. Differences that remain, none of which changed a hit or an eviction on the trace:
  (1) the small queue is evicted from while it holds >= 10% of the capacity in bytes
  (libCacheSim: while the main queue holds <= capacity - int(10% of it)), re-decided
  after each promotion (libCacheSim keeps evicting from the small queue until one
  entry leaves it); (2) a missed key is looked up in the ghost after the eviction
  that makes room for it (libCacheSim: before, so an eviction cannot push it out of
  the ghost first); (3) the access count saturates at 3 on hits (libCacheSim counts
  on and caps at reinsertion: the same decisions).
* With pinning, a tier whose ``evictions_past_pinned`` is 0 is the plain policy;
  LRU never reaches a chunk its request uses, so it stays libCacheSim's. On the
  Mooncake trace every FIFO, CLOCK and S3-FIFO eviction passes over the pinned first
  chunk (a system prompt nearly every request shares): FIFO hits +0.17 pp of the
  references at 32 GiB over a plain FIFO, CLOCK and S3-FIFO do not move there.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbed.core.registry import Registry


@dataclass(frozen=True)
class EvictionPolicy:
    name: str
    doc: str
    small_ratio: float = 0.0  # share of the tier's bytes for the probationary FIFO (0 = none)
    ghost_ratio: float = 0.0  # bytes of evicted keys remembered, as a share of capacity (0 = no ghost)
    promote_freq: int = 0  # small -> main when accessed at least this often while in small
    max_freq: int = 0  # saturating access counter; >0 gives reinsertion at the main tail
    touch_to_head: bool = False  # LRU: an access moves the entry to the head of its queue


EVICTION_POLICIES: Registry[EvictionPolicy] = Registry("eviction policy", summary_attr="doc")


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
