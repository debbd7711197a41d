"""What each lifecycle event means for the storage of the replayed tier.

The replay looks at one tier (default ``ssd``). Every trace event becomes one of
four storage actions on that tier's namespace:

============ ===================================================================
WRITE        ``persist`` or ``recover`` into the tier: write the object (a second
             persist of a resident object rewrites it; the old copy dies)
READ         ``load`` from or ``hit`` in the tier: read the object's extents
FREE         ``evict``, ``invalidate`` or ``delete`` in the tier: deallocate
DROP         ``delete`` in another tier: the object ends everywhere, so a copy
             still resident here is deallocated too (a trace that ends each
             tier's copy on that tier never needs it; other producers may)
NONE         everything else (create/commit/transform and other tiers' events)
============ ===================================================================

The mapping is a lookup table indexed by (op, tier); :func:`select` applies it
to a batch and gathers the indices of the tier's events in one numba pass.
"""

from __future__ import annotations

import numpy as np
from devicemodels.jit import njit

from kvreplay import schema as S

A_NONE, A_WRITE, A_READ, A_FREE, A_DROP = 0, 1, 2, 3, 4
ACTION_NAMES = ("none", "write", "read", "free", "drop")


def action_table(tier: int) -> np.ndarray:
    """(len(OPS), len(TIERS)) int8 table: action of (op, tier) for the replayed ``tier``."""
    lut = np.zeros((len(S.OPS), len(S.TIERS)), np.int8)
    lut[S.OP_PERSIST, tier] = A_WRITE
    lut[S.OP_RECOVER, tier] = A_WRITE
    lut[S.OP_LOAD, tier] = A_READ
    lut[S.OP_HIT, tier] = A_READ
    lut[S.OP_EVICT, tier] = A_FREE
    lut[S.OP_INVALIDATE, tier] = A_FREE
    lut[S.OP_DELETE, :] = A_DROP
    lut[S.OP_DELETE, tier] = A_FREE
    return lut


@njit(nogil=True)
def _select(op, tier, lut, act, idx):
    n = 0
    for i in range(op.shape[0]):
        a = lut[op[i], tier[i]]
        act[i] = a
        if a != A_NONE:
            idx[n] = i
            n += 1
    return n


def select(lut: np.ndarray, op: np.ndarray, tier: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(action per event, indices of the events that touch the tier). Codes come validated from the reader."""
    act = np.empty(len(op), np.int8)
    idx = np.empty(len(op), np.int64)
    k = _select(op, tier, lut, act, idx)
    return act, idx[:k]


def batch_actions(lut: np.ndarray, op: np.ndarray, tier: np.ndarray) -> np.ndarray:
    """Action code per event of a batch (int8)."""
    return select(lut, op, tier)[0]


def pages_of(nbytes: np.ndarray, page_bytes: int, header_bytes: int = 0) -> np.ndarray:
    """Mapping units an object occupies with ``header_bytes`` stored beside its payload (a recovery contract's
    header); at least one: a zero-byte object still has an address."""
    if header_bytes:
        nbytes = nbytes + header_bytes
    return np.maximum(1, (nbytes + (page_bytes - 1)) // page_bytes).astype(np.int32)
