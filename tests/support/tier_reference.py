"""The tier simulator's independent plain-Python model (RefSim) and the small traces the tier tests share."""

from __future__ import annotations

import collections
from dataclasses import replace

import numpy as np

from kvreplay.requests import RequestTrace
from kvreplay.schema import OPS, TIERS, EventBatch
from kvreplay.tiers import TierSimParams, simulate


BPT = 131072  # llama-3-8b bf16
T = 16  # tokens per object in these tests
OBJ = T * BPT  # 2 MiB


def run(reqs: RequestTrace, params: TierSimParams):
    out: list[EventBatch] = []
    res = simulate(reqs, params, out.append, buffer_events=4096)
    return EventBatch.concat(out), res


def small_params(**kw) -> TierSimParams:
    base = TierSimParams(tokens_per_object=T, gpu_bytes=8 * OBJ, cpu_bytes=20 * OBJ, cxl_bytes=0, ssd_bytes=60 * OBJ)
    return replace(base, **kw)


def random_trace(seed: int, n: int = 400, max_chunks: int = 6, partial: float = 0.3) -> RequestTrace:
    """Requests whose prompts walk a random prefix tree (shared prefixes; a share ``partial`` of them ends
    in a partial block)."""
    rng = np.random.default_rng(seed)
    children: dict[tuple, int] = {}
    next_id = [0]

    def child(prefix: tuple) -> int:
        opts = [children.setdefault(prefix + (i,), len(children)) for i in range(3)]
        return opts[int(rng.integers(0, 3))] if rng.random() < 0.85 else _fresh()

    def _fresh() -> int:
        next_id[0] += 1
        return 10_000_000 + next_id[0]

    ids, off, inp = [], [0], []
    for _ in range(n):
        k = int(rng.integers(1, max_chunks + 1))
        path: tuple = ()
        for _ in range(k):
            b = child(path)
            path = path + (b,)
            ids.append(b)
        off.append(len(ids))
        inp.append(k * T - int(rng.integers(0, T)) if rng.random() < partial else k * T)
    arrival = np.cumsum(rng.integers(1_000_000, 50_000_000, n))
    return RequestTrace(arrival_ns=arrival, input_tokens=np.array(inp), output_tokens=rng.integers(1, 100, n),
                        block_offsets=np.array(off), block_ids=np.array(ids), block_tokens=T)


# --------------------------------------------------------------------------- independent reference


