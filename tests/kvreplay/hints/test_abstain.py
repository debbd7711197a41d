"""The abstain guard (kvreplay.hints.abstain): hand-counted separations, abstention until the evidence is there,
batch independence, the reports in describe(), and the predicted policy's edges that no longer leave empty
classes between used ones."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from kvreplay import schema as S
from kvreplay.hints import HINTS
from kvreplay.hints.abstain import AbstainGuard, AbstainParams
from kvreplay.hints.base import DeviceFacts
from kvbed.core.errors import KvbedError
from kvreplay.hints.testing import check_online
from kvreplay.layout.actions import A_WRITE, action_table, select

MIB = 1 << 20
W, F = S.OP_PERSIST, S.OP_EVICT

# writes (W) and evictions (F) on the SSD tier, 1 MiB each; `prop` is the proposed class of each write.
# Write clock (MiB) at each write: 1@0 2@1 3@2 4@3; then 1 dies at 4 (lifetime 4 MiB, class 0) and 3 at 4
# (2 MiB, class 0); 5@4 6@5; 2 dies at 6 (5 MiB, class 1), 4 at 6 (3 MiB, class 1); then 7@6 and 8@7.
EVENTS = [(W, 1), (W, 2), (W, 3), (W, 4), (F, 1), (F, 3), (W, 5), (W, 6), (F, 2), (F, 4), (W, 7), (W, 8)]
PROP = [0, 1, 0, 1, 0, 1, 1, 0]
LIFETIMES = {0: [4, 2], 1: [5, 3]}  # MiB, per proposed class, as counted above


def _batch(events=EVENTS):
    n = len(events)
    return S.make_batch(ts_ns=np.arange(n), op=np.array([e[0] for e in events]),
                        obj_id=np.array([e[1] for e in events]), tier=np.full(n, S.TIER_SSD),
                        nbytes=np.full(n, MIB))


def _run(guard, batch, prop, cut=None, device=None):
    lut = action_table(S.TIER_SSD)
    parts = [batch] if cut is None else [batch.take(slice(0, cut)), batch.take(slice(cut, batch.n))]
    out, j = [], 0
    for b in parts:
        act, tidx = select(lut, b["op"], b["tier"])
        m = int((act[tidx] == A_WRITE).sum())
        out.append(guard.classes(b, act, np.array(prop[j:j + m], np.int16), device))
        j += m
    return np.concatenate(out).tolist()


def _reference():
    x = np.log2(np.array(LIFETIMES[0] + LIFETIMES[1], float) * MIB)
    c = np.array([0, 0, 1, 1], float)
    r = np.corrcoef(c, x)[0, 1]
    eta = np.sqrt(sum(2 * (x[c == k].mean() - x.mean()) ** 2 for k in (0, 1)) / (4 * x.var()))
    return r, eta


def test_hand_case_follows_only_once_the_deaths_separate_the_classes():
    r, eta = _reference()
    assert 0.3 < r < 0.6 and np.isclose(r, eta)  # two classes: correlation ratio = |r|
    # min_deaths 2: a decision every 2 deaths. Writes 1-4 come before any; after 1 and 3 die only class 0 has
    # deaths (no separation): 5 and 6 abstain; after 2 and 4 die the classes are separated by r: 7 follows
    # (class 1); 8 proposes class 0, which is also where an abstained write goes
    follow = AbstainGuard(2, AbstainParams(min_deaths=2, min_separation=r - 1e-9, confirm=1), ordered=True)
    assert _run(follow, _batch(), PROP) == [0, 0, 0, 0, 0, 0, 1, 0]
    d = follow.describe()
    assert d["deaths_seen"] == 4 and d["abstained_writes_share"] == 0.75 and d["separation_at_end"] == round(r, 4)
    assert d["switches"] == 1 and d["no_opinion_writes_share"] == 0.0  # the guard held back all 6
    # confirm=2: the first separated decision (after 4 deaths) is not enough
    twice = AbstainGuard(2, AbstainParams(min_deaths=2, min_separation=r - 1e-9, confirm=2), ordered=True)
    assert _run(twice, _batch(), PROP) == [0] * 8
    strict = AbstainGuard(2, AbstainParams(min_deaths=2, min_separation=r + 1e-9, confirm=1), ordered=True)
    assert _run(strict, _batch(), PROP) == [0] * 8
    assert strict.describe()["abstained_writes_share"] == 1.0
    few = AbstainGuard(2, AbstainParams(min_deaths=5, min_separation=0.0, confirm=1), ordered=True)
    assert _run(few, _batch(), PROP) == [0] * 8  # 4 deaths < min_deaths
    off = AbstainGuard(2, AbstainParams(abstain=False), ordered=True)  # no guard: the classes as proposed
    assert _run(off, _batch(), PROP) == [0, 1, 0, 1, 0, 1, 1, 0]
    assert off.describe()["abstained_writes_share"] == 0.0


def test_reversed_classes_abstain_when_ordered_not_when_labels():
    rev = [1 - c for c in PROP]  # class 1 now holds the short lifetimes: correlation -r
    r, eta = _reference()
    ordered = AbstainGuard(2, AbstainParams(min_deaths=2, min_separation=0.0, confirm=1), ordered=True)
    assert _run(ordered, _batch(), rev)[6:] == [0, 0]
    assert ordered.describe()["separation_at_end"] == round(-r, 4)
    labels = AbstainGuard(2, AbstainParams(min_deaths=2, min_separation=eta - 1e-9, confirm=1), ordered=False)
    assert _run(labels, _batch(), rev)[6:] == [0, 1]
    assert labels.describe()["separation_at_end"] == round(eta, 4)


def test_one_class_has_no_separation_and_is_never_followed():
    g = AbstainGuard(2, AbstainParams(min_deaths=1, min_separation=-1.0, confirm=1), ordered=True)
    assert _run(g, _batch(), [1] * 8) == [0] * 8  # every proposal in class 1: nothing to measure (undefined)
    assert g.describe()["separation_at_end"] is None


def test_no_opinion_is_class_zero_and_not_learned():
    g = AbstainGuard(2, AbstainParams(min_deaths=1, min_separation=0.0, confirm=1), ordered=True)
    assert _run(g, _batch(), [-1] * 8) == [0] * 8
    assert g.describe()["deaths_seen"] == 0


def test_no_opinion_is_reported_apart_from_what_the_guard_held_back():
    # write 1 has no opinion yet (as learned before its first fit), the rest the hand case's classes
    prop = [-1] + PROP[1:]
    off = AbstainGuard(2, AbstainParams(abstain=False), ordered=True)
    assert _run(off, _batch(), prop) == [0, 1, 0, 1, 0, 1, 1, 0]
    d = off.describe()  # unguarded: every abstained write is one without an opinion
    assert d["abstained_writes_share"] == d["no_opinion_writes_share"] == 0.125
    assert d["abstained_bytes_share"] == d["no_opinion_bytes_share"] == 0.125
    # guarded: 1 dies unlearned (no class), then 3 (class 0: one class, no separation), 2 (class 1: both
    # classes, followed from then on) and 4; so 5 and 6 are held back, 7 follows
    on = AbstainGuard(2, AbstainParams(min_deaths=1, min_separation=-1.0, confirm=1), ordered=True)
    assert _run(on, _batch(), prop) == [0, 0, 0, 0, 0, 0, 1, 0]
    d = on.describe()  # writes 1-6 in class 0 without following: 1 for want of an opinion, 5 held back
    assert (d["abstained_writes_share"], d["no_opinion_writes_share"], d["deaths_seen"]) == (0.75, 0.125, 3)


@pytest.mark.parametrize("cut", [1, 5, 7, 11])
def test_guard_does_not_depend_on_batch_boundaries(cut):
    r, _ = _reference()
    p = AbstainParams(min_deaths=2, min_separation=r - 1e-9, confirm=1)
    whole = _run(AbstainGuard(2, p, ordered=True), _batch(), PROP)
    assert whole[6:] == [1, 0]
    assert _run(AbstainGuard(2, p, ordered=True), _batch(), PROP, cut=cut) == whole


def test_evidence_is_halved_every_window():
    g = AbstainGuard(2, AbstainParams(window=3), ordered=True)
    _run(g, _batch(), PROP)
    # 4 deaths, halved after the 3rd: the decayed death count is (3 / 2) + 1
    assert g.stats.mom[-1] == 2.5 and g.stats.state[1] == 4


@pytest.mark.parametrize("name", ["type", "hotness", "predicted"])
def test_guarded_policies_are_online_and_report_abstention(name):
    cls = HINTS.get(name)
    rep = check_online(cls, params=cls.Params(min_deaths=64, confirm=1))  # a short trace: less evidence
    assert rep.writes > 1000
    pol = cls(4, cls.Params(), tier=S.TIER_SSD)
    d = json.loads(json.dumps(pol.describe()))
    assert {"abstained_writes_share", "abstained_bytes_share", "separation_at_end", "deaths_seen"} <= set(d)


def test_predicted_edges_are_distinct_fewer_classes_not_empty_ones():
    from kvreplay.hints.quantiles import BINS_PER_OCTAVE, class_of, new_state, refresh_edges, score_bin

    hist, edges = new_state(5)
    for x in [3.0] * 70 + [5.0] * 30:  # 70% of the scores in one bin: quantiles 1/5..3/5 coincide
        hist[score_bin(x)] += 1
    refresh_edges(hist, edges)
    top = 3 + 1 / BINS_PER_OCTAVE
    assert edges.tolist() == [top, 5 + 1 / BINS_PER_OCTAVE, np.inf, np.inf]
    assert [class_of(x, edges) for x in (3.0, 5.0, 60.0)] == [0, 1, 2]


@pytest.mark.parametrize("cut", [None, 3, 7, 9])
def test_survival_test_judges_each_copy_once_it_is_a_horizon_old(cut):
    """test=survival, horizon 3 MiB (a drive of 3 pages of 1 MiB, horizon 1.0). Copies mature at the first write
    with clock >= birth + 3: 1 (class 0) at write 4 alive: outlived; 2 (class 1) at write 5: outlived; 3 (class 0)
    at write 6: died at 2 MiB old: short; 4 (class 1) at write 7: died at exactly 3 MiB: outlived; 5 (class 0)
    at write 8: alive: outlived. Decisions every 2 observations: after 2, x is constant (no separation); after
    4 (before write 7), class (0,1,0,1) vs outlived (1,1,0,1): r = 0.577 >= 0.5, so write 7 follows (class 1)
    and write 8 too (its proposal is 0)."""
    dev = DeviceFacts(page_bytes=MIB, unit_pages=0, logical_pages=3)
    r = np.corrcoef([0, 1, 0, 1], [1, 1, 0, 1])[0, 1]
    assert r == pytest.approx(0.5774, abs=1e-4)
    params = AbstainParams(test="survival", horizon=1.0, min_deaths=2, confirm=1, min_separation=0.5)
    g = AbstainGuard(2, params, ordered=True)
    assert _run(g, _batch(), PROP, cut, dev) == [0, 0, 0, 0, 0, 0, 1, 0]
    d = g.describe()
    assert d["deaths_seen"] == 5 and d["separation_at_end"] == pytest.approx(r, abs=1e-4)
    assert d["abstain_test"] == f"class-lifetime correlation of survival past {3 * MIB} bytes written"
    # the bar above r: never follows
    g = AbstainGuard(2, dataclasses.replace(params, min_separation=0.6), ordered=True)
    assert _run(g, _batch(), PROP, cut, dev) == [0] * 8
    # a horizon of 2 MiB: 3 (2 MiB old at its death) outlived it too - every copy did, nothing to separate
    g = AbstainGuard(2, dataclasses.replace(params, horizon=2 / 3), ordered=True)
    assert _run(g, _batch(), PROP, cut, dev) == [0] * 8 and g.describe()["separation_at_end"] is None


def test_survival_test_needs_the_drive():
    g = AbstainGuard(2, AbstainParams(test="survival"), ordered=True)
    with pytest.raises(KvbedError, match="needs the drive's logical capacity"):
        _run(g, _batch(), PROP)
    with pytest.raises(KvbedError, match="horizon: must be > 0"):
        AbstainGuard(2, AbstainParams(test="survival", horizon=0.0), ordered=True)
