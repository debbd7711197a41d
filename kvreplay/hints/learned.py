"""``learned``: a gradient-boosted lifetime model trained online on the deaths seen so far - no future knowledge.

Every write of the replayed tier gets a row of *causal features* (:data:`FEATURES`), everything knowable when
the write happens: the object's kind, tenant, scope, size, prefix depth (through ``parent_id``), session turn;
its content's history (``content_key``, the object id on a v1 trace): tier writes and reads of that content
before, the time since its last event and its last tier write, and how long its previous copy on the tier lived;
the tier's state: evictions seen so far, live bytes against the peak so far, tier capacities written so far;
and the write rate and request inter-arrival (moving averages). One numba pass per batch
(:func:`feature_kernel`) computes the rows and records each copy's death (the write it was born by, its lifetime
on the lifetime clock) as it happens.

The model (scikit-learn's ``HistGradientBoostingRegressor``, an optional dependency: ``pip install
'kvbed[learn]'``) predicts log2 lifetime, with 10 trees of 15 leaves at a learning rate of 0.2 per fit: only the
ranking of its predictions matters, and 20 trees at 0.1 gave the same guarded WAF on all 6 practical-hints
settings x 3 seeds (18 runs) at twice the cost of fits and predictions. It is refit every ``retrain_writes``
writes, counted in trace order, on the older half of the last ``train_window`` writes (at most ``train_rows`` of
them, by an even stride; half of all writes so far while there are fewer), the first fits at 1024, 2048,
4096... writes: a copy that has died teaches its lifetime, a copy still alive its age so far (a lower bound:
right-censored, and long-lived anyway). Predictions become classes by the quantiles of the model's own
predictions on its training rows (so every placement id gets a share, as ``predicted``). Until the first fit
(1024 writes and ``fit_min_deaths`` deaths), every write goes to class 0 (it knows nothing yet).

Classes depend only on events up to the write and never on batch boundaries: the rows do not depend on the
model, and each refit happens at a fixed write count with the deaths stamped before it.

Measured unguarded (``--param abstain=false``; ``scripts/predictability.py``, fdp op_ratio 0.07, fill_ratio 1.0,
end-to-end WAF none -> learned, oracle; saved in docs/figures/predictability/): Mooncake (S3-FIFO SSD tier 1
TiB) 1.1153 -> 1.0173, oracle 1.0000 (85% of the oracle's cut); the synthetic trace seeds 0 and 1 1.8385 ->
1.8800 and 2.0589 -> 2.0831 (worse than none: there deaths are the application's
deletes, which these features do not predict - see "How predictable is the oracle's class?" in
docs/guides/replay-and-hints.md).

Guarded (:mod:`kvreplay.hints.abstain`, ordered classes) with the survival test: it follows its classes only
while they predict which of its copies outlive one drive capacity of writes (correlation of class and "outlived
it" at least ``min_separation``, 0.5), else class 0 (as no hints). The lifetime test the other policies use
could not tell the two traces apart in time: it judges by the copies seen to die, and the long-lived ones die
last - on Mooncake the correlation climbed to 0.81 only by the end, on the synthetic trace it peaked at
0.66-0.87 early (the short-lived copies die first) and fell to 0.38; at a bar of 0.8 it captured 2.3% of
Mooncake's cut, at 0.6 it was 10.5% worse than none on the synthetic trace. Measured with the survival test at
the defaults (fdp op_ratio 0.07, fill_ratio 1.0, end-to-end WAF, none -> learned): Mooncake 1.1153 -> 1.0212
initially isolated, 1.0205 persistently (oracle 1.0000: 82% of its cut; unguarded 85%); the synthetic trace (3
seeds, op 0.07 and 0.28, both handle types): the WAF of none on every run (it never follows). Safe and strong at
the same defaults; the figures per setting are in the practical-hints study's findings.

Knows: the past only - every tier's events up to the write, the lifetimes of copies that already died, and the
drive's logical capacity (the guard's horizon).
"""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from devicemodels.jit import kernel
from kvreplay import schema as S
from kvreplay.hints.abstain import AbstainGuard, SurvivalGuardParams
from kvreplay.hints.base import HintPolicy
from kvreplay.hints.oracle import CLOCK_UNIT, CLOCKS
from kvreplay.hints.registry import HINTS
from kvreplay.layout.actions import A_DROP, A_FREE, A_READ, A_WRITE
from kvreplay.layout.objtable import ObjTable, ot_find, ot_full, ot_insert, ot_remove
from kvbed.core.errors import KvbedError
from kvbed.core.params import param

