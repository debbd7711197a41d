"""The request-level view of a multi-tier replay: when is each request's KV ready, and its TTFT.

Per request (the trace's ``request_id``), from the lifecycle events and the completions the tier devices gave:

* chunks hit in GPU memory cost nothing; chunks the tier simulator computed (``create``/``recover`` in GPU)
  are *missed* tokens, recomputed at the cost model's prefill throughput;
* a request asks every tier for all of its chunks when it starts (its first event): the multi-tier replay
  issues those reads then, so one tier's loads queue behind each other on its link, channels and dies, and
  different tiers load concurrently. A loaded chunk is *ready* when its read completes (plus decompression on
  the GPU when the tier holds a quantized or compressed copy). A load the tier could not serve (the replay's
  layout had evicted the copy) is recomputed.
* KV-ready = the latest ready time of the chunks loaded + the recompute time of every other token;
  service = KV-ready + the first decode step; TTFT = queueing + service, requests served first come, first
  served by ``prefill_instances`` instances (each one accelerator of the cost model).

``on_hit``: ``load`` every chunk a lower tier holds, ``recompute`` them all, or ``best``: the cheapest plan
given each chunk's ready time in the replay (the device's queue at that moment). A plan loading the set L
costs max(ready over L) + recompute(the rest), so the best plan loads the chunks ready before a threshold;
trying each chunk's ready time as the threshold, and loading nothing, is exact. Its KV-ready is never above
either other mode's (both are among the plans tried), and FCFS queueing is monotone in service times (the
Kiefer-Wolfowitz recursion), so no request's TTFT is either. All three come from one replay and are reported
side by side; ``on_hit`` picks the headline. The ready times are those of the run where every chunk was loaded:
a plan that loads fewer would find shorter queues, so ``best`` is slightly pessimistic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from devicemodels.histogram import LatencyHistogram
from devicemodels.jit import njit
from kvreplay import schema as S
from kvreplay.costmodel import CostParams
from kvreplay.tiers import hitratio
from kvbed.core.errors import KvbedError
from kvbed.core.params import check_fields, param

ON_HIT = ("load", "recompute", "best")
COLUMNS = ["ts_ns", "op", "tier", "request_id", "ntokens", "nbytes", "kind"]
#: where a request's chunk came from, in result.json's breakdown
SOURCES = ("gpu", *(t for t in S.TIERS if t != "gpu"), "recompute", "unserved")


@dataclass(frozen=True)
class RequestParams:
    on_hit: str = param("load", "a chunk held in a lower tier is loaded, recomputed, or best: per request the "
                                "cheaper plan given each load's latency in the replay", choices=ON_HIT, cli=True)
    prefill_instances: int = param(0, "prefill instances serving requests first come, first served (one "
                                      "accelerator of the cost model each); 0 = the trace's aggregate prefill "
                                      "throughput / one instance's, rounded up (1 if the trace does not say)")

    def validate(self) -> "RequestParams":
        check_fields(self)
        if self.prefill_instances < 0:
            raise KvbedError(f"prefill_instances must be >= 0, got {self.prefill_instances}")
        return self


@njit
def fcfs_starts(arrival, service, instances):
    """Start time of each request (arrival order) on ``instances`` identical servers, first come first served:
    each takes the server that frees first (a binary heap of next-free times)."""
    n = arrival.shape[0]
    start = np.empty(n, np.int64)
    heap = np.zeros(instances, np.int64)
    for i in range(n):
        s = heap[0] if heap[0] > arrival[i] else arrival[i]
        start[i] = s
        heap[0] = s + service[i]
        j = 0  # sift the root down
        while True:
            a = 2 * j + 1
            if a >= instances:
                break
            b = a + 1
            c = b if b < instances and heap[b] < heap[a] else a
            if heap[c] >= heap[j]:
                break
            heap[c], heap[j] = heap[j], heap[c]
            j = c
    return start


def collect(reader: S.TraceReader, reads: dict[int, tuple[np.ndarray, np.ndarray]], bytes_per_token: int
            ) -> dict[str, np.ndarray]:
    """Stream the trace once: every chunk a request used (a GPU hit, a load from a tier with the completion
    time its replay gave, or a computed chunk). ``reads``: tier code -> (rows, completion ns) of the read
    events that tier's replay served, in row order."""
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("request", "source", "tokens", "exact_bytes", "derived",
                                                          "done_ns")}
    src_of_tier = np.array([SOURCES.index(t) for t in S.TIERS], np.int8)
    row0 = 0
    for b in reader.iter_batches(COLUMNS):
        op, tier, req = b["op"], b["tier"], b["request_id"]
        has_req = req >= 0
        hit = (op == S.OP_HIT) & (tier == S.TIER_GPU) & has_req
        comp = ((op == S.OP_CREATE) | (op == S.OP_RECOVER)) & (tier == S.TIER_GPU) & has_req
        load = (op == S.OP_LOAD) & (tier != S.TIER_GPU) & has_req
        sel = np.flatnonzero(hit | comp | load)
        src = np.where(comp[sel], SOURCES.index("recompute"), src_of_tier[tier[sel]]).astype(np.int8)
        done = np.full(len(sel), -1, np.int64)
        is_load = load[sel]
        for code in np.unique(tier[sel][is_load]).tolist():  # every one replayed (the run checked first)
            m = np.flatnonzero(is_load & (tier[sel] == code))
            rows, dones = reads[code]
            want = row0 + sel[m]
            k = np.minimum(np.searchsorted(rows, want), max(0, len(rows) - 1))
            found = (rows[k] == want) if len(rows) else np.zeros(len(m), bool)
            done[m[found]] = dones[k[found]]
        src[is_load & (done < 0)] = SOURCES.index("unserved")
        tok = b["ntokens"][sel].astype(np.int64)
        parts["request"].append(req[sel].astype(np.int64))
        parts["source"].append(src)
        parts["tokens"].append(tok)
        parts["exact_bytes"].append(tok * bytes_per_token)
        parts["derived"].append(is_load & (b["kind"][sel] != S.KIND["exact"]))
        parts["done_ns"].append(done)
        row0 += b.n
    return {k: np.concatenate(v) for k, v in parts.items()}


