"""A replay's faults and contract, end to end: checked against the trace before the replay, the replayed
tier's op completions recorded during it, then one more pass over the trace that advances the fault model
(:mod:`kvreplay.faults.model`), applies each fault at its time and classifies every load.

The pass is separate so the replay itself does no per-object fault work: without ``--fault`` and with
contract ``none`` nothing here runs and the replay is what it always was.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow.parquet as pq

from devicemodels.base import OP_TRIM, OP_WRITE
from kvreplay import keycheck
from kvreplay import schema as S
from kvreplay.arrow_numpy import column_to_numpy
from kvreplay.costmodel import CostParams
from kvreplay.faults.base import TraceFacts
from kvreplay.faults.model import (
    K_DETECTED_VALID, K_EXTRA_PAGES_R, K_EXTRA_PAGES_W, K_MEDIA_ERRORS, K_PHANTOM, K_READS, K_VERIFIED,
    K_VERIFIED_BYTES, K_WRITES, MEASURES, O_DETECTED, O_MISSING, O_WRONG, OUTCOMES, S_FOREIGN, S_LUCKY, S_STALE,
    S_WRONG, assign_slots, events_kernel,
)
from kvreplay.faults.params import FaultParams
from kvreplay.faults.registry import CONTRACTS
from kvreplay.faults.state import FaultConfig, FaultEvents, FaultState, OpLog
from kvreplay.layout.actions import action_table
from kvreplay.layout.common import SRC_GC
from kvreplay.replay.prefetch import prefetched
from kvbed.core.errors import KvbedError

COLUMNS = ("ts_ns", "op", "obj_id", "tier", "nbytes", "ntokens", "scope", "kind", "content_key")
MAX_OBJECT_ID = 200_000_000
#: why the host index has the key it has (result.json faults.index_key_note)
INDEX_KEY_NOTES = {
    "content": "the host index is keyed by content (content_key, scope, kind): a recomputed chunk finds the entry "
               "of its content's earlier copy",
    "v1": "a format v1 trace has no content keys: the host index is keyed by object id, so a stale entry is never "
          "looked up again (object ids are not reused) and a stale restore serves nothing wrong",
    "no-keys": "every content_key of the trace is 0 (none known): the host index is keyed by object id, so a stale "
               "entry is never looked up again",
}
 # dense per-object arrays; beyond this the model would need a hash table


def max_object_id(path: str) -> int:
    """The largest obj_id, from the Parquet statistics when every row group has them."""
    with pq.ParquetFile(path) as pf:
        return _max_object_id(pf)


def _max_object_id(pf: pq.ParquetFile) -> int:
    col = pf.schema_arrow.get_field_index("obj_id")
    best = 0
    for g in range(pf.num_row_groups):
        st = pf.metadata.row_group(g).column(col).statistics
        if st is None or not st.has_min_max:
            return int(column_to_numpy(pf.read(columns=["obj_id"]).column(0)).max(initial=0))
        best = max(best, int(st.max))
    return best


def scope_names(path: str) -> list[str]:
    """Every scope name in the trace's string table."""
    with pq.ParquetFile(path) as pf:  # not pq.read_table: its dataset layer imports pandas
        col = pf.read(columns=["scope"]).column(0)
    names: set[str] = set()
    for chunk in col.chunks:
        names.update(str(v) for v in chunk.dictionary.to_pylist())
    return sorted(names)