#: the causal feature columns, in row order (what each write's row holds)
FEATURES = (
    "kind",  # schema kind code
    "tenant",  # tenant code
    "scope",  # scope code
    "op",  # persist or recover
    "log2_nbytes",  # size
    "log2_depth",  # prefix depth + 1, log2 (chunks before it in its prefix chain)
    "turn",  # session turn (earlier requests of its session seen), -1 without a session
    "content_tier_writes",  # earlier writes of this content to the tier
    "content_reads",  # earlier reads (load/hit, any tier) of this content
    "log2_since_content_event",  # trace ns since the content's last event (any tier), -1: first event
    "log2_since_content_write",  # trace ns since the content's last tier write, -1: none
    "log2_prev_copy_life",  # lifetime of the content's previous copy on the tier (lifetime clock), -1: none
    "log2_tier_evictions",  # evictions from the tier seen so far (+1, log2)
    "tier_live_share",  # live bytes on the tier / the peak so far
    "tier_capacities_written",  # bytes written to the tier / the peak live bytes so far
    "log2_write_gap",  # moving average of the trace ns between tier writes (log2)
    "log2_request_gap",  # moving average of the trace ns between new requests (log2)
)
NF = len(FEATURES)
EWMA = 1.0 / 64.0  # weight of the newest gap in the moving averages

OP_DELETE, OP_TRANSFORM, OP_EVICT, OP_LOAD, OP_HIT = S.OP_DELETE, S.OP_TRANSFORM, S.OP_EVICT, S.OP_LOAD, S.OP_HIT
KIND_EXACT = S.KIND["exact"]


class FeatEvents(NamedTuple):
    """One batch of trace events, n of them (read-only in the kernel)."""

    op: np.ndarray  # int8[n]      schema op code
    obj: np.ndarray  # uint64[n]   object id
    parent: np.ndarray  # uint64[n] parent_id: previous chunk of the prefix, or a transform's source (0: none)
    ts: np.ndarray  # int64[n]     trace time (ns)
    nbytes: np.ndarray  # int64[n]  bytes of the object
    kind: np.ndarray  # int8[n]    schema kind code
    tenant: np.ndarray  # int32[n] tenant code
    scope: np.ndarray  # int32[n]  scope code
    req: np.ndarray  # int64[n]    request id (-1: none)
    sess: np.ndarray  # int64[n]   session id (-1: none)
    content: np.ndarray  # uint64[n] content_key (0: none known, the object id stands in)
    actions: np.ndarray  # int8[n] what the event does on the replayed tier (kvreplay.layout.actions A_*)


class FeatObjects(NamedTuple):
    """Objects seen and not deleted (ObjTable ``kv, meta, free`` and per-slot columns, ``cap`` slots)."""

    kv: np.ndarray  # int64[2 cap or more, 2] object id -> slot
    meta: np.ndarray  # int64[3] table counters
    free: np.ndarray  # int32[cap] free-slot stack
    depth: np.ndarray  # int32[cap] prefix depth
    turn: np.ndarray  # int32[cap] session turn when first seen (-1: no session)
    content: np.ndarray  # int64[cap] slot of its content in FeatContents
    birth: np.ndarray  # int64[cap] lifetime clock when its tier copy was written (-1: no copy there)
    widx: np.ndarray  # int64[cap] global write index of its tier copy (-1: none)
    nbytes: np.ndarray  # int64[cap] bytes of its tier copy


