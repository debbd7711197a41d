"""Was the device keeping up? Busy and backlogged time from each op's arrival and completion alone.

A tail latency read as "GC tail" may instead be queueing: in an open-loop replay ops arrive at trace times
whatever the device does, and a device slower than the arrivals builds a queue whose waits grow with the
run. These figures tell the two apart for any device model or a VM target, since they use nothing but
``arrival_ns`` and ``done_ns``:

- **busy**: at least one op in flight (arrived, not completed) - the utilisation law's busy time of the
  device as one server;
- **backlogged**: the oldest op in flight has waited longer than ``wait_ns`` (arrival to now), i.e. time
  ``t`` is backlogged when some op with ``arrival + wait_ns < t < done`` exists. It is the age of the
  oldest outstanding request held against a threshold, the quantity a block layer's request timeout
  (Linux: ``nvme_core.io_timeout``) watches, at a far shorter threshold. ``wait_ns`` is chosen above any
  single op's service and any single GC stall a device produces on its own, so time spent past it is
  time spent behind other ops;
- **saturated** (a flag the caller sets): backlogged for at least a given share of the span.

The span is the run's (first arrival to last completion, as the job's ``runtime_ns``). Each figure is a
union of intervals, computed in one streaming pass over the ops in arrival order (segment after segment;
state in a small int64 array). Arrivals are non-decreasing in every replay (the trace's time order, and a
closed loop's slots are taken in order); an op that arrives before its predecessor is counted in
``arrivals_out_of_order`` and its interval starts at the predecessor's arrival (the figures are then lower
bounds).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from devicemodels.jit import njit

# slots of the state array
(S_OPS, S_FIRST_ARR, S_LAST_ARR, S_LAST_DONE, S_DISORDER, S_OVER,
 S_BUSY_START, S_BUSY_END, S_BUSY_NS, S_BUSY_LONGEST,
 S_BL_START, S_BL_END, S_BL_NS, S_BL_LONGEST, S_BL_EPISODES) = range(15)
N_SLOTS = 15


def new_state() -> np.ndarray:
    s = np.zeros(N_SLOTS, np.int64)
    s[S_BUSY_START] = s[S_BL_START] = -1  # no interval open
    return s


@njit(nogil=True)
def record(arr, done, wait_ns, s):
    """Add one segment's ops (arrival order) to the state ``s``: the busy and backlogged interval unions."""
    for i in range(arr.shape[0]):
        a = arr[i]
        d = done[i]
        if s[S_OPS] == 0:
            s[S_FIRST_ARR] = a
            s[S_LAST_ARR] = a
        s[S_OPS] += 1
        lat = d - a
        if a < s[S_LAST_ARR]:
            s[S_DISORDER] += 1
            a = s[S_LAST_ARR]
        else:
            s[S_LAST_ARR] = a
        if d > s[S_LAST_DONE]:
            s[S_LAST_DONE] = d
        if d > a:  # busy over [a, d)
            if s[S_BUSY_START] < 0 or a > s[S_BUSY_END]:
                if s[S_BUSY_START] >= 0:
                    n = s[S_BUSY_END] - s[S_BUSY_START]
                    s[S_BUSY_NS] += n
                    if n > s[S_BUSY_LONGEST]:
                        s[S_BUSY_LONGEST] = n
                s[S_BUSY_START] = a
                s[S_BUSY_END] = d
            elif d > s[S_BUSY_END]:
                s[S_BUSY_END] = d
        if lat > wait_ns:  # backlogged over [a + wait_ns, d)
            s[S_OVER] += 1
            b = a + wait_ns
            if b < d:
                if s[S_BL_START] < 0 or b > s[S_BL_END]:
                    if s[S_BL_START] >= 0:
                        n = s[S_BL_END] - s[S_BL_START]
                        s[S_BL_NS] += n
                        if n > s[S_BL_LONGEST]:
                            s[S_BL_LONGEST] = n
                    s[S_BL_START] = b
                    s[S_BL_END] = d
                    s[S_BL_EPISODES] += 1
                elif d > s[S_BL_END]:
                    s[S_BL_END] = d


def _closed(s: np.ndarray, start: int, end: int, total: int, longest: int) -> tuple[int, int]:
    """(total, longest) with the interval still open counted."""
    t, m = int(s[total]), int(s[longest])
    if s[start] >= 0:
        n = int(s[end] - s[start])
        t, m = t + n, max(m, n)
    return t, m


def summary(s: np.ndarray, wait_ns: int, backlog_ratio: float, closed_loop: bool) -> dict[str, Any]:
    """The figures of a finished run (result.json's job ``saturation``).

    ``saturated`` is True when the device was backlogged for at least ``backlog_ratio`` of the span; in a
    closed loop (``as_fast_as_possible``: each op is issued when an earlier one completes, so ops are
    always waiting by construction and the device sets its own arrival rate) it is None, not a flag."""
    ops = int(s[S_OPS])
    span = max(0, int(s[S_LAST_DONE] - s[S_FIRST_ARR])) if ops else 0
    busy, busy_longest = _closed(s, S_BUSY_START, S_BUSY_END, S_BUSY_NS, S_BUSY_LONGEST)
    bl, bl_longest = _closed(s, S_BL_START, S_BL_END, S_BL_NS, S_BL_LONGEST)
    bl_ratio = bl / span if span else 0.0
    return {
        "loop": "closed" if closed_loop else "open",
        "wait_threshold_ns": int(wait_ns),
        "backlogged_ratio_threshold": float(backlog_ratio),
        "saturated": None if closed_loop else bool(span and bl_ratio >= backlog_ratio and bl > 0),
        "span_ns": span,
        "busy_ns": busy,
        "busy_ratio": busy / span if span else 0.0,
        "longest_busy_ns": busy_longest,
        "backlogged_ns": bl,
        "backlogged_ratio": bl_ratio,
        "longest_backlog_ns": bl_longest,
        "backlog_episodes": int(s[S_BL_EPISODES]),
        "ops": ops,
        "ops_waited_over_threshold": int(s[S_OVER]),
        "ops_waited_over_threshold_ratio": int(s[S_OVER]) / ops if ops else 0.0,
        "arrivals_out_of_order": int(s[S_DISORDER]),
    }
