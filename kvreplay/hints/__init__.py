"""Placement-hint policies: which class each write of the replayed tier goes to.

``HINTS`` (:mod:`~kvreplay.hints.registry`) maps a lowercase name to a :class:`~kvreplay.hints.base.HintPolicy`
subclass; one file per policy, each stating what it may know:

=============== ===============================================================
none            nothing (one class)
oracle          the future: exact remaining lifetime, quantile-bucketed
noisy-oracle    the oracle with a seeded misclassification rate
hotness         the past: decayed reuse count (recency + frequency, LRFU-like)
predicted       the past: lifetimes learned online per feature bucket
type            the written object's kind and tenant
fill-phase      the past: whether the tier has evicted yet (last class before, class 0 after)
learned         the past: a boosted-tree lifetime model refit online on the deaths seen (scikit-learn)
readmission     the past: whether the written content was on the tier before (the store's admission history)
=============== ===============================================================

``type``, ``hotness``, ``predicted``, ``learned`` and ``readmission`` are guarded (:mod:`~kvreplay.hints.abstain`):
they abstain to class 0, as no hints, while their own earlier writes show their classes do not separate lifetimes
(``learned`` and ``readmission``: do not predict which copies outlive one drive capacity of writes).
"""

from __future__ import annotations

# Registration happens on import of each policy module.
from kvreplay.hints import (  # noqa: F401
    fill_phase, hotness, learned, noisy_oracle, none, objtype, oracle, predicted, readmission)
from kvreplay.hints.base import Future, HintPolicy
from kvreplay.hints.registry import HINTS

__all__ = ["HINTS", "HintPolicy", "Future"]