class FeatContents(NamedTuple):
    """Contents seen (never removed: their history is the feature), ObjTable keyed by content key."""

    kv: np.ndarray  # int64[2 cap or more, 2] content key -> slot
    meta: np.ndarray  # int64[3] table counters
    free: np.ndarray  # int32[cap] free-slot stack
    writes: np.ndarray  # int32[cap] tier writes of the content so far
    reads: np.ndarray  # int32[cap] loads/hits of the content so far (any tier)
    last_ts: np.ndarray  # int64[cap] trace ns of its last event (-1: none yet)
    last_write_ts: np.ndarray  # int64[cap] trace ns of its last tier write (-1: none)
    prev_life: np.ndarray  # int64[cap] lifetime of its last dead tier copy (-1: none)


class FeatSessions(NamedTuple):
    """Sessions seen: ObjTable keyed by session id and columns."""

    kv: np.ndarray  # int64[2 cap or more, 2] session id -> slot
    meta: np.ndarray  # int64[3] table counters
    free: np.ndarray  # int32[cap] free-slot stack
    req: np.ndarray  # int64[cap] latest request id of the session (-2: none yet)
    turn: np.ndarray  # int32[cap] requests of the session seen so far


class FeatState(NamedTuple):
    """Global running state (int64/float64 scalars in small arrays)."""

    ints: np.ndarray  # int64[8]: clock, writes so far, tier evictions, live bytes, peak live bytes,
    #                   tier bytes written, last write ts, last new request ts (-1 = none yet)
    reals: np.ndarray  # float64[3]: write-gap average, request-gap average, last request id seen


class FeatOut(NamedTuple):
    """What one kernel call writes: a row per tier write, a record per tier death."""

    rows: np.ndarray  # float32[writes in batch, NF] feature rows
    birth: np.ndarray  # int64[writes in batch] lifetime clock at each write (after its bytes)
    dead_widx: np.ndarray  # int64[events in batch] global write index of each copy that died
    dead_life: np.ndarray  # int64[events in batch] its lifetime (clock ticks)
    dead_stamp: np.ndarray  # int64[events in batch] writes made before its death (when it became known)
    counts: np.ndarray  # int64[2]: rows written, deaths written


I_CLOCK, I_WRITES, I_EVICT, I_LIVE, I_PEAK, I_WBYTES, I_LASTW, I_LASTREQ = range(8)


@kernel(inline="always")
def _lg(x):
    return np.log2(x + 1.0) if x >= 0 else -1.0


