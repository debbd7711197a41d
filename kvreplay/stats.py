"""``kvbed trace stats``: summary of a lifecycle trace in one streaming pass.

What is computed (memory: one row group plus ~100 bytes per object, and ~30 bytes per chunk reference and per
write for the content section):

* per (op, tier): events and bytes; per tenant and per kind: objects, bytes
  persisted, loads, hits, median lifetime
* object lifetime: first event (create/transform) to the event that removes its
  last copy (delete, or evict/invalidate of the last copy); objects still holding
  a copy at the end are counted as live, not as lifetimes
* residency per tier: persist/commit/recover of a copy to its evict/delete/invalidate
* reuse distance: exact LRU stack distance over the object access stream
  (create, transform, recover = first/rebuilding accesses; hit, load = reuses):
  for each reuse, the number of distinct objects (and their bytes) accessed since
  the previous access of the same object, from Fenwick trees over access
  positions (compacted when full). Histograms are log-linear (<= 0.8% error).
* share of reuses (hits + loads) that go to the top 10% most reused objects
* content by tier (:mod:`kvreplay.contentstats`, whole batch after the pass): per tier accesses, the policy's,
  Belady's and an unbounded cache's hit ratios, reuse distance by key and by object, re-written writes
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
from devicemodels.jit import njit

from devicemodels.histogram import SLOT_N, LatencyHistogram, hist_record, new_rows
from kvreplay.contentstats import ContentCollector
from kvreplay.fenwick import fw_add as _fw_add
from kvreplay.fenwick import fw_sum as _fw_sum
from kvreplay.schema import (
    KINDS,
    OP_COMMIT,
    OP_CREATE,
    OP_DELETE,
    OP_EVICT,
    OP_HIT,
    OP_INVALIDATE,
    OP_LOAD,
    OP_PERSIST,
    OP_RECOVER,
    OP_TRANSFORM,
    OPS,
    TIERS,
    TraceReader,
)
from kvreplay.tiers import hitratio
from kvreplay.validate import IdIndex

NOPS, NTIERS, NKINDS = len(OPS), len(TIERS), len(KINDS)
# histogram rows
H_LIFETIME, H_REUSE_OBJ, H_REUSE_BYTES = 0, 1, 2
H_RES0 = 3  # + tier
H_ROWS = H_RES0 + NTIERS
# per-object columns (int64)
O_FIRST, O_END, O_POS, O_REUSES, O_COPIES, O_NBYTES, O_TENANT, O_KIND = range(8)
O_WIDTH = 8
# scalar state
S_POS, S_MARKS, S_ACCESSES, S_REUSES, S_COLD = range(5)


@njit
def _compact(OS, pos_obj, fw_n, fw_b, sc):
    """Renumber the marked positions 0..marks-1 (keeping order) and rebuild both trees."""
    m = 0
    top = sc[S_POS]
    for p in range(top):
        o = pos_obj[p]
        if o >= 0 and OS[o, O_POS] == p:
            pos_obj[m] = o
            OS[o, O_POS] = m
            m += 1
    for p in range(m, pos_obj.shape[0]):
        pos_obj[p] = -1
    fw_n[:] = 0
    fw_b[:] = 0
    for p in range(m):
        _fw_add(fw_n, p, 1)
        _fw_add(fw_b, p, OS[pos_obj[p], O_NBYTES])
    sc[S_POS] = m
    sc[S_MARKS] = m


@njit
def _stats_kernel(ts, op, oi, tier, nbytes, kind, tenant, OS, TP, pos_obj, fw_n, fw_b, H, sc):
    for i in range(ts.shape[0]):
        o = oi[i]
        c = op[i]
        t = tier[i]
        now = ts[i]
        if OS[o, O_FIRST] < 0:
            OS[o, O_FIRST] = now
            OS[o, O_NBYTES] = nbytes[i]
            OS[o, O_TENANT] = tenant[i]
            OS[o, O_KIND] = kind[i]
        bit = np.int64(1) << t
        # copies and residency
        if c == OP_COMMIT or c == OP_PERSIST or c == OP_RECOVER:
            OS[o, O_COPIES] |= bit
            TP[o, t] = now
        elif c == OP_EVICT or c == OP_INVALIDATE or c == OP_DELETE:
            if OS[o, O_COPIES] & bit:
                hist_record(H[H_RES0 + t], now - TP[o, t])
            OS[o, O_COPIES] &= ~bit
            if (OS[o, O_COPIES] == 0 or c == OP_DELETE) and OS[o, O_END] < 0:
                OS[o, O_END] = now
                hist_record(H[H_LIFETIME], now - OS[o, O_FIRST])
        # access stream for reuse distance
        if c == OP_CREATE or c == OP_TRANSFORM or c == OP_RECOVER or c == OP_HIT or c == OP_LOAD:
            sc[S_ACCESSES] += 1
            p = sc[S_POS]
            last = OS[o, O_POS]
            if last >= 0:
                if c == OP_HIT or c == OP_LOAD:
                    dn = sc[S_MARKS] - _fw_sum(fw_n, last)
                    db = _fw_sum(fw_b, p - 1) - _fw_sum(fw_b, last) if p > 0 else 0
                    hist_record(H[H_REUSE_OBJ], dn)
                    hist_record(H[H_REUSE_BYTES], db)
                    sc[S_REUSES] += 1
                _fw_add(fw_n, last, -1)
                _fw_add(fw_b, last, -OS[o, O_NBYTES])
            else:
                sc[S_MARKS] += 1
                if c == OP_HIT or c == OP_LOAD:
                    sc[S_COLD] += 1  # reuse of an object whose first access the trace does not hold
            _fw_add(fw_n, p, 1)
            _fw_add(fw_b, p, OS[o, O_NBYTES])
            pos_obj[p] = o
            OS[o, O_POS] = p
            sc[S_POS] = p + 1
            if c == OP_HIT or c == OP_LOAD:
                OS[o, O_REUSES] += 1


class _State:
    def __init__(self, n_obj: int, fw_cap: int):
        self.OS = np.full((0, O_WIDTH), -1, np.int64)
        self.TP = np.zeros((0, NTIERS), np.int64)
        self.grow_objects(n_obj)
        self.fw_cap = 0
        self.pos_obj = np.zeros(0, np.int64)
        self.fw_n = np.zeros(1, np.int64)
        self.fw_b = np.zeros(1, np.int64)
        self.sc = np.zeros(5, np.int64)
        self.H = new_rows(H_ROWS)
        self.grow_fenwick(fw_cap)

    def grow_objects(self, n: int) -> None:
        if n <= len(self.OS):
            return
        m = max(n, 2 * len(self.OS), 1024)
        OS = np.full((m, O_WIDTH), -1, np.int64)
        OS[:, O_REUSES] = 0
        OS[:, O_COPIES] = 0
        OS[: len(self.OS)] = self.OS
        TP = np.zeros((m, NTIERS), np.int64)
        TP[: len(self.TP)] = self.TP
        self.OS, self.TP = OS, TP

    def grow_fenwick(self, cap: int) -> None:
        old = self.pos_obj
        self.fw_cap = cap
        self.pos_obj = np.full(cap, -1, np.int64)
        self.pos_obj[: len(old)] = old
        self.fw_n = np.zeros(cap + 1, np.int64)
        self.fw_b = np.zeros(cap + 1, np.int64)
        if len(old):
            _compact(self.OS, self.pos_obj, self.fw_n, self.fw_b, self.sc)

    def room_for(self, n: int) -> None:
        """Make sure ``n`` more accesses fit: compact, and grow if the live marks fill half."""
        if self.sc[S_POS] + n <= self.fw_cap:
            return
        marks = int(self.sc[S_MARKS])
        if marks + n > self.fw_cap // 2:
            self.grow_fenwick(max(2 * (marks + n), 2 * self.fw_cap))
        else:
            _compact(self.OS, self.pos_obj, self.fw_n, self.fw_b, self.sc)


def trace_stats(path: str | os.PathLike, *, progress: Callable[[int, int], None] | None = None,
                fenwick_positions: int = 1 << 20) -> dict[str, Any]:
    reader = TraceReader(path)
    ids = IdIndex(reader)
    st = _State(ids.size, fenwick_positions)
    op_tier_n = np.zeros(NOPS * NTIERS, np.int64)
    op_tier_b = np.zeros(NOPS * NTIERS, np.float64)
    ten_op_n = np.zeros(0, np.int64)
    ten_op_b = np.zeros(0, np.float64)
    kind_op_n = np.zeros(NKINDS * NOPS, np.int64)
    kind_op_b = np.zeros(NKINDS * NOPS, np.float64)
    content = ContentCollector()
    rows = 0
    t_first = t_last = None
    for rg, b in enumerate(reader.iter_batches()):
        n = b.n
        if n == 0:
            continue
        op = b["op"].astype(np.int64)
        tier = b["tier"].astype(np.int64)
        kind = b["kind"].astype(np.int64)
        ten = b["tenant"].astype(np.int64)
        nb = b["nbytes"]
        ot = op * NTIERS + tier
        op_tier_n += np.bincount(ot, minlength=NOPS * NTIERS)
        op_tier_b += np.bincount(ot, weights=nb, minlength=NOPS * NTIERS)
        nten = len(reader.tenants)
        if len(ten_op_n) < nten * NOPS:
            ten_op_n = np.r_[ten_op_n, np.zeros(nten * NOPS - len(ten_op_n), np.int64)]
            ten_op_b = np.r_[ten_op_b, np.zeros(nten * NOPS - len(ten_op_b), np.float64)]
        to = ten * NOPS + op
        ten_op_n += np.bincount(to, minlength=nten * NOPS)
        ten_op_b += np.bincount(to, weights=nb, minlength=nten * NOPS)
        ko = kind * NOPS + op
        kind_op_n += np.bincount(ko, minlength=NKINDS * NOPS)
        kind_op_b += np.bincount(ko, weights=nb, minlength=NKINDS * NOPS)

        oi = ids.objects(b["obj_id"])
        st.grow_objects(ids.size)
        st.room_for(n)
        content.add(op, tier, oi, b["content_key"], nb, kind, b["scope"])
        _stats_kernel(b["ts_ns"], op, oi, tier, nb, kind, ten, st.OS, st.TP, st.pos_obj, st.fw_n, st.fw_b, st.H, st.sc)
        if t_first is None:
            t_first = int(b["ts_ns"][0])
        t_last = int(b["ts_ns"][-1])
        rows += n
        if progress is not None:
            progress(rg + 1, reader.num_row_groups)

    OS = st.OS[: ids.size]
    seen = OS[:, O_FIRST] >= 0
    ended = seen & (OS[:, O_END] >= 0)
    live = seen & (OS[:, O_COPIES] != 0) & ~ended
    reuses = OS[seen, O_REUSES]
    top10 = _top_share(reuses, 0.10)
    lifetimes = OS[ended, O_END] - OS[ended, O_FIRST]
    end_ten = OS[ended, O_TENANT]
    end_kind = OS[ended, O_KIND]
    sc = st.sc
    meta = reader.meta
    tier_stats = hitratio.upgrade(meta.tier_stats, meta.extra.get("tier_sim_counters"))

    def hist(row: int) -> dict[str, Any]:
        return LatencyHistogram(st.H[row].copy()).to_dict()

    out: dict[str, Any] = {
        "path": str(path),
        "rows": rows,
        "row_groups": reader.num_row_groups,
        "span_ns": (t_last - t_first) if rows else 0,
        "meta": {
            "source": meta.source,
            "geometry": meta.geometry,
            "generator": meta.generator,
            "source_facts": meta.source_facts,
            "tier_stats": tier_stats,
            "created_by": meta.created_by,
            "format_version": meta.format_version,
            "content_keys": reader.has_content_key,  # False: a v1 trace, no content identity to count by
        },
        "ops": [
            {"op": OPS[i // NTIERS], "tier": TIERS[i % NTIERS], "count": int(op_tier_n[i]), "bytes": int(op_tier_b[i])}
            for i in np.flatnonzero(op_tier_n)
        ],
        "objects": {
            "total": int(seen.sum()),
            "ended": int(ended.sum()),
            "live_at_end": int(live.sum()),
            "never_stored": int((seen & ~ended & ~live).sum()),
        },
        "lifetime_ns": hist(H_LIFETIME),
        "residency_ns": {TIERS[t]: hist(H_RES0 + t) for t in range(NTIERS) if st.H[H_RES0 + t, SLOT_N] > 0},
        "reuse": {
            "accesses": int(sc[S_ACCESSES]),
            "reuses": int(sc[S_REUSES]),
            "reuses_without_first_access": int(sc[S_COLD]),
            "distance_objects": hist(H_REUSE_OBJ),
            "distance_bytes": hist(H_REUSE_BYTES),
            "top10pct_objects_reuse_share": top10,
            "objects_never_reused_share": float((reuses == 0).mean()) if len(reuses) else 0.0,
        },
        "tenants": _groups(reader.tenants, ten_op_n, ten_op_b, OS[seen, O_TENANT], end_ten, lifetimes),
        "kinds": _groups(list(KINDS), kind_op_n, kind_op_b, OS[seen, O_KIND], end_kind, lifetimes),
        "content": content.result(tier_stats, reader.has_content_key),
    }
    return out


def _top_share(counts: np.ndarray, frac: float) -> float:
    total = int(counts.sum())
    if total == 0 or len(counts) == 0:
        return 0.0
    k = max(1, int(np.ceil(frac * len(counts))))
    top = np.partition(counts, len(counts) - k)[len(counts) - k:]
    return float(top.sum()) / total


def _groups(names: list[str], op_n: np.ndarray, op_b: np.ndarray, obj_group: np.ndarray, end_group: np.ndarray,
            lifetimes: np.ndarray) -> list[dict[str, Any]]:
    out = []
    ng = len(op_n) // NOPS
    objs = np.bincount(obj_group, minlength=ng) if len(obj_group) else np.zeros(ng, np.int64)
    for g in range(ng):
        row_n = op_n[g * NOPS:(g + 1) * NOPS]
        row_b = op_b[g * NOPS:(g + 1) * NOPS]
        if row_n.sum() == 0:
            continue
        lt = lifetimes[end_group == g]
        out.append({
            "name": names[g] if g < len(names) else str(g),
            "events": int(row_n.sum()),
            "objects": int(objs[g]) if g < len(objs) else 0,
            "persist_bytes": int(row_b[OPS.index("persist")]),
            "loads": int(row_n[OPS.index("load")]),
            "hits": int(row_n[OPS.index("hit")]),
            "deletes": int(row_n[OPS.index("delete")]),
            "invalidations": int(row_n[OPS.index("invalidate")]),
            # nearest rank, as the trace-wide percentiles (no value between two objects' lifetimes)
            "lifetime_p50_ns": int(np.percentile(lt, 50, method="inverted_cdf")) if len(lt) else None,
            "lifetime_p90_ns": int(np.percentile(lt, 90, method="inverted_cdf")) if len(lt) else None,
        })
    return out
