"""The words a study spec may use: the metrics (table and summary columns), the plots of the report and the
axis value that leaves a key unset.

The spec checks a study's names against them before anything runs; the table and the report that give the
names their meaning import them from here, so parsing a spec needs neither.
"""

from __future__ import annotations

UNSET = "-"  # an axis value that leaves its key unset

#: metric -> (how to read it from result.json's job, what it is)
METRICS: dict[str, str] = {
    "waf": "device WAF (media / host bytes written)",
    "host_waf": "host WAF (host / user bytes; ZNS host GC)",
    "end_to_end_waf": "end-to-end WAF (media / user bytes)",
    "gc_bytes_moved": "bytes the device's GC relocated",
    "host_gc_bytes": "bytes the host's GC relocated (ZNS)",
    "gc_runs": "device GC runs",
    "gc_stall_total_ns": "foreground GC stall, total: a sum over stalls (they overlap in time, so not a duration)",
    "gc_stalled_writes_ratio": "share of the device's write commands that waited for foreground GC",
    "gc_stall_p99_ns": "foreground-GC wait p99, among the write commands that waited",
    "gc_stall_max_ns": "longest foreground-GC wait of a write command",
    "saturated": "1: the device was backlogged for at least saturation_backlog_ratio of the span (latency tails "
                 "are queueing), 0: not, empty: closed loop or not recorded",
    "backlogged_ratio": "share of the replay span an op in flight had waited longer than saturation_wait_ns",
    "busy_ratio": "share of the replay span with at least one op in flight",
    "erases": "block erases",
    "zone_resets": "zone resets",
    "user_bytes_written": "bytes the KV store wrote",
    "read_p50_ns": "device read latency p50", "read_p99_ns": "device read latency p99",
    "read_p999_ns": "device read latency p99.9",
    "write_p50_ns": "device write latency p50", "write_p99_ns": "device write latency p99",
    "write_p999_ns": "device write latency p99.9",
    "load_p50_ns": "object load latency p50", "load_p99_ns": "object load latency p99",
    "load_p999_ns": "object load latency p99.9",
    "loads_wrong": "loads after the faults served wrong (kvbed replay --fault)",
    "loads_detected": "loads after the faults the contract caught (recomputed)",
    "loads_missing": "loads after the faults whose copy was gone (recomputed)",
    "stale_entry_loads": "loads after the faults through a stale host-index entry (one a fault-free index would "
                         "not hold: a stale restore)",
    "stale_wrong_loads": "of stale_entry_loads, those served wrong (the contract let them through)",
    "recompute_tokens": "tokens recomputed after the faults",
    "contract_extra_bytes_written": "device bytes the contract's headers added",
    "hint_accuracy": "share of the tier's writes the hints put in the oracle's class (replay.hint_lab = true; "
                     "read it against hint_accuracy_one_class, shown beside it)",
    "hint_accuracy_one_class": "the reference of hint_accuracy: the share of the tier's writes in the oracle's "
                               "largest class, the accuracy of giving every write one class (replay.hint_lab = true)",
    "hint_spearman": "Spearman rank correlation of the hint class and the true remaining lifetime (replay.hint_lab "
                     "= true; empty when the policy gives one class)",
    "oracle_waf_cut_captured_ratio": "(WAF_none - WAF_hints) / (WAF_none - WAF_oracle), end-to-end WAF on the same "
                                     "device: the share of the oracle's cut captured (replay.hint_lab = true; empty "
                                     "when the oracle cuts less than 0.001)",
}
#: metric -> its reference, which a study's summary and report show right after it whether listed or not
REFERENCES: dict[str, str] = {"hint_accuracy": "hint_accuracy_one_class"}
DEFAULT_METRICS = ("waf", "end_to_end_waf", "gc_bytes_moved", "gc_stall_total_ns", "erases", "load_p99_ns",
                   "write_p99_ns")
#: a metric's old name -> its name (a spec or a saved study may use the old one)
OLD_NAMES: dict[str, str] = {"gc_stall_ns": "gc_stall_total_ns"}
#: metric -> what it adds up, for the column headings of the report (a sum is called a sum)
SUMS: dict[str, str] = {"gc_stall_total_ns": "sum over stalls"}


def metric_name(m: str) -> str:
    """A metric by its current name (``gc_stall_ns`` was the sum over stalls' old name)."""
    return OLD_NAMES.get(m, m)


def column_label(m: str) -> str:
    """A metric's heading in a report table: its name, and what it sums if it is a sum."""
    return f"{m} ({SUMS[m]})" if m in SUMS else m

#: the report's plots (``[study] plots``; each described in :mod:`testbed.study.report`)
PLOTS = ("waf_by_hints", "waf_vs_axis", "gc_stall_by_hints", "per_ruh_bytes", "loads_by_contract",
         "oracle_share_by_hints")