@kernel(nogil=True)
def feature_kernel(start, ev, objs, contents, sessions, st, clock_bytes, out):
    """Events [start, ...): their write rows and deaths into ``out``; returns the stop event (< len: grow)."""
    op, obj, parent, ts, nbytes = ev.op, ev.obj, ev.parent, ev.ts, ev.nbytes
    kv, meta, free = objs.kv, objs.meta, objs.free
    ckv, cmeta, cfree = contents.kv, contents.meta, contents.free
    skv, smeta, sfree = sessions.kv, sessions.meta, sessions.free
    ints, reals = st.ints, st.reals
    rows = out.rows
    cnt = out.counts
    for i in range(start, len(op)):
        o = op[i]
        key = obj[i]
        s = ot_find(kv, key)
        if s < 0 and o != OP_DELETE and (ot_full(kv, meta, free) or ot_full(skv, smeta, sfree)
                                         or ot_full(ckv, cmeta, cfree)):
            return i
        if clock_bytes == 0:
            ints[I_CLOCK] = ts[i]
        if ev.req[i] >= 0 and ev.req[i] > reals[2]:  # a new request
            if ints[I_LASTREQ] >= 0:
                reals[1] += EWMA * (max(ts[i] - ints[I_LASTREQ], 0) - reals[1])
            ints[I_LASTREQ] = ts[i]
            reals[2] = ev.req[i]
        if s < 0 and o != OP_DELETE:
            s, _ = ot_insert(kv, meta, free, key)
            depth = 0
            if parent[i] != 0:
                p = ot_find(kv, parent[i])
                if p >= 0:
                    depth = objs.depth[p] + (1 if (o != OP_TRANSFORM and ev.kind[i] == KIND_EXACT) else 0)
            turn = -1
            if ev.sess[i] >= 0:
                q, fresh = ot_insert(skv, smeta, sfree, np.uint64(ev.sess[i]))
                if fresh:
                    sessions.req[q] = -2
                    sessions.turn[q] = 0
                if ev.req[i] > sessions.req[q]:
                    sessions.req[q] = ev.req[i]
                    sessions.turn[q] += 1
                turn = max(sessions.turn[q] - 1, 0)
            ck = ev.content[i] if ev.content[i] != 0 else key
            c, fresh = ot_insert(ckv, cmeta, cfree, ck)
            if fresh:
                contents.writes[c] = 0
                contents.reads[c] = 0
                contents.last_ts[c] = -1
                contents.last_write_ts[c] = -1
                contents.prev_life[c] = -1
            objs.depth[s] = depth
            objs.turn[s] = turn
            objs.content[s] = c
            objs.birth[s] = -1
            objs.widx[s] = -1
            objs.nbytes[s] = 0
        a = ev.actions[i]
        if s >= 0:
            c = objs.content[s]
            if (a == A_WRITE or a == A_FREE or a == A_DROP) and objs.birth[s] >= 0:  # the tier copy dies
                life = ints[I_CLOCK] - objs.birth[s]
                d = cnt[1]
                out.dead_widx[d] = objs.widx[s]
                out.dead_life[d] = life
                out.dead_stamp[d] = ints[I_WRITES]
                cnt[1] += 1
                contents.prev_life[c] = life
                ints[I_LIVE] -= objs.nbytes[s]
                objs.birth[s] = -1
            if a == A_FREE and o == OP_EVICT:
                ints[I_EVICT] += 1
            if a == A_WRITE:
                if ints[I_LASTW] >= 0:
                    reals[0] += EWMA * (max(ts[i] - ints[I_LASTW], 0) - reals[0])
                ints[I_LASTW] = ts[i]
                r = cnt[0]
                peak = max(ints[I_PEAK], 1)
                rows[r, 0] = ev.kind[i]
                rows[r, 1] = ev.tenant[i]
                rows[r, 2] = ev.scope[i]
                rows[r, 3] = o
                rows[r, 4] = _lg(nbytes[i])
                rows[r, 5] = _lg(objs.depth[s])
                rows[r, 6] = objs.turn[s]
                rows[r, 7] = contents.writes[c]
                rows[r, 8] = contents.reads[c]
                rows[r, 9] = _lg(ts[i] - contents.last_ts[c]) if contents.last_ts[c] >= 0 else -1.0
                rows[r, 10] = _lg(ts[i] - contents.last_write_ts[c]) if contents.last_write_ts[c] >= 0 else -1.0
                rows[r, 11] = _lg(contents.prev_life[c])
                rows[r, 12] = _lg(ints[I_EVICT])
                rows[r, 13] = ints[I_LIVE] / peak
                rows[r, 14] = ints[I_WBYTES] / peak
                rows[r, 15] = _lg(reals[0])
                rows[r, 16] = _lg(reals[1])
                if clock_bytes == 1:
                    ints[I_CLOCK] += nbytes[i]
                out.birth[r] = ints[I_CLOCK]
                objs.birth[s] = ints[I_CLOCK]
                objs.widx[s] = ints[I_WRITES]
                objs.nbytes[s] = nbytes[i]
                ints[I_WRITES] += 1
                ints[I_LIVE] += nbytes[i]
                ints[I_WBYTES] += nbytes[i]
                ints[I_PEAK] = max(ints[I_PEAK], ints[I_LIVE])
                contents.writes[c] += 1
                contents.last_write_ts[c] = ts[i]
                cnt[0] += 1
            elif a == A_READ or o == OP_LOAD or o == OP_HIT:
                contents.reads[c] += 1
            contents.last_ts[c] = ts[i]
        if o == OP_DELETE and s >= 0:
            ot_remove(kv, meta, free, key)
    return len(op)


#: trace columns the feature pass reads besides ts_ns, op, obj_id, tier, nbytes
FEATURE_COLUMNS = ("parent_id", "kind", "tenant", "scope", "request_id", "session_id", "content_key")