def _plans(ev: dict[str, np.ndarray], ready: np.ndarray, nreq: int, ridx: np.ndarray, cost: CostParams
           ) -> dict[str, dict[str, np.ndarray]]:
    """KV-ready ns per request of each on_hit mode, and the tokens each plan loaded.

    ``ready``: when each loaded chunk is usable, from its request's start (its device completion, plus
    decompression). A plan that loads a set L costs max(ready over L) + recompute(every other token), so the
    best plan loads the chunks ready before some threshold: the minimum over the thresholds at each chunk
    (in ready order) and "load nothing" is exact, and includes both other modes."""
    tok, src = ev["tokens"], ev["source"]
    loaded = ready >= 0
    must = (src == SOURCES.index("recompute")) | (src == SOURCES.index("unserved"))
    must_tok = np.bincount(ridx, weights=np.where(must, tok, 0), minlength=nreq).astype(np.int64)
    load_tok = np.bincount(ridx, weights=np.where(loaded, tok, 0), minlength=nreq).astype(np.int64)
    li = np.flatnonzero(loaded)
    order = li[np.lexsort((ready[li], ridx[li]))]
    r_o, d_o, t_o = ridx[order], ready[order], tok[order]
    # tokens of the request's loadable chunks up to and including each one, in ready order
    seg_start = np.r_[0, np.flatnonzero(np.diff(r_o)) + 1] if len(order) else np.zeros(0, np.int64)
    cum = np.cumsum(t_o)
    base = np.repeat(cum[seg_start] - t_o[seg_start], np.diff(np.r_[seg_start, len(order)]))
    upto = cum - base
    cand = d_o + cost.recompute_ns(must_tok[r_o] + load_tok[r_o] - upto)  # load the chunks up to here
    all_rec = cost.recompute_ns(must_tok + load_tok)
    all_load = all_rec.copy()
    last = np.r_[seg_start[1:] - 1, len(order) - 1] if len(order) else np.zeros(0, np.int64)
    all_load[r_o[last]] = cand[last]
    best = all_rec.copy()
    best_tok = np.zeros(nreq, np.int64)
    if len(order):
        pick = np.lexsort((cand, r_o))  # per request, its cheapest threshold first
        first = pick[np.r_[0, np.flatnonzero(np.diff(r_o[pick])) + 1]]
        better = cand[first] < all_rec[r_o[first]]
        best[r_o[first[better]]] = cand[first[better]]
        best_tok[r_o[first[better]]] = upto[first[better]]
    return {"load": {"kv_ready": all_load, "loaded_tokens": load_tok},
            "recompute": {"kv_ready": all_rec, "loaded_tokens": np.zeros(nreq, np.int64)},
            "best": {"kv_ready": best, "loaded_tokens": best_tok}}


def _lat(values: np.ndarray) -> dict[str, Any]:
    return LatencyHistogram.from_values(values).to_dict()


