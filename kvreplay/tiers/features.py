"""Per-object features that hint policies may derive from a lifecycle trace.

``parent_id`` of an exact object is the object of the previous chunk of its
prompt, so the prefix depth (chunk index within the prompt) is the length of the
parent chain; derived objects (transform) inherit their source's depth. The
session turn of an object is the rank of its creating request within its
session. Both are computed online in one streaming pass (a parent always appears
before its children), so a policy that must not see the future can use them.
"""

from __future__ import annotations

import numpy as np
from devicemodels.jit import njit

from kvreplay.schema import KIND, OP_TRANSFORM


@njit
def _depths(obj, parent, kind, op, depth_of, exact_code):
    out = np.empty(obj.shape[0], np.int32)
    for i in range(obj.shape[0]):
        o = obj[i]
        d = depth_of[o]
        if d < 0:
            p = parent[i]
            if p == 0:
                d = 0
            elif kind[i] == exact_code and op[i] != OP_TRANSFORM and depth_of[p] >= 0:
                d = depth_of[p] + 1
            elif depth_of[p] >= 0:
                d = depth_of[p]  # transform (derived copy, or exact rebuilt from one): its source's position
            else:
                d = 0
            depth_of[o] = d
        out[i] = d
    return out


class PrefixDepth:
    """Streaming prefix depth for dense object ids (the tier simulator's): call per batch, in order."""

    def __init__(self) -> None:
        self._depth = np.full(1024, -1, np.int32)

    def __call__(self, batch) -> np.ndarray:
        obj = batch["obj_id"].astype(np.int64)
        parent = batch["parent_id"].astype(np.int64)
        hi = int(max(obj.max(initial=0), parent.max(initial=0))) + 1
        if hi > len(self._depth):
            grown = np.full(max(hi, 2 * len(self._depth)), -1, np.int32)
            grown[: len(self._depth)] = self._depth
            self._depth = grown
        return _depths(obj, parent, batch["kind"], batch["op"], self._depth, KIND["exact"])


def prefix_depth(batch) -> np.ndarray:
    """Prefix depth of every event's object in one batch that holds the whole trace."""
    return PrefixDepth()(batch)


def session_turns(request_id: np.ndarray, session_id: np.ndarray) -> np.ndarray:
    """Turn (0-based rank among the session's requests, by request id) for each event; -1 without session."""
    req = np.asarray(request_id, np.int64)
    ses = np.asarray(session_id, np.int64)
    ok = (req >= 0) & (ses >= 0)
    out = np.full(len(req), -1, np.int32)
    if not ok.any():
        return out
    pairs = np.unique(np.stack([ses[ok], req[ok]], axis=1), axis=0)  # sorted by session, then request
    starts = np.r_[0, np.flatnonzero(np.diff(pairs[:, 0])) + 1]
    rank = np.arange(len(pairs)) - np.repeat(starts, np.diff(np.r_[starts, len(pairs)]))
    keys = pairs[:, 0] * (1 << 32) + pairs[:, 1]
    pos = np.searchsorted(keys, ses[ok] * (1 << 32) + req[ok])
    out[ok] = rank[pos]
    return out