class RefSim:
    """Plain-Python model of the documented tier semantics (LRU everywhere), written from the
    docstring of kvreplay.tiers.sim, not from the kernel: OrderedDicts per tier, explicit recursion."""

    def __init__(self, params: TierSimParams, reqs: RequestTrace):
        self.p = params
        self.tiers = [t for t in range(4) if params.capacity(("gpu", "cpu", "cxl", "ssd")[t]) > 0]
        self.cap = {t: params.capacity(("gpu", "cpu", "cxl", "ssd")[t]) for t in self.tiers}
        self.lru = {t: collections.OrderedDict() for t in self.tiers}  # key -> (obj, nbytes); last = MRU
        self.used = {t: 0 for t in self.tiers}
        self.inst: dict = {}
        self.copies = collections.Counter()
        self.next_obj = 1
        self.events: list[tuple[str, str, int]] = []
        self.reqs = reqs
        self.spill = params.write_policy == "spill"
        # per tier: lookups that reached it, hits, bytes written in (commit/recover/persist), bytes read out (load)
        self.lookups = collections.Counter()
        self.hits = collections.Counter()
        self.bytes_in = collections.Counter()
        self.bytes_out = collections.Counter()

    def emit(self, op, tier, obj):
        self.events.append((op, TIERS[tier], obj))

    def lower(self, t):
        lows = [u for u in self.tiers if u > t]
        return lows[0] if lows else None

    def make_room(self, t, nbytes, pinned, allow_pinned=True):
        while self.used[t] + nbytes > self.cap[t]:
            # the least recently used entry the request does not use; those it uses stay where they stand
            victim = next((k for k in self.lru[t] if k not in pinned), None)
            if victim is None:  # every entry is in use: the LRU one goes, unless this is a spill target
                if not allow_pinned:
                    return False
                victim = next(iter(self.lru[t]))
            obj, vb = self.lru[t].pop(victim)
            self.used[t] -= vb
            if self.spill:
                u = self.lower(t)
                if u is not None and victim not in self.lru[u]:
                    # the copy in t still counts until its evict below
                    if self.make_room(u, vb, pinned, allow_pinned=False):
                        self.place(u, victim, obj, vb, "persist")
            self.copies[obj] -= 1
            last = self.copies[obj] == 0
            self.emit("delete" if last else "evict", t, obj)
            if last and self.inst.get(victim) == obj:
                del self.inst[victim]
        return True

    def place(self, t, key, obj, nbytes, op):
        self.lru[t][key] = (obj, nbytes)
        self.used[t] += nbytes
        self.copies[obj] += 1
        self.bytes_in[t] += nbytes
        self.emit(op, t, obj)

    def admit(self, t, key, obj, nbytes, pinned):
        self.copies[obj] += 1
        self.make_room(t, nbytes, pinned)
        self.copies[obj] -= 1
        self.place(t, key, obj, nbytes, "persist")

    def run(self, chunk_keys_per_req, chunk_tokens_per_req):
        for keys, toks in zip(chunk_keys_per_req, chunk_tokens_per_req):
            pinned: set = set()
            h = len(keys)
            for j, (k, ntok) in enumerate(zip(keys, toks)):
                where = [t for t in self.tiers if k in self.lru[t]]
                for u in self.tiers:  # looked up from the fastest tier down to the first that holds k
                    self.lookups[u] += 1
                    if where and u == where[0]:
                        break
                if not where:
                    h = j
                    break
                t = where[0]
                self.hits[t] += 1
                pinned.add(k)
                obj = self.lru[t][k][0]
                self.lru[t].move_to_end(k)
                if t == 0:
                    self.emit("hit", 0, obj)
                    continue
                self.emit("load", t, obj)
                self.bytes_out[t] += self.lru[t][k][1]
                self.admit(0, k, obj, ntok * BPT, pinned)
                if not self.spill and self.p.promote_on_load:
                    for u in self.tiers:
                        if 0 < u < t and k not in self.lru[u]:
                            self.admit(u, k, obj, ntok * BPT, pinned)
            for k, ntok in list(zip(keys, toks))[h:]:
                pinned.add(k)
                nb = ntok * BPT
                x = self.inst.get(k)
                if x is not None and k in self.lru[0]:
                    self.lru[0].move_to_end(k)
                    continue
                if x is None:
                    x = self.next_obj
                    self.next_obj += 1
                    self.inst[k] = x
                    self.make_room(0, nb, pinned)
                    self.emit("create", 0, x)
                    self.place(0, k, x, nb, "commit")
                else:
                    self.copies[x] += 1
                    self.make_room(0, nb, pinned)
                    self.copies[x] -= 1
                    self.place(0, k, x, nb, "recover")
                if not self.spill:
                    for u in self.tiers:
                        if u > 0 and k not in self.lru[u]:
                            self.admit(u, k, x, nb, pinned)


def chunks_of(reqs: RequestTrace):
    from kvreplay.tiers.chunking import chunk_requests

    off, key, ntok, _, _ = chunk_requests(reqs.block_offsets, reqs.block_ids, reqs.input_tokens, reqs.scope,
                                          reqs.block_tokens, T)
    return ([key[off[r]:off[r + 1]].tolist() for r in range(reqs.n)],
            [ntok[off[r]:off[r + 1]].tolist() for r in range(reqs.n)])


def as_tuples(b: EventBatch):
    return [(OPS[o], TIERS[t], int(x)) for o, t, x in zip(b["op"], b["tier"], b["obj_id"])]
