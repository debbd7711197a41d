"""The abstain guard: a practical policy follows its own classes only while the deaths it has seen show they
separate lifetimes; otherwise every write goes to class 0, the stream a drive without hints would use.

Why: a causal policy whose classes do not separate lifetimes is worse than no hints, not equal to it - it
splits one write stream into several, so each reclaim unit (or zone) fills over a longer stretch of the
trace and holds data of more different ages, and every handle in use holds an open reclaim unit that GC
cannot use as spare space (on the example studies, unguarded, ``hotness`` was up to 4.4% and ``predicted``
up to 15.5% worse than none). The guard makes such a policy fall back to no hints, using only what it could
know: the deaths of the copies it has already placed.

How, per event in trace order (one numba pass over the batch, after the policy proposed its classes):

- every write the policy has an opinion on (proposed class >= 0; -1 = "I know nothing yet") is remembered
  per object: its proposed class, size and birth on the write clock (bytes written to the tier so far);
- when that copy dies on the tier (evicted, invalidated or deleted there, dropped by a delete elsewhere, or
  replaced by a rewrite) its lifetime ``x = log2(bytes written meanwhile)`` is added, weighted by its size,
  to per-class sums (weight, sum x) and to global moments (sum x, x^2, class, class^2, class*x); proposals
  are learned whether they were followed or not, so the evidence can return while the guard abstains;
- every ``window`` deaths all sums are halved, so the evidence follows a drifting trace;
- every ``min_deaths`` deaths the guard decides: the classes are *separated* when at least ``min_deaths``
  deaths (decayed count) are on record and the separation reaches ``min_separation``. It follows the
  proposed classes once ``confirm`` consecutive decisions found them separated, and abstains (class 0) from
  the first decision that does not. Switching back and forth is costly (each switch leaves some handles'
  reclaim units half-filled), hence decisions at a coarse step and the confirmation. ``confirm = 2`` was
  measured against 1 and 4 on kv-hints-fdp (type and hotness): 1 let hotness follow briefly on the synthetic
  trace (+22% worse than none at 7% OP), 4 cost type a longer abstention at the start (-8.0% instead of
  -9.9% against none at 7% OP, initially isolated).

The separation is a correlation in [-1, 1] between the class and the realized log-lifetime:

- for a policy whose classes are *ordered* (class k+1 is meant to live longer than class k, as
  ``predicted``): the byte-weighted Pearson correlation of class index and log-lifetime, so classes in the
  wrong order (negative) or not ordered at all (near 0) abstain;
- for unordered classes (``type``, ``hotness``): the correlation ratio eta = sqrt(between-class variance /
  total variance) of log-lifetime, i.e. how much of the lifetime spread the classes explain.

``min_separation = 0.5`` (default) asks the classes to explain a quarter of the variance of log-lifetime
(eta^2 or r^2 >= 0.25); chance alone gives eta^2 about (classes - 1) / deaths, below 0.01 once 1024 deaths
of 8 classes are on record. Lifetime separation is necessary for hints to pay, not sufficient (it ignores
the spare space the extra open reclaim units take), so the bar is set high: when in doubt, no hints.

The evidence above (``test = "lifetime"``) is the copies seen to die, and the long-lived die last: early in a
trace it is all short lives, so a policy whose classes do separate long from short looks unseparated (on the
Mooncake trace ``learned``'s correlation climbed to 0.81 only by the end), and one whose early deaths happen
to line up looks separated (on the synthetic trace it peaked at 0.66-0.87 early and fell to 0.38).
``test = "survival"`` removes the censoring: every copy is judged once ``horizon`` drive capacities of bytes
have been written after it (the drive's logical capacity, :class:`kvreplay.hints.base.DeviceFacts`), dead or
alive: x = 1 if it outlived the horizon, 0 if it died before; the separation is the same correlation of class
and x. One capacity is what decides the device's cost: a copy that outlives it is one greedy GC would have had
to move when its reclaim unit became the victim. The writes not yet that old wait in a ring
(:class:`WriteLog`), in write order. Observations then count copies a horizon old, not deaths. ``learned`` and
``readmission`` use it (:class:`SurvivalGuardParams`): at 0.5 ``learned`` keeps 82% of the oracle's cut on
Mooncake and never follows on the synthetic trace (kvreplay/hints/learned.py has the figures).

Everything is counted in trace order inside the kernel, so classes never depend on batch boundaries, and only
deaths already seen count (the guard is as causal as the policy it guards). Abstention is reported in the
policy's ``describe()`` (share of writes and bytes abstained, and apart the part of it the policy gave no
opinion on, e.g. before a model's first fit; decisions that switched, the separation at the last decision).
``--param abstain=false`` gives the policy's classes unguarded (as before the guard).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from devicemodels.jit import kernel
from kvreplay.schema import OP_DELETE
from kvreplay.layout.actions import A_DROP, A_FREE, A_WRITE
from kvreplay.layout.objtable import ObjTable, ot_find, ot_full, ot_insert, ot_remove
from kvbed.core.errors import KvbedError
from kvbed.core.params import param

#: global moments kept in GuardStats.mom
M_W, M_X, M_XX, M_C, M_CC, M_CX, M_N = range(7)


#: the guard's evidence (``--param test=``), and its help for every guarded policy's Params
TESTS = ("lifetime", "survival")
TEST_HELP = ("the evidence: 'lifetime' (the log-lifetimes of the copies seen to die) or 'survival' (whether each "
             "copy outlived the horizon: censoring-free, it waits for the horizon)")


@dataclass(frozen=True)
class AbstainParams:
    """The guard's parameters; a guarded policy's own Params inherit them (``--param abstain=false`` ...)."""

    abstain: bool = param(True, "abstain to class 0 (as no hints) while the classes do not separate the lifetimes "
                                "of the copies seen to die", quiet_default=True)
    min_separation: float = param(0.5, "correlation of class and realized log-lifetime (ordered classes) or "
                                       "correlation ratio (unordered) needed to follow the classes",
                                  quiet_default=True)
    min_deaths: int = param(1024, "deaths of classified copies (decayed count) needed before any class is "
                                  "followed; the guard decides again every this many deaths",
                            quiet_default=True)
    window: int = param(32768, "halve the guard's evidence every this many deaths", quiet_default=True)
    confirm: int = param(2, "consecutive decisions (one every min_deaths deaths) that must find the classes "
                            "separated before they are followed", quiet_default=True)
    test: str = param("lifetime", TEST_HELP, choices=TESTS, quiet_default=True)
    horizon: float = param(1.0, "with test=survival: the horizon, in writes of this share of the drive's "
                                "logical capacity (1.0: the copies greedy GC would have had to move)",
                           quiet_default=True)


@dataclass(frozen=True)
class SurvivalGuardParams(AbstainParams):
    """The guard judging by survival at one drive capacity (``readmission``, ``learned``): classes meant to
    separate long from short lives are judged by the copies GC would have to move, not by the early deaths."""

    test: str = param("survival", TEST_HELP, choices=TESTS, quiet_default=True)


class GuardEvents(NamedTuple):
    """One batch of trace events, n of them, with m tier writes (read-only in the kernel)."""

    op: np.ndarray  # int8[n]     schema op code
    obj: np.ndarray  # uint64[n]  object id
    nbytes: np.ndarray  # int64[n] bytes of the object (advances the write clock on a tier write)
    actions: np.ndarray  # int8[n] what the event does on the replayed tier (kvreplay.layout.actions A_*)
    proposed: np.ndarray  # int16[m] the policy's class for each tier write, in order (-1: no opinion)


class GuardObjects(NamedTuple):
    """The objects with a copy placed on the tier: an :class:`ObjTable` (``kv, meta, free``) and its columns
    (``cap`` slots; the Python side grows the table and rebuilds the tuple when the kernel asks)."""

    kv: np.ndarray  # int64[2 cap or more, 2] object id -> slot map (ObjTable.kv)
    meta: np.ndarray  # int64[3]    table counters (ObjTable.meta)
    free: np.ndarray  # int32[cap]  free-slot stack (ObjTable.free)
    cls: np.ndarray  # int16[cap]   proposed class of the copy on the tier (-1: no opinion)
    birth: np.ndarray  # int64[cap] write clock (bytes) when the copy was written (-1: no copy on the tier)
    size: np.ndarray  # int64[cap]  bytes of that copy (its weight when it dies)
    widx: np.ndarray  # int64[cap]  its write index (tier writes before it): its entry in the WriteLog


class WriteLog(NamedTuple):
    """test=survival: the tier writes not yet ``horizon`` bytes old, a ring of ``cap`` entries indexed by write
    index % cap (the Python side grows it when the kernel asks)."""

    cls: np.ndarray  # int16[cap]  proposed class (-1: no opinion)
    birth: np.ndarray  # int64[cap] write clock when written
    size: np.ndarray  # int64[cap]  bytes
    short: np.ndarray  # int8[cap]  1: the copy died before it was horizon bytes old


class GuardStats(NamedTuple):
    """The evidence (decayed sums over deaths, weights in MiB) and the counters; C = n_classes."""

    cw: np.ndarray  # float64[C]  weight of the deaths per proposed class
    cx: np.ndarray  # float64[C]  their weighted sum of log2 lifetimes
    mom: np.ndarray  # float64[7] weight, sum x, x^2, class, class^2, class*x, death count (M_* indices)
    state: np.ndarray  # int64[12] write clock (bytes), observations (deaths, or copies a horizon old), writes,
    #                               writes abstained (class 0 given while not confident or without an opinion),
    #                               bytes written, bytes abstained,
    #                               following (1) or abstaining (0) since the last decision, decisions that
    #                               switched between the two, consecutive decisions that found the classes
    #                               separated, oldest write not yet matured (test=survival),
    #                               writes and bytes the policy gave no opinion on (-1; among those abstained)
    sep: np.ndarray  # float64[2]  separation at the last decision, highest at a decision with min_deaths on
    #                               record (nan: undefined)


class GuardConfig(NamedTuple):
    """The parameters, as the kernel reads them."""

    enabled: bool  # False: follow the proposed classes always (still learn and report)
    ordered: bool  # classes are ranks of expected lifetime (Pearson) rather than labels (correlation ratio)
    min_separation: float  # separation needed to follow the classes
    min_deaths: float  # decayed deaths needed before following
    window: int  # halve the evidence every this many deaths
    decide_every: int  # decide (follow or abstain) every this many deaths: min_deaths
    confirm: int  # consecutive decisions that must find the classes separated before they are followed
    horizon: int  # test=survival: bytes written after a copy at which it is judged (0: test=lifetime)


@kernel(inline="always")
def _separation(cw, cx, mom, ordered):
    """Correlation of class and log-lifetime (ordered) or correlation ratio (unordered); nan if undefined."""
    w = mom[M_W]
    if w <= 0.0:
        return np.nan
    mx = mom[M_X] / w
    vx = mom[M_XX] / w - mx * mx
    if vx <= 1e-12:
        return np.nan
    if ordered:
        mc = mom[M_C] / w
        vc = mom[M_CC] / w - mc * mc
        if vc <= 1e-12:
            return np.nan
        return (mom[M_CX] / w - mc * mx) / np.sqrt(vc * vx)
    between = 0.0
    for k in range(len(cw)):
        if cw[k] > 0.0:
            d = cx[k] / cw[k] - mx
            between += cw[k] * d * d
    r = between / w / vx
    return np.sqrt(min(max(r, 0.0), 1.0))


@kernel(inline="always")
def _learn(c, x, mib, stats, cfg):
    """One observation: a copy of proposed class ``c`` and ``mib`` MiB with outcome ``x`` (log2 lifetime, or 1.0
    if it outlived the horizon, 0.0 if not)."""
    cw, cx, mom = stats.cw, stats.cx, stats.mom
    cw[c] += mib
    cx[c] += mib * x
    mom[M_W] += mib
    mom[M_X] += mib * x
    mom[M_XX] += mib * x * x
    mom[M_C] += mib * c
    mom[M_CC] += mib * c * c
    mom[M_CX] += mib * c * x
    mom[M_N] += 1.0
    stats.state[1] += 1
    if stats.state[1] % cfg.decide_every == 0:  # a new decision from the evidence so far
        sep = _separation(cw, cx, mom, cfg.ordered)
        stats.sep[0] = sep
        if mom[M_N] >= cfg.min_deaths and not np.isnan(sep) and (np.isnan(stats.sep[1]) or sep > stats.sep[1]):
            stats.sep[1] = sep
        if mom[M_N] >= cfg.min_deaths and sep >= cfg.min_separation:
            stats.state[8] += 1  # consecutive decisions that found the classes separated
        else:
            stats.state[8] = 0
        f = 1 if stats.state[8] >= cfg.confirm else 0  # follow once confirmed; abstain at the first miss
        if f != stats.state[6]:
            stats.state[7] += 1
        stats.state[6] = f
    if stats.state[1] % cfg.window == 0:
        for k in range(len(cw)):
            cw[k] *= 0.5
            cx[k] *= 0.5
        for k in range(len(mom)):
            mom[k] *= 0.5


@kernel(nogil=True)
def _guard_kernel(start, j, ev, objs, log, stats, cfg, out):
    """Events [start, ...) with ``j`` tier writes done, the classes given into ``out`` (int16, one per write);
    returns (stop, j) - stop < len: grow the table."""
    op, obj, nbytes, actions, proposed = ev.op, ev.obj, ev.nbytes, ev.actions, ev.proposed
    kv, meta, free, o_cls, o_birth, o_size = objs.kv, objs.meta, objs.free, objs.cls, objs.birth, objs.size
    state = stats.state
    hz = cfg.horizon
    cap = len(log.cls)
    for i in range(start, len(op)):
        a = actions[i]
        o = op[i]
        if a != A_WRITE and a != A_FREE and a != A_DROP and o != OP_DELETE:
            continue
        key = obj[i]
        s = ot_find(kv, key)
        if a == A_WRITE and ((s < 0 and ot_full(kv, meta, free)) or (hz > 0 and state[2] - state[9] >= cap)):
            return i, j  # grow the table or the write log first
        if a == A_WRITE or a == A_FREE or a == A_DROP:
            if s >= 0 and o_birth[s] >= 0:  # the copy on the tier dies (freed, or replaced by this write)
                life = state[0] - o_birth[s]
                if hz == 0:
                    if o_cls[s] >= 0:
                        _learn(o_cls[s], np.log2(max(float(life), 1.0)), o_size[s] / 1048576.0, stats, cfg)
                elif life < hz:
                    log.short[objs.widx[s] % cap] = 1
                o_birth[s] = -1
        if a == A_WRITE:
            if s < 0:
                s, _ = ot_insert(kv, meta, free, key)
            while hz > 0 and state[9] < state[2]:  # copies now horizon bytes old: did they outlive it?
                k = state[9] % cap
                if log.birth[k] + hz > state[0]:
                    break
                if log.cls[k] >= 0:
                    _learn(log.cls[k], 0.0 if log.short[k] else 1.0, log.size[k] / 1048576.0, stats, cfg)
                state[9] += 1
            c = proposed[j]
            follow = c >= 0 and (not cfg.enabled or state[6] == 1)
            out[j] = c if follow else 0
            state[2] += 1
            state[4] += nbytes[i]
            if not follow:  # abstained: class 0 whatever the policy proposed
                state[3] += 1
                state[5] += nbytes[i]
                if c < 0:  # no opinion (e.g. before a model's first fit): class 0 guarded or not
                    state[10] += 1
                    state[11] += nbytes[i]
            o_cls[s] = c
            o_birth[s] = state[0]
            o_size[s] = nbytes[i]
            if hz > 0:
                k = (state[2] - 1) % cap  # state[2] counts this write already
                objs.widx[s] = state[2] - 1
                log.cls[k] = c
                log.birth[k] = state[0]
                log.size[k] = nbytes[i]
                log.short[k] = 0
            state[0] += nbytes[i]
            j += 1
        if o == OP_DELETE and s >= 0:
            ot_remove(kv, meta, free, key)
    return len(op), j


def _new_log(cap: int) -> WriteLog:
    return WriteLog(np.full(cap, -1, np.int16), np.zeros(cap, np.int64), np.zeros(cap, np.int64),
                    np.zeros(cap, np.int8))


def _grow_log(log: WriteLog, head: int, tail: int) -> WriteLog:
    """The ring twice as large, entries head..tail-1 (write indices) moved to their new positions."""
    old, new = len(log.cls), _new_log(2 * len(log.cls))
    w = np.arange(head, tail)
    for a, b in zip(log, new):
        b[w % len(new.cls)] = a[w % old]
    return new


class AbstainGuard:
    """The guard of one policy instance: ``classes(batch, actions, proposed)`` gives the classes to use."""

    def __init__(self, n_classes: int, params: AbstainParams, *, ordered: bool):
        if not 0 < params.window:
            raise KvbedError(f"--param window: must be >= 1, got {params.window}")
        if params.confirm < 1:
            raise KvbedError(f"--param confirm: must be >= 1, got {params.confirm}")
        if params.min_deaths < 1:
            raise KvbedError(f"--param min_deaths: must be >= 1, got {params.min_deaths}")
        if not -1.0 <= params.min_separation <= 1.0:
            raise KvbedError(f"--param min_separation: must be in [-1, 1], got {params.min_separation}")
        self.params = params
        self.ordered = bool(ordered)
        #: the policy's classes: all of them (abstained writes share class 0 with the policy's class 0 rather
        #: than get a handle of their own: every handle in use holds an open reclaim unit, i.e. spare space
        #: the drive cannot use for GC, and a handle used only while abstaining would sit half-filled)
        self.own_classes = max(1, int(n_classes))
        self.table = ObjTable({"cls": (np.int16, -1), "birth": (np.int64, -1), "size": (np.int64, 0),
                               "widx": (np.int64, -1)})
        c = max(1, self.own_classes)
        self.stats = GuardStats(np.zeros(c, np.float64), np.zeros(c, np.float64), np.zeros(7, np.float64),
                                np.zeros(12, np.int64), np.full(2, np.nan))
        if params.test == "survival" and not params.horizon > 0:
            raise KvbedError(f"--param horizon: must be > 0, got {params.horizon}")
        self.cfg = GuardConfig(bool(params.abstain), self.ordered, float(params.min_separation),
                               float(params.min_deaths), int(params.window), max(1, int(params.min_deaths)),
                               int(params.confirm), 0)
        self.log = _new_log(1 if params.test == "lifetime" else 4096)

    def classes(self, batch, actions: np.ndarray, proposed: np.ndarray, device=None) -> np.ndarray:
        """The class of each tier write of ``batch`` (``proposed`` by the policy, -1 = no opinion); ``device``
        (:class:`kvreplay.hints.base.DeviceFacts`) gives test=survival its horizon."""
        if self.params.test == "survival" and self.cfg.horizon == 0 and (self.params.abstain or device is not None):
            if device is None or device.logical_pages <= 0:  # unguarded without a drive: the lifetime evidence
                raise KvbedError("the abstain guard's test=survival needs the drive's logical capacity (the replay "
                                 "gives it; in tests pass device=DeviceFacts(...))")
            self.cfg = self.cfg._replace(
                horizon=max(1, int(self.params.horizon * device.logical_pages * device.page_bytes)))
        out = np.zeros(len(proposed), np.int16)
        ev = GuardEvents(batch["op"], batch["obj_id"], batch["nbytes"], actions,
                         np.ascontiguousarray(proposed, dtype=np.int16))
        i, j = 0, 0
        while True:
            t = self.table
            objs = GuardObjects(t.kv, t.meta, t.free, t.cols["cls"], t.cols["birth"], t.cols["size"],
                                t.cols["widx"])
            i, j = _guard_kernel(i, j, ev, objs, self.log, self.stats, self.cfg, out)
            if i == batch.n:
                return out
            st = self.stats.state
            if self.cfg.horizon > 0 and st[2] - st[9] >= len(self.log.cls):
                self.log = _grow_log(self.log, int(st[9]), int(st[2]))
            else:
                t.grow()

    def describe(self) -> dict:
        st = self.stats.state
        sep, top = float(self.stats.sep[0]), float(self.stats.sep[1])
        return {
            "abstain": self.params.abstain,
            "abstain_test": (("class-lifetime correlation" if self.ordered else "correlation ratio")
                             + (f" of survival past {self.cfg.horizon} bytes written" if self.cfg.horizon else "")),
            "min_separation": self.params.min_separation,
            "abstained_writes_share": round(float(st[3]) / st[2], 4) if st[2] else 0.0,
            "abstained_bytes_share": round(float(st[5]) / st[4], 4) if st[4] else 0.0,
            "no_opinion_writes_share": round(float(st[10]) / st[2], 4) if st[2] else 0.0,
            "no_opinion_bytes_share": round(float(st[11]) / st[4], 4) if st[4] else 0.0,
            "deaths_seen": int(st[1]),
            "switches": int(st[7]),
            "separation_at_end": None if np.isnan(sep) else round(sep, 4),
            "separation_max": None if np.isnan(top) else round(top, 4),
        }

    def memory_bytes(self) -> int:
        return self.table.nbytes() + sum(a.nbytes for a in self.log)