class FaultRun:
    """The faults and contract of one replay (``rp``: a :class:`~kvreplay.replay.engine.Replay` after its
    scan and sizing)."""

    def __init__(self, fp: FaultParams, rp: Any):
        cfg = rp.cfg
        self.fp = fp
        self.faults = fp.parsed()
        self.contract = CONTRACTS.get(fp.contract)
        self.header_bytes = self.contract.header_bytes()
        sc = rp.scan
        self.t0 = sc.t_first_ns
        self.span_ns = max(0, sc.t_last_ns - sc.t_first_ns)
        self.dev_tier = cfg.replay.tier_code
        self.page_bytes = rp.page_bytes
        self.time_scale = cfg.replay.time_scale
        self.seed = cfg.replay.seed
        self.trace = cfg.trace
        self.n_writes = sc.writes
        self.peak_objects = sc.peak_live_objects
        self.reader = rp.reader
        if self.faults:
            if cfg.replay.as_fast_as_possible:
                raise KvbedError("--fault needs the trace's clock (the fault time is trace time): not with "
                                 "--as-fast-as-possible")
            if not cfg.replay.strict_capacity:
                raise KvbedError("--fault needs strict_capacity=true (copies the layout evicts by itself are not "
                                 "tracked by the fault model yet)")
            if rp.layout_cls.zoned:
                raise KvbedError(f"--fault on device {cfg.device}: not yet (zns host GC moves objects; the fault "
                                 f"model follows conv/fdp/cxl extents)")
        facts = TraceFacts(self.span_ns, {k: v for k, v in sc.tier_counts.items() if v}, scope_names(self.trace),
                           cfg.replay.tier)
        self.n_scopes = len(facts.scopes)
        for f in self.faults:
            if f.at_ns > self.span_ns:
                raise f.error(f"at_ns={f.at_ns}: the time is outside the trace (0 .. {self.span_ns} ns from its "
                              f"first event)")
            f.check_trace(facts)
        self.log = OpLog()
        self.probe: set[int] = set()  # faults after which the media map is kept (a VM scan checks it)
        self.media: dict[int, dict[str, np.ndarray]] = {}

    # ---------------------------------------------------------------- during the replay
    def record(self, ops: dict[str, np.ndarray], done: np.ndarray, rows: np.ndarray) -> None:
        """The user/eviction writes and trims of a segment (``rows``: the trace row of each op's event)."""
        op = ops["op"]
        m = (ops["src"] != SRC_GC) & ((op == OP_WRITE) | (op == OP_TRIM))
        if m.any():
            self.log.add(rows[ops["event"][m]], op[m], ops["lba"][m], ops["npages"][m], ops["arrival_ns"][m],
                         done[m])

    # ---------------------------------------------------------------- after it
    def analyse(self, rows_done: int, logical_pages: int, window_ns: int) -> tuple[dict[str, Any], np.ndarray]:
        """(result.json's ``faults`` section, per-window outcome counts) over the first ``rows_done`` rows."""
        n_obj = max_object_id(self.trace) + 1
        if n_obj > MAX_OBJECT_ID:
            raise KvbedError(f"--fault: object ids up to {n_obj - 1}; the fault model handles ids below "
                             f"{MAX_OBJECT_ID:,}", where=self.trace)
        n_windows = self.span_ns // window_ns + 1
        st = FaultState(n_obj, self.n_scopes, logical_pages, self.n_writes, self.log.arrays(),
                        len(self.faults), n_windows, self.dev_tier)
        table = keycheck.new_state(1)  # (content_key, scope, kind) -> the key slot (assign_slots)
        seen = 0  # objects given a slot
        # points in trace time: index checkpoints first, then the faults, each in time order
        points = []
        for i, f in enumerate(self.faults):
            f.key = i
            cp = f.checkpoint_ns()
            if cp is not None:
                points.append((cp, 0, i))
            points.append((f.at_ns, 1, i))
        points.sort()
        states: list[dict[str, Any]] = [{} for _ in self.faults]
        st.scope_names = self.reader.scopes  # codes as the reader assigns them (filled as it reads)
        slot = 0
        cfg = FaultConfig(lut=action_table(self.dev_tier), t0=self.t0, window_ns=window_ns, dev_tier=self.dev_tier,
                          page_bytes=self.page_bytes, header_bytes=self.header_bytes, checks=self.contract.checks,
                          seed=self.seed, fault_slot=slot, media_rate=st.media_rate, media_from=st.media_from)

        def run(ev: FaultEvents, a: int, e: int) -> None:
            now = cfg._replace(fault_slot=slot, media_rate=st.media_rate, media_from=st.media_from)
            events_kernel(ev, a, e, now, st.arrays)

        def point(k: int) -> None:
            nonlocal slot
            t, is_fault, i = points[k]
            f = self.faults[i]
            if not is_fault:
                st.save_index(i)
                return
            st.device_at_ns = t if self.time_scale == 1.0 else int(np.floor(t / self.time_scale))
            before = st.index_entries()
            states[i] = {"device_at_ns": int(st.device_at_ns), "index_entries_before": before, **f.apply(st),
                         "index_entries_after": st.index_entries()}
            if i in self.probe:
                self.media[i] = st.media_map()
            slot = i + 1

        nxt = 0
        row0 = 0
        for b in prefetched(self.reader.iter_batches(COLUMNS)):
            n = min(b.n, max(0, rows_done - row0))
            ev = FaultEvents(row0=row0, ts=b["ts_ns"], op=b["op"], obj=b["obj_id"], tier=b["tier"], nbytes=b["nbytes"],
                             ntokens=b["ntokens"], scope=b["scope"], kind=b["kind"], key=b["content_key"])
            # room for each object not seen yet to insert one entry: at most its rows, at most the ids left
            new = min(int(np.count_nonzero(st.dev.slot[b["obj_id"].view(np.int64)] < 0)), n_obj - seen)
            if new:
                table = keycheck.ensure(table, 1, new)
                seen += assign_slots(ev, table, st.dev.slot)
            rel = b["ts_ns"][:n] - self.t0
            a = 0
            while a < n:
                if nxt < len(points):
                    cut = max(a, int(np.searchsorted(rel, points[nxt][0], side="right")))
                    if cut < n:
                        run(ev, a, cut)
                        point(nxt)
                        nxt += 1
                        a = cut
                        continue
                run(ev, a, n)
                a = n
            row0 += b.n
            if row0 >= rows_done:
                break
        while nxt < len(points):  # faults at the trace's last instant (nothing after them to classify)
            point(nxt)
            nxt += 1
        # the index's key: content (format v2 with keys) or object id (v1: no content_key column; or keys all 0)
        keyed = int(table.used[0]) > 0
        self.index_key = "content" if keyed else "object"
        self.index_key_why = "content" if keyed else "no-keys" if self.reader.has_content_key else "v1"
        return self._result(st, states), st.counts.tw

    def _result(self, st: FaultState, states: list[dict[str, Any]]) -> dict[str, Any]:
        cost = CostParams()
        c = st.counts.cost
        pb = self.page_bytes
        hb = self.header_bytes
        contract = {
            "name": self.contract.name,
            "checks": self.contract.check_names(),
            "header_bytes_per_object": hb,
            "header_bytes_written": int(c[K_WRITES]) * hb,
            "extra_bytes_written": int(c[K_EXTRA_PAGES_W]) * pb,  # mapping units the headers added
            "extra_bytes_read": int(c[K_EXTRA_PAGES_R]) * pb,
            "objects_written": int(c[K_WRITES]),
            "loads": int(c[K_READS]),
            "verified_loads": int(c[K_VERIFIED]),
            "verified_bytes": int(c[K_VERIFIED_BYTES]),
            "index_entry_bytes": self.contract.index_entry_bytes(),
            "index_metadata_bytes_peak": self.contract.index_entry_bytes() * int(self.peak_objects),
            "detected_valid_loads": int(c[K_DETECTED_VALID]),  # a check refused data that was in fact correct
        }
        injected = []
        for i, f in enumerate(self.faults):
            injected.append({**f.describe(), "state": states[i],
                             **_block(st.counts.acc[i + 1], st.counts.stale[i + 1], cost)})
        return {
            "contract": contract,
            "injected": injected,
            "index_key": self.index_key,
            "index_key_note": INDEX_KEY_NOTES[self.index_key_why],
            "before_faults": _block(st.counts.acc[0], st.counts.stale[0], cost),
            "total": _block(st.counts.acc.sum(axis=0), st.counts.stale.sum(axis=0), cost),
            "phantom_loads": int(c[K_PHANTOM]),  # creates a store with the faulty index would have loaded
            "media_errors_sampled": int(c[K_MEDIA_ERRORS]),
            "cost_model": {"model": cost.model, "accelerator": cost.accelerator,
                           "prefill_tokens_per_s": cost.tokens_per_s()},
        }