class FeatureStream:
    """The causal feature pass over a trace's batches, in order: :meth:`batch` gives the rows of a batch's
    tier writes and the deaths seen in it. Used by ``learned`` and by the predictability analysis."""

    def __init__(self, clock: str = "bytes", tier: int = S.TIER_SSD):
        self.clock_bytes = 1 if clock == "bytes" else 0
        self.tier = int(tier)
        self.objs = ObjTable({"depth": (np.int32, 0), "turn": (np.int32, -1), "content": (np.int64, 0),
                              "birth": (np.int64, -1), "widx": (np.int64, -1), "nbytes": (np.int64, 0)})
        self.contents = ObjTable({"writes": (np.int32, 0), "reads": (np.int32, 0), "last_ts": (np.int64, -1),
                                  "last_write_ts": (np.int64, -1), "prev_life": (np.int64, -1)})
        self.sessions = ObjTable({"req": (np.int64, -2), "turn": (np.int32, 0)})
        ints = np.zeros(8, np.int64)
        ints[I_LASTW] = ints[I_LASTREQ] = -1
        self.state = FeatState(ints, np.array([0.0, 0.0, -1.0]))

    def batch(self, batch: S.EventBatch, actions: np.ndarray, n_writes: int):
        """(rows float32[n_writes, NF], birth clock int64[n_writes], dead write index, dead lifetime, dead
        stamp) for one batch."""
        n = batch.n
        out = FeatOut(np.zeros((n_writes, NF), np.float32), np.zeros(n_writes, np.int64),
                      np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(2, np.int64))
        ev = FeatEvents(batch["op"], batch["obj_id"], batch["parent_id"], batch["ts_ns"], batch["nbytes"],
                        batch["kind"], batch["tenant"], batch["scope"], batch["request_id"], batch["session_id"],
                        batch["content_key"], actions)
        i = 0
        while True:
            o, c, s = self.objs, self.contents, self.sessions
            objs = FeatObjects(o.kv, o.meta, o.free, *(o.cols[k] for k in
                                                       ("depth", "turn", "content", "birth", "widx", "nbytes")))
            contents = FeatContents(c.kv, c.meta, c.free, *(c.cols[k] for k in
                                                             ("writes", "reads", "last_ts", "last_write_ts",
                                                              "prev_life")))
            sessions = FeatSessions(s.kv, s.meta, s.free, s.cols["req"], s.cols["turn"])
            i = feature_kernel(i, ev, objs, contents, sessions, self.state, self.clock_bytes, out)
            if i == n:
                break
            for t in (o, c, s):
                if t.full():
                    t.grow()
        d = int(out.counts[1])
        return out.rows, out.birth, out.dead_widx[:d], out.dead_life[:d], out.dead_stamp[:d]

    def nbytes(self) -> int:
        return self.objs.nbytes() + self.contents.nbytes() + self.sessions.nbytes()


def require_sklearn(what: str):
    """The sklearn module, or a one-line KvbedError saying how to install it."""
    try:
        import sklearn.ensemble  # noqa: F401
    except ImportError:
        raise KvbedError(_no_sklearn(what)) from None
    return sklearn


def _no_sklearn(what: str) -> str:
    return f"{what} needs scikit-learn (an optional dependency): pip install 'kvbed[learn]' or pip install scikit-learn"


