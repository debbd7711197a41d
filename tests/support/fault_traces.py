"""Hand-built lifecycle traces for the fault tests: a handful of events each, written as
``(ms, op, obj, tier[, kind])`` rows so every outcome can be counted by hand.

Objects are ``OBJ_BYTES`` (one 1 MiB mapping unit less 4 KiB, so a contract's header still fits in the unit)
and 100 tokens; every object is in scope ``m1`` unless the row says otherwise.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvreplay import schema as S

MiB = 1 << 20
OBJ_BYTES = MiB - 4096
TOKENS = 100
MS = 1_000_000


def write(path: Path, rows: list[tuple], *, nbytes: dict[int, int] | None = None,
          keys: dict[int, int] | None = None) -> Path:
    """rows: (ms, op name, obj id, tier name[, kind name[, scope]]), in time order; ``keys``: obj id -> its
    content_key (0, none known, for ids not given)."""
    nbytes = nbytes or {}
    keys = keys or {}
    scopes = ["m1", "m2"]
    ts = np.array([int(r[0] * MS) for r in rows], np.int64)
    batch = S.make_batch(
        ts_ns=ts,
        op=np.array([S.OP[r[1]] for r in rows], np.int8),
        obj_id=np.array([r[2] for r in rows], np.uint64),
        tier=np.array([S.TIER[r[3]] for r in rows], np.int8),
        kind=np.array([S.KIND[r[4]] if len(r) > 4 else 0 for r in rows], np.int8),
        scope=np.array([scopes.index(r[5]) if len(r) > 5 else 0 for r in rows], np.int32),
        nbytes=np.array([nbytes.get(r[2], OBJ_BYTES) for r in rows], np.int64),
        ntokens=np.full(len(rows), TOKENS, np.int32),
        content_key=np.array([keys.get(r[2], 0) for r in rows], np.uint64),
    )
    meta = S.TraceMeta(source={"importer": "test"}, geometry={"bytes_per_token": 10000, "tokens_per_object": TOKENS},
                       generator={"ssd_policy": "lru"})
    return S.write_trace(path, batch, meta, tenants=["a"], scopes=scopes)


#: stale-index: 3 overwrites 1's freed unit, 2's unit is trimmed; the index comes back from 1.5 ms (times: ms from the first event).
#: Not a valid trace: 2 and 1 are created again under their old ids (a phantom load needs an id that comes back,
#: which a valid trace never has), so replays refuse it; tests/kvreplay/faults/test_faults.py runs it with Replay(trace_checked=True)
STALE = [
    (0, "create", 1, "gpu"), (0, "persist", 1, "ssd"),
    (1, "create", 2, "gpu"), (1, "persist", 2, "ssd"),
    (2, "evict", 1, "ssd"),
    (3, "create", 3, "gpu"), (3, "persist", 3, "ssd"),
    (4, "evict", 2, "ssd"),
    (6, "load", 3, "ssd"),  # written after the checkpoint: missing
    (7, "create", 2, "gpu"),  # the stale index says ssd holds 2: its unit was trimmed (zeros)
    (8, "create", 1, "gpu"),  # the stale index says ssd holds 1: its unit now holds 3 (same length)
    (9, "commit", 1, "gpu"),
]

#: version-drift at 2 ms: 1 (ssd) and 2 (gpu) keep the old version; 3 is computed after it
DRIFT = [
    (0, "create", 1, "gpu"), (0, "persist", 1, "ssd"), (0.5, "evict", 1, "gpu"),
    (1, "create", 2, "gpu"), (1, "commit", 2, "gpu"), (1, "persist", 2, "ssd"),
    (3, "load", 1, "ssd"),
    (4, "hit", 2, "gpu"),
    (5, "create", 3, "gpu", "quantized"), (5, "persist", 3, "ssd", "quantized"),
    (6, "load", 3, "ssd", "quantized"),
    (7, "load", 1, "ssd"),
    (8, "persist", 1, "gpu"),  # loaded back into gpu
]

#: power-loss / partial-offload / media-error: on a one-die device a unit takes ~51 ms to program, so 1, 2, 3
#: (written at 0) are on the media by 155 ms; 4 (two units, written at 300 ms into 2's freed unit and a new
#: one) is two write ops done at ~351 ms and ~402 ms - an instant at 360 ms tears it
POWER = [
    (0, "create", 1, "gpu"), (0, "persist", 1, "ssd"),
    (0, "create", 2, "gpu"), (0, "persist", 2, "ssd"),
    (0, "create", 3, "gpu"), (0, "commit", 3, "gpu"), (0, "persist", 3, "ssd"),
    (200, "evict", 2, "ssd"),
    (300, "create", 4, "gpu"), (300, "persist", 4, "ssd"),
    (500, "load", 4, "ssd"),
    (501, "load", 1, "ssd"),
    (502, "hit", 3, "gpu"),
    (503, "load", 3, "ssd"),
]
POWER_BYTES = {4: 2 * MiB - 4096}
#: a power loss through a real guest (tests/testbed/vm/test_vm_qemu.py): objects 1..8 of 10 units (4 KiB) persisted 10 ms apart
#: on a one-die device (about 6 ms each), 2 evicted at 25 ms (trimmed) and 9 written at 26 ms, 10 and 11 queued
#: at 71 ms behind 8; power-loss@73ms,flush_ns=1ms: 8 is torn, 10 and 11 never reach the media, 2 is gone
POWER_VM = [
    *[r for i in range(1, 9) for r in ((10 * (i - 1), "create", i, "gpu"), (10 * (i - 1), "persist", i, "ssd"))
      if r[0] < 25],
    (25, "evict", 2, "ssd"), (26, "create", 9, "gpu"), (26, "persist", 9, "ssd"),
    *[r for i in range(1, 9) for r in ((10 * (i - 1), "create", i, "gpu"), (10 * (i - 1), "persist", i, "ssd"))
      if r[0] > 25],
    (71, "create", 10, "gpu"), (71, "persist", 10, "ssd"), (71, "create", 11, "gpu"), (71, "persist", 11, "ssd"),
    (80, "load", 1, "ssd"), (81, "load", 8, "ssd"), (82, "load", 10, "ssd"), (83, "load", 9, "ssd"),
]
POWER_VM_BYTES = {i: 10 * 4096 for i in range(1, 12)}
POWER_VM_PARAMS = ["channels=1", "dies_per_channel=1", "page_bytes=4096"]

#: a one-die device: ops are served one at a time
ONE_DIE = ["channels=1", "dies_per_channel=1"]