def _outcomes(a: np.ndarray) -> dict[str, dict[str, int]]:
    """a[outcome, measure] -> {outcome: {objects, bytes, tokens}}."""
    return {o: {m: int(a[k, j]) for j, m in enumerate(MEASURES)} for k, o in enumerate(OUTCOMES)}


def _block(acc: np.ndarray, stale: np.ndarray, cost: CostParams) -> dict[str, Any]:
    """acc[tier, kind, outcome, measure], stale[S_*, objects/bytes] -> outcomes overall, per tier and per kind,
    the loads through stale index entries, and what they cost."""
    total = acc.sum(axis=(0, 1))
    recompute_tokens = int(total[O_DETECTED, 2] + total[O_MISSING, 2])
    per_tier = {S.TIERS[t]: _outcomes(acc[t].sum(axis=0)) for t in range(acc.shape[0]) if acc[t].any()}
    per_kind = {S.KINDS[k]: _outcomes(acc[:, k].sum(axis=0)) for k in range(acc.shape[1]) if acc[:, k].any()}
    recomputed = int(total[O_DETECTED, 0] + total[O_MISSING, 0])
    rns = int(cost.recompute_ns(recompute_tokens))
    return {
        "outcomes": _outcomes(total),
        "per_tier": per_tier,
        "per_kind": per_kind,
        "loads": int(total[:, 0].sum()),
        "served_wrong_objects": int(total[O_WRONG, 0]),
        "served_wrong_bytes": int(total[O_WRONG, 1]),
        # loads through an index entry a fault-free index does not hold (restored stale), and those of them
        # served correct anyway (the units still held the same content: lucky); both among `loads`
        "stale_entry_loads": int(stale[S_STALE, 0]),
        "stale_entry_bytes": int(stale[S_STALE, 1]),
        "lucky_loads": int(stale[S_LUCKY, 0]),
        "lucky_bytes": int(stale[S_LUCKY, 1]),
        # ... and those whose entry's extent held another content's write whole: its checksum is right
        "stale_foreign_loads": int(stale[S_FOREIGN, 0]),
        "stale_foreign_bytes": int(stale[S_FOREIGN, 1]),
        # ... and those served wrong: the stale index's harm that the contract let through
        "stale_wrong_loads": int(stale[S_WRONG, 0]),
        "stale_wrong_bytes": int(stale[S_WRONG, 1]),
        "recompute_tokens": recompute_tokens,
        "recompute_ns": rns,  # prefill time of the recomputed tokens (cost model)
        "ttft_added_ns_mean": rns // recomputed if recomputed else 0,  # per load that had to recompute
    }