class BackgroundImport:
    """scikit-learn's import on a thread, started when the policy is built, so that it overlaps the replay's
    scan: it costs 0.7-2.5 s (it pulls scipy), as much as the rest of the policy on the Mooncake trace. Only
    presence is checked up front (a missing package fails at once, in one line); :meth:`get` waits for the
    import, so no decision depends on when it finishes."""

    def __init__(self, what: str):
        self.what = what
        if importlib.util.find_spec("sklearn") is None:
            raise KvbedError(_no_sklearn(what))
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="kvbed-import-sklearn", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            require_sklearn(self.what)
            from threadpoolctl import ThreadpoolController

            # the thread pools of the libraries loaded now (scikit-learn's OpenMP): found once, here, since finding
            # them (walking every loaded library) costs ~5 ms, which limiting them once per batch paid each time
            self.pools = ThreadpoolController()
        except BaseException as exc:  # re-raised by get(), in the policy's thread
            self.error = exc

    def get(self):
        """The ThreadpoolController of the loaded libraries, once scikit-learn is imported."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.pools


class _Ready:
    """scikit-learn ready for one batch's fits and predictions, set up when the first of them needs it: the
    background import joined, OpenMP limited to one thread (and restored after the batch)."""

    def __init__(self, imported: BackgroundImport):
        self.imported = imported
        self.limit = None

    def __call__(self) -> None:
        if self.limit is None:
            self.limit = _one_thread(self.imported.get())

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self.limit is not None:
            self.limit.restore_original_limits()


@dataclass(frozen=True)
class LearnedParams(SurvivalGuardParams):
    clock: str = param("bytes", "lifetime clock, as for oracle: bytes written to the tier meanwhile, or trace "
                                "time (ns)", choices=CLOCKS)
    retrain_writes: int = param(32768, "refit the model every this many tier writes (trace order; the first "
                                       "fits at 1024, 2048, 4096... writes)")
    train_window: int = param(65536, "the model learns from the last this many writes, the older half of them")
    train_rows: int = param(4096, "at most this many of them (an even stride), to bound the cost of a fit")
    fit_min_deaths: int = param(64, "tier deaths needed before the first fit")
    max_iter: int = param(10, "boosting iterations per fit (HistGradientBoostingRegressor max_iter)")
    learning_rate: float = param(0.2, "shrinkage of each tree (HistGradientBoostingRegressor learning_rate; "
                                      "only the ranking of predictions matters, so fewer trees take more each)")


def _one_thread(pools):
    """Fits and predictions on one OpenMP thread: the models are small, and on a shared machine the threads'
    spinning cost ten times the work (Mooncake: 73 s of fits on 2 threads at load 9.6, 6 s on one)."""
    return pools.limit(limits=1, user_api="openmp")


LEAVES = 15  # leaves per tree (scikit-learn's default 31 doubles the cost of a fit for no WAF gain on Mooncake)
FIRST_FIT = 1024  # writes before the first fit; then 2x, 4x... up to retrain_writes


def next_fit(now: int, every: int) -> int:
    """The write count of the first refit after ``now`` writes: FIRST_FIT, its doublings below ``every``,
    then the multiples of ``every``."""
    k = FIRST_FIT
    while k < every:
        if k > now:
            return k
        k *= 2
    return (now // every + 1) * every


@HINTS.register("learned")
class LearnedHints(HintPolicy):
    knows = ("the past only: a gradient-boosted model of log lifetime, refit every retrain_writes writes on "
             "the copies that already died (and the ages of those still alive), from causal features: kind, "
             "tenant, scope, size, prefix depth, session turn, the content's tier writes, reads, last-event and "
             "last-write times and previous copy's lifetime, the tier's evictions, fill and write rate, "
             "request inter-arrival; it abstains to class 0 while its classes do not predict which of its own copies "
             "outlive one drive capacity of writes (the drive's logical capacity)")
    Params = LearnedParams
    columns = FEATURE_COLUMNS

    def __init__(self, n_classes, params=None, *, seed=0, tier=3):
        super().__init__(n_classes, params, seed=seed, tier=tier)
        p = self.params
        if min(p.retrain_writes, p.fit_min_deaths, p.max_iter, p.train_rows) < 1 or p.train_window < 2:
            raise KvbedError("--param retrain_writes, train_rows, fit_min_deaths, max_iter must be >= 1 and "
                             "train_window >= 2")
        if not 0 < p.learning_rate <= 1:
            raise KvbedError(f"--param learning_rate={p.learning_rate}: must be in (0, 1]")
        self.sklearn = BackgroundImport("--hints learned")
        self.stream = FeatureStream(p.clock, tier)
        w = p.train_window
        self.ring_rows = np.zeros((w, NF), np.float32)
        self.ring_widx = np.full(w, -1, np.int64)
        self.ring_birth = np.zeros(w, np.int64)
        self.ring_life = np.full(w, -1, np.int64)
        self.deaths = 0
        self.model = None
        self.edges = np.zeros(0)
        self.fits = 0
        self.pending = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        self.guard = AbstainGuard(self.n_classes, p, ordered=True)  # class k+1 is meant to live longer

    def _learn(self, widx, life):
        slot = widx % len(self.ring_widx)
        ok = (widx >= 0) & (self.ring_widx[slot] == widx)
        self.ring_life[slot[ok]] = life[ok]
        self.deaths += len(widx)

    def _fit(self, now: int, clock_now: int, ready: _Ready) -> None:
        """Refit on the older half of the last ``train_window`` writes (half of all writes so far while they
        are fewer), with the deaths stamped before write ``now``."""
        w = len(self.ring_widx)
        lo, hi = max(now - w, 0), now - min(w // 2, now // 2)
        if hi <= lo or self.deaths < self.params.fit_min_deaths:
            return
        step = -(-(hi - lo) // self.params.train_rows)
        idx = np.arange(lo, hi, step) % w
        life = self.ring_life[idx]
        y = np.where(life >= 0, life, clock_now - self.ring_birth[idx]).astype(np.float64)
        y = np.log2(np.maximum(y, 1.0))
        x = self.ring_rows[idx]
        ready()
        from sklearn.ensemble import HistGradientBoostingRegressor

        model = HistGradientBoostingRegressor(max_iter=self.params.max_iter, max_leaf_nodes=LEAVES,
                                              learning_rate=self.params.learning_rate,
                                              early_stopping=False, random_state=self.seed)
        model.fit(x, y)
        pred = model.predict(x)
        self.model = model
        self.edges = np.quantile(pred, np.arange(1, self.n_classes) / self.n_classes)
        self.fits += 1

    def _predict(self, rows: np.ndarray, ready: _Ready) -> np.ndarray:
        if self.model is None or len(rows) == 0:
            return np.full(len(rows), -1, np.int16)  # no opinion yet: the guard gives class 0
        ready()
        return np.searchsorted(self.edges, self.model.predict(rows), side="left").astype(np.int16)

    def observe(self, batch, actions, writes):
        """The feature pass (it needs no model): the replay runs it ahead, in its reading thread."""
        return self.stream.batch(batch, actions, len(writes))

    def _assign(self, batch, actions, writes, seen=None):
        with _Ready(self.sklearn) as ready:
            proposed = self._classify(writes, seen, ready)
        return self.guard.classes(batch, actions, proposed, self.device)

    def _classify(self, writes, seen, ready):
        rows, birth, dw, dl, ds = seen
        if len(rows) != len(writes):
            raise RuntimeError(f"learned: {len(rows)} feature rows for {len(writes)} writes")
        first = self.writes_seen
        w = len(self.ring_widx)
        pw, pl, ps = self.pending
        dw, dl, ds = np.concatenate([pw, dw]), np.concatenate([pl, dl]), np.concatenate([ps, ds])
        out = np.zeros(len(writes), np.int16)
        r = self.params.retrain_writes
        pos = 0  # rows of this batch handled
        while pos < len(rows):
            now = first + pos
            nxt = next_fit(now, r)  # the next refit point (write count)
            end = min(len(rows), nxt - first)
            seg = slice(pos, end)
            gidx = np.arange(first + pos, first + end)
            out[seg] = self._predict(rows[seg], ready)
            self.ring_rows[gidx % w] = rows[seg]
            self.ring_widx[gidx % w] = gidx
            self.ring_birth[gidx % w] = birth[seg]
            self.ring_life[gidx % w] = -1
            pos = end
            if first + pos == nxt:
                known = ds < nxt  # deaths at or before write nxt - 1's event: all in this batch or earlier
                self._learn(dw[known], dl[known])
                dw, dl, ds = dw[~known], dl[~known], ds[~known]
                self._fit(nxt, int(birth[pos - 1]), ready)
        self.pending = (dw, dl, ds)
        return out

    def describe(self):
        return {"clock": self.params.clock, "fits": self.fits, "deaths_learned": int(self.deaths),
                f"edges_log2_{CLOCK_UNIT[self.params.clock]}": [float(e) for e in self.edges],
                "features": list(FEATURES), **self.guard.describe()}

    def memory_bytes(self):
        return (self.stream.nbytes() + self.ring_rows.nbytes + self.ring_widx.nbytes + self.ring_birth.nbytes
                + self.ring_life.nbytes + self.guard.memory_bytes())
