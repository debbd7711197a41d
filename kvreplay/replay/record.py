"""Latency recording for replayed ops and KV objects (numba), and the histogram rows it fills.

Two views of latency are kept apart on purpose:

- per op (fio's view): each read/write/trim/zone op's completion minus its
  arrival, user ops and host-GC ops in separate rows;
- per KV object: the time from the event (a load, a persist) until the last of
  its ops completes - what a KV store waits for when it loads a chunk.
"""

from __future__ import annotations

import numpy as np
from devicemodels.jit import njit

from devicemodels.base import OP_NAMES, OP_READ, OP_TRIM, OP_WRITE, OP_ZONE_RESET
from devicemodels.histogram import hist_record, new_rows
from kvreplay.layout.actions import A_READ, A_WRITE
from kvreplay.layout.common import SRC_GC

N_OPS = len(OP_NAMES)
H_GC_READ = N_OPS
H_GC_WRITE = N_OPS + 1
H_GC_OTHER = N_OPS + 2
H_OBJ_READ = N_OPS + 3
H_OBJ_WRITE = N_OPS + 4
H_ROWS = N_OPS + 5
#: series name of each global histogram row (latency.parquet, result.json)
H_NAMES = tuple(OP_NAMES) + ("gc_read", "gc_write", "gc_other", "object_read", "object_write")

# per-window rows
W_READ, W_WRITE, W_OBJ_READ = 0, 1, 2
W_ROWS = 3
#: slots of the per-segment accumulator record_segment fills
ACC_N = 6
W_NAMES = ("read", "write", "object_read")


def new_hists() -> tuple[np.ndarray, np.ndarray]:
    return new_rows(H_ROWS), new_rows(W_ROWS)


@njit(nogil=True)
def record_segment(op, src, ev, done, arr, ev_act, ev_first, ev_done, H, W, wbytes, npages):
    """Record ops of one segment (all ops of the events ev[0]..ev[-1]) and those events' object latency:
    from the arrival of the event's first op to the completion of its last (user ops only).

    ``wbytes`` accumulates [user pages written, gc pages written, evict/trim pages...] per segment:
    index 0 user write pages, 1 gc write pages, 2 zone resets, 3 read ops (user), 4 write ops (user),
    5 trimmed pages (frees and forced evictions).
    """
    for i in range(len(op)):
        lat = done[i] - arr[i]
        o = op[i]
        e = ev[i]
        if src[i] == SRC_GC:
            if o == OP_READ:
                hist_record(H[H_GC_READ], lat)
            elif o == OP_WRITE:
                hist_record(H[H_GC_WRITE], lat)
                wbytes[1] += npages[i]
            else:
                hist_record(H[H_GC_OTHER], lat)
                wbytes[2] += 1
        else:
            hist_record(H[o], lat)
            if o == OP_READ:
                hist_record(W[W_READ], lat)
                wbytes[3] += 1
            elif o == OP_WRITE:
                hist_record(W[W_WRITE], lat)
                wbytes[0] += npages[i]
                wbytes[4] += 1
            elif o == OP_ZONE_RESET:  # a zone emptied by a free or an eviction
                wbytes[2] += 1
            elif o == OP_TRIM:
                wbytes[5] += npages[i]
            if src[i] == 0:
                if done[i] > ev_done[e]:
                    ev_done[e] = done[i]
                if arr[i] < ev_first[e]:
                    ev_first[e] = arr[i]
    if len(ev) == 0:
        return
    for e in range(ev[0], ev[len(ev) - 1] + 1):
        if ev_done[e] < 0:
            continue
        a = ev_act[e]
        lat = ev_done[e] - ev_first[e]
        if a == A_READ:
            hist_record(H[H_OBJ_READ], lat)
            hist_record(W[W_OBJ_READ], lat)
        elif a == A_WRITE:
            hist_record(H[H_OBJ_WRITE], lat)
