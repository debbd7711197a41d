"""What a GC-stall or saturation figure is, in words: the one phrasing the replay summary, ``kvbed report``
and the study report share, so a sum is always called a sum and an overloaded device always flagged."""

from __future__ import annotations

from typing import Any

from testbed.humanize import fmt_ns

#: the warning's reason, the same everywhere it is printed
QUEUEING = "latency tails measure queueing behind a device that cannot keep up (GC work included), not single GC stalls"


def _pct(x: float | None) -> str:
    if x is None:
        return "-"
    p = 100 * x
    return f"{p:.2f}%" if 0 < p < 1 else f"{p:.1f}%"


def stalled_writes(gs: dict[str, Any] | None) -> str:
    """'282 of 44,186 device write commands (0.64%); wait among them p50 171 ms, p99 1.04 s, max 1.13 s'."""
    if not gs:
        return "-"
    head = f"{gs['stalled_write_cmds']:,} of {gs['write_cmds']:,} device write commands ({_pct(gs['stalled_write_cmds_ratio'])})"
    w = gs.get("stalled_write_wait_ns")
    if not w:
        return head
    return f"{head}; wait among them p50 {fmt_ns(w['p50'], sig3=True)}, p99 {fmt_ns(w['p99'], sig3=True)}, " \
           f"max {fmt_ns(w['max'], sig3=True)}"


def stall_total(gs: dict[str, Any] | None, total_ns: int | None = None) -> str:
    """'60.2 s summed over 282 stalls' (a sum over stalls that overlap in time, not a duration)."""
    total = gs["total_ns"] if gs else total_ns
    if total is None:
        return "-"
    return fmt_ns(total, sig3=True) + (f" summed over {gs['stalls']:,} stalls" if gs else " (sum over stalls)")


def saturation(sat: dict[str, Any] | None) -> str:
    """'busy 23.6%, backlogged 0.0% of the 30.0 min span (an op waiting > 2.00 s)'."""
    if not sat:
        return "-"
    if sat["loop"] == "closed":
        return (f"closed loop (--as-fast-as-possible): queue_depth ops always in flight, so backlogged by "
                f"construction (busy {_pct(sat['busy_ratio'])} of the {fmt_ns(sat['span_ns'])} span); latency is "
                f"the device's at that queue depth")
    s = (f"busy {_pct(sat['busy_ratio'])}, backlogged {_pct(sat['backlogged_ratio'])} of the "
         f"{fmt_ns(sat['span_ns'])} span (an op waiting > {fmt_ns(sat['wait_threshold_ns'])})")
    if sat["backlogged_ns"]:
        s += f"; longest backlog {fmt_ns(sat['longest_backlog_ns'])}"
    return s


def saturation_warning(sat: dict[str, Any] | None) -> str | None:
    """The warning of a saturated run, or None: 'device saturated: 51.2% of the span backlogged (...);
    latency tails measure queueing behind a device that cannot keep up ...'."""
    if not sat or not sat.get("saturated"):
        return None
    return (f"device saturated: {_pct(sat['backlogged_ratio'])} of the span backlogged (an op waiting > "
            f"{fmt_ns(sat['wait_threshold_ns'])}; longest backlog {fmt_ns(sat['longest_backlog_ns'])}, "
            f"{_pct(sat['ops_waited_over_threshold_ratio'])} of ops waited longer); {QUEUEING}")


def saturation_cell(sat: dict[str, Any] | None) -> str:
    """A table cell: '51.2% SATURATED', '0.0%', 'closed loop' or '-'."""
    if not sat:
        return "-"
    if sat["loop"] == "closed":
        return "closed loop"
    return _pct(sat["backlogged_ratio"]) + (" SATURATED" if sat["saturated"] else "")


def stalled_share(gs: dict[str, Any] | None) -> str:
    """A table cell: the share of the device's write commands that waited for GC ('0.64%'), '-' if unknown."""
    return "-" if not gs else _pct(gs["stalled_write_cmds_ratio"])
