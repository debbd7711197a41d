"""Small device configs and op-batch helpers shared by the device model tests."""

import numpy as np

from devicemodels import DEVICES
from devicemodels.base import OP_WRITE, op_batch

# 4096 logical pages of 4 KiB, 16-page blocks, 2x2 dies
TINY = ["logical_bytes=16MiB", "pages_per_block=16", "channels=2", "dies_per_channel=2"]


def make(name: str, *overrides: str, base=TINY):
    return DEVICES.get(name).from_params(list(base) + list(overrides))


def writes(lbas, pid=0, t=0, npages=1):
    lbas = np.asarray(lbas, dtype=np.int64)
    n = lbas.size
    pids = np.broadcast_to(np.asarray(pid, dtype=np.int16), (n,))
    arr = np.broadcast_to(np.asarray(t, dtype=np.int64), (n,))
    return op_batch(np.full(n, OP_WRITE, np.int8), lbas, np.full(n, npages, np.int32), pids, arr)


def ops(*rows):
    """rows of (op, lba, npages[, pid[, arrival]])"""
    cols = list(zip(*[tuple(r) + (0,) * (5 - len(r)) for r in rows]))
    return op_batch(*[np.array(c) for c in cols])