def request_starts(ids: np.ndarray, ts: np.ndarray, where: str) -> np.ndarray:
    """Trace time each request started (its first event), indexed by request id (-1: no such request), from
    the (request id, time) of every event that has one."""
    if len(ids) == 0:
        raise KvbedError("the trace has no request ids: nothing to estimate TTFT for", where=where)
    start = np.full(int(ids.max()) + 1, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(start, ids, ts)
    start[start == np.iinfo(np.int64).max] = -1
    return start


def request_section(reader: S.TraceReader, reads: dict[int, tuple[np.ndarray, np.ndarray]], req_start: np.ndarray,
                    t0: int, time_scale: float, cost: CostParams, params: RequestParams,
                    trace_prefill_tokens_per_s: float | None) -> tuple[dict[str, Any], list[tuple[str, np.ndarray]]]:
    """result.json's ``requests`` section, and (series, values) for latency.parquet. Times are replay time
    (trace time from ``t0`` divided by ``time_scale``), as the tier devices saw them."""
    ev = collect(reader, reads, cost.bytes_per_token)
    reqs = np.flatnonzero(req_start >= 0)
    nreq = len(reqs)
    rel = req_start[reqs] - t0
    arrival = rel if time_scale == 1.0 else np.floor(rel / time_scale).astype(np.int64)
    ridx = np.searchsorted(reqs, ev["request"])
    ready = np.where(ev["done_ns"] >= 0, ev["done_ns"] - arrival[ridx], -1)
    ready = np.where((ready >= 0) & ev["derived"], ready + cost.decompress_ns(ev["exact_bytes"]), ready)
    instances = params.prefill_instances or (
        max(1, int(np.ceil(trace_prefill_tokens_per_s / cost.tokens_per_s()))) if trace_prefill_tokens_per_s else 1)
    order = np.argsort(arrival, kind="stable")
    plans = _plans(ev, ready, nreq, ridx, cost)
    step = cost.step_ns()
    series: list[tuple[str, np.ndarray]] = []
    modes: dict[str, Any] = {}
    for mode, p in plans.items():
        service = p["kv_ready"] + step
        start = np.empty(nreq, np.int64)
        start[order] = fcfs_starts(arrival[order], service[order], instances)
        queue = start - arrival
        ttft = queue + service
        modes[mode] = {"ttft_ns": _lat(ttft), "kv_ready_ns": _lat(p["kv_ready"]), "queue_ns": _lat(queue),
                       "loaded_tokens": int(p["loaded_tokens"].sum())}
        series += [(f"ttft.{mode}", ttft), (f"kv_ready.{mode}", p["kv_ready"]), (f"queue.{mode}", queue)]
    # where the chunks came from, and per tier the share of every request's chunks it served (ref_hit_ratio)
    # and its hits among the lookups that reached it (lookup_hit_ratio; kvreplay.tiers.hitratio). As in the
    # tier simulator, a request probes its prefix chunk by chunk and stops at the first chunk no tier holds:
    # its computed chunks are one lookup that missed everywhere; a load the replay could not serve missed too.
    tok, src = ev["tokens"], ev["source"]
    by_src = {s: {"chunks": int(np.count_nonzero(src == i)), "tokens": int(tok[src == i].sum())}
              for i, s in enumerate(SOURCES)}
    computed = np.bincount(ridx, weights=(src == SOURCES.index("recompute")), minlength=nreq) > 0
    reached = sum(by_src[s]["chunks"] for s in SOURCES[:-2]) + by_src["unserved"]["chunks"] + int(computed.sum())
    tiers: dict[str, Any] = {}
    for i, s in enumerate(SOURCES[:-2]):
        served = by_src[s]["chunks"]
        if s != "gpu" and S.TIER[s] not in reads:
            reached -= served
            continue
        entry: dict[str, Any] = {"lookups": reached, "hits": served, **hitratio.ratios(served, reached, len(tok))}
        if s != "gpu":  # a loaded chunk's wait from its request's start (device queueing included)
            m = (src == i) & (ready >= 0)
            entry["ready_ns"] = _lat(ready[m])
            series.append((f"ready.{s}", ready[m]))
        tiers[s] = entry
        reached -= served
    section = {
        "on_hit": params.on_hit,
        "requests": nreq,
        "prefill_instances": instances,
        "prefill_tokens_per_s": cost.tokens_per_s(),
        "decode_step_ns": step,
        "bytes_per_token": cost.bytes_per_token,
        "chunks_by_source": by_src,
        "token_hit_ratio": 1 - (by_src["recompute"]["tokens"] + by_src["unserved"]["tokens"]) / max(1, int(tok.sum())),
        "tiers": tiers,
        "ttft_ns": modes[params.on_hit]["ttft_ns"],
        "kv_ready_ns": modes[params.on_hit]["kv_ready_ns"],
        "queue_ns": modes[params.on_hit]["queue_ns"],
        "modes": modes,
    }
    return section, series
