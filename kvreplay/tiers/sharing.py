"""Sharing domains of the tier simulator's prefix cache (``TierSimParams.share``).

What vLLM's and SGLang's ``cache_salt`` does: every request carries a salt, the salt is hashed into
its block keys, so a cached prefix is reused only by requests with the same salt. ``share`` chooses
the salt: one per request (no reuse across requests), per session (a request without a session is
its own), per tenant, or none (``global``: any request reuses any prefix, today's behaviour).

Why sessions are paired with their tenant: a session id that two tenants happen to use must not
join them, so every domain but ``global`` lies inside one tenant and no object is ever used across
tenants (the cross-tenant hits the simulator reports are then zero by construction).

Not to be confused with a request's *scope* (model / adapter version, what invalidations drop):
the salt refines the key inside a scope, it does not replace it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from kvbed.core.registry import Registry

if TYPE_CHECKING:
    from kvreplay.requests import RequestTrace

#: name -> function(requests) -> salt of each request (uint64[n]): requests share cached prefixes iff
#: their salts are equal; 0 = no salt, so ``global`` gives the keys of a simulator without sharing
#: domains, bit for bit (and every golden trace with them)
SHARING: Registry[Callable[["RequestTrace"], np.ndarray]] = Registry("sharing domain")


@SHARING.register("request")
def _per_request(reqs: "RequestTrace") -> np.ndarray:
    return np.arange(1, reqs.n + 1, dtype=np.uint64)


@SHARING.register("session")
def _per_session(reqs: "RequestTrace") -> np.ndarray:
    if reqs.n == 0:
        return np.zeros(0, np.uint64)
    own = -1 - np.arange(reqs.n, dtype=np.int64)  # a request without a session: its own domain
    pairs = np.stack([reqs.tenant.astype(np.int64), np.where(reqs.session_id >= 0, reqs.session_id, own)], axis=1)
    _, inv = np.unique(pairs, axis=0, return_inverse=True)
    return inv.ravel().astype(np.uint64) + np.uint64(1)


@SHARING.register("tenant")
def _per_tenant(reqs: "RequestTrace") -> np.ndarray:
    return reqs.tenant.astype(np.uint64) + np.uint64(1)


@SHARING.register("global")
def _one_domain(reqs: "RequestTrace") -> np.ndarray:
    return np.zeros(reqs.n, np.uint64)


SHARE_CHOICES = ("request", "session", "tenant", "global")  # finest to coarsest (the CLI's order)


def salts(reqs: "RequestTrace", share: str) -> np.ndarray:
    """The salt hashed into each request's chunk keys (uint64[n]; equal salt = same sharing domain)."""
    return SHARING.get(share)(reqs)
