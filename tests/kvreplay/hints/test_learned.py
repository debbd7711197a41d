"""``learned`` (issue 23): causal feature rows by hand, the refit schedule, causality (check_online: the future
removed, other batch sizes), what it learns on the two-lifetime trace, and the predictability analysis."""

from __future__ import annotations

import numpy as np
import pytest

from kvreplay import schema as S
from kvreplay.hints import HINTS
from kvreplay.hints.base import DeviceFacts
from kvreplay.hints.learned import FEATURES, BackgroundImport, FeatureStream, LearnedHints, LearnedParams, next_fit
from kvreplay.hints.testing import check_online, classes_of
from kvreplay.layout.actions import A_WRITE, action_table, select
from kvbed.core.errors import KvbedError

pytest.importorskip("sklearn")

MiB = 1 << 20
F = {f: i for i, f in enumerate(FEATURES)}


def _rows(events, **cols):
    ts, op, obj, tier = (np.array(c) for c in zip(*events))
    b = S.make_batch(ts_ns=ts, op=op, obj_id=obj, tier=tier, nbytes=np.full(len(ts), MiB),
                     **{k: np.array(v) for k, v in cols.items()})
    act, tidx = select(action_table(S.TIER_SSD), b["op"], b["tier"])
    st = FeatureStream("bytes", S.TIER_SSD)
    return st.batch(b, act, int((act[tidx] == A_WRITE).sum()))


def test_feature_rows_and_deaths_by_hand():
    # obj 1 written (content 7), read twice on the GPU, evicted from the SSD after obj 2's write; obj 3 has the
    # same content 7 and is written after; obj 2 (parent 1: depth 1) rewritten (its first copy dies).
    ev = [(0, S.OP_PERSIST, 1, S.TIER_SSD), (10, S.OP_HIT, 1, S.TIER_GPU), (20, S.OP_LOAD, 1, S.TIER_GPU),
          (30, S.OP_PERSIST, 2, S.TIER_SSD), (40, S.OP_EVICT, 1, S.TIER_SSD), (50, S.OP_PERSIST, 3, S.TIER_SSD),
          (60, S.OP_PERSIST, 2, S.TIER_SSD)]
    rows, birth, dw, dl, ds = _rows(ev, content_key=[7, 7, 7, 8, 7, 7, 8], parent_id=[0, 0, 0, 1, 0, 0, 1],
                                    request_id=[0, 0, 0, 0, 0, 1, 1], session_id=[5, 5, 5, 5, 5, 5, 5])
    assert len(rows) == 4
    assert birth.tolist() == [MiB, 2 * MiB, 3 * MiB, 4 * MiB]  # the bytes clock after each write
    # deaths, each stamped with the writes made before it: obj 1 (write 0, born at 1 MiB) evicted at 2 MiB;
    # obj 2's first copy (write 1, born at 2 MiB) replaced by the rewrite at 3 MiB (before the rewrite's bytes)
    assert dw.tolist() == [0, 1] and dl.tolist() == [MiB, MiB] and ds.tolist() == [2, 3]
    r = rows
    assert r[:, F["log2_depth"]].tolist() == [0.0, 1.0, 0.0, 1.0]  # log2(depth + 1)
    assert r[:, F["turn"]].tolist() == [0, 0, 1, 0]  # obj 3 first seen in the session's second request
    assert r[:, F["content_tier_writes"]].tolist() == [0, 0, 1, 1]  # content 7 written once before obj 3
    assert r[:, F["content_reads"]].tolist() == [0, 0, 2, 0]  # the hit and the load of content 7
    assert r[2, F["log2_since_content_event"]] == pytest.approx(np.log2(10 + 1))  # its eviction at 40
    assert r[2, F["log2_since_content_write"]] == pytest.approx(np.log2(50 + 1))
    assert r[2, F["log2_prev_copy_life"]] == pytest.approx(np.log2(MiB + 1))  # obj 1's copy lived 1 MiB
    assert r[1, F["log2_prev_copy_life"]] == -1.0  # content 8 never on the tier before
    assert r[3, F["log2_prev_copy_life"]] == pytest.approx(np.log2(MiB + 1))  # the copy this write replaces
    assert r[:, F["log2_tier_evictions"]].tolist() == [0.0, 0.0, 1.0, 1.0]
    # live bytes / peak so far: 0/1 (nothing yet), 1/1, 1/2 (obj 1 evicted), 1/2 (the copy being replaced is gone)
    assert r[:, F["tier_live_share"]].tolist() == [0.0, 1.0, 0.5, 0.5]
    assert r[:, F["tier_capacities_written"]].tolist() == [0.0, 1.0, 1.0, 1.5]


def test_refit_schedule():
    assert [next_fit(n, 16384) for n in (0, 1023, 1024, 3000, 8192, 16383, 16384, 40000)] == \
        [1024, 1024, 2048, 4096, 16384, 16384, 32768, 49152]
    assert [next_fit(n, 1000) for n in (0, 999, 1000)] == [1000, 1000, 2000]  # every < FIRST_FIT: plain multiples


#: a guard that decides early and follows whenever it measures a separation (the guard's state is then part of
#: what the online check checks, not a constant class 0)
EAGER = dict(min_deaths=64, confirm=1, min_separation=-1.0)


def test_learned_is_online(lifetimes_trace):
    rep = check_online(HINTS.get("learned"), lifetimes_trace(3000), params=LearnedParams(**EAGER))
    assert rep.classes_used >= 2 and rep.prefix_writes > 1024  # fitted before the cut: the check bites


def test_learned_separates_short_from_long_lived_writes(lifetimes_trace):
    """The two-lifetime trace: 60% of the objects (quantized, tenant 1) live ~50 ms, the rest ~2 s (most past
    the end). Its first fit (1024 writes, on the first 512) already puts 634 of the 645 short-lived writes up
    to its second fit below every long-lived one; after the second fit (2048 writes) every short-lived write
    gets a lower class than every long-lived one."""
    path = lifetimes_trace(3000)
    reader = S.TraceReader(path)
    cls = classes_of(LearnedHints, reader.iter_batches(), n_classes=4, params=LearnedParams(abstain=False))
    kind = np.concatenate([b["kind"][(b["op"] == S.OP_PERSIST) & (b["tier"] == S.TIER_SSD)]
                           for b in reader.iter_batches(["op", "tier", "kind"])])
    short = kind == S.KIND["quantized"]
    assert len(cls) == 3000 and abs(short.mean() - 0.6) < 0.05
    assert (cls[:1024] == 0).all()  # nothing learned yet
    first, late = slice(1024, 2048), slice(2048, None)
    assert (cls[first][short[first]] < cls[first][~short[first]].min()).mean() > 0.95
    assert cls[late][short[late]].max() < cls[late][~short[late]].min()


def _guarded(path, device=None, **params):
    pol = LearnedHints(4, LearnedParams(**params))
    if device is not None:
        pol.know_device(device)
    lut, out = action_table(S.TIER_SSD), []
    for b in S.TraceReader(path).iter_batches():
        act, tidx = select(lut, b["op"], b["tier"])
        out.append(pol.assign(b, act, tidx[act[tidx] == A_WRITE]))
    return np.concatenate(out), pol.describe()


def test_guarded_it_abstains_until_its_classes_order_the_lifetimes_seen_to_die(lifetimes_trace):
    """test=lifetime. The two-lifetime trace: by its end 1,253 copies have died, nearly all short-lived ones (the
    long-lived mostly outlive the trace), so the class-lifetime correlation of the deaths on record reaches 0.3715
    only (0.3739 with the earlier default of 20 trees at 0.1: the deaths' classes moved a little). Under a bar of
    0.8 the guard never follows: every write gets class 0, as no hints.
    With a bar of 0.3 (deciding every 256 deaths, following after one separated decision) it follows from a
    decision on: from then on the classes are exactly the unguarded ones; before, class 0."""
    path = lifetimes_trace(3000)
    raw = classes_of(LearnedHints, S.TraceReader(path).iter_batches(), n_classes=4,
                     params=LearnedParams(abstain=False))
    assert len(np.unique(raw[2048:])) > 1  # unguarded, it does separate (test above)
    cls, d = _guarded(path, min_deaths=256, confirm=1, test="lifetime", min_separation=0.8)
    assert (cls == 0).all() and d["abstained_writes_share"] == 1.0 and d["switches"] == 0
    assert d["deaths_seen"] == 1253 and d["separation_max"] == pytest.approx(0.3715, abs=1e-4)
    cls, d = _guarded(path, min_deaths=256, confirm=1, test="lifetime", min_separation=0.3)
    diff = np.flatnonzero(cls != raw)
    assert (cls[diff] == 0).all()  # it only ever abstains to class 0
    start = diff.max() + 1  # followed from here on
    assert 2048 < start < 3000 and np.array_equal(cls[start:], raw[start:]) and d["switches"] == 1
    assert (cls[:start] == 0).all()


def test_at_its_defaults_it_follows_once_its_classes_predict_which_copies_outlive_the_drive(lifetimes_trace):
    """test=survival (the default) on the same trace, told a drive of 4,096 pages of 1 MiB: the horizon is 1,024
    writes of 4 MiB. The long-lived copies (1-4 s at 1 ms a write) outlive it, the short-lived ones (25-100 ms)
    do not, and the model ranks them apart, so the 952 copies with an opinion (written after the first fit, at
    1,024 writes) that reach the horizon separate at r = 0.91 (the lifetime test above saw 0.37): above the bar
    (0.5) it follows from write 2,302 on. A drive of 8,192 pages: no copy with an opinion is old enough before
    the trace ends - the guard never follows."""
    path = lifetimes_trace(3000)
    raw = classes_of(LearnedHints, S.TraceReader(path).iter_batches(), n_classes=4,
                     params=LearnedParams(abstain=False))
    cls, d = _guarded(path, DeviceFacts(page_bytes=1 << 20, unit_pages=0, logical_pages=4096), min_deaths=256,
                      confirm=1)
    assert d["deaths_seen"] == 952 and d["separation_at_end"] == pytest.approx(0.9079, abs=1e-4)
    diff = np.flatnonzero(cls != raw)
    assert (cls[diff] == 0).all() and diff.max() + 1 == 2302 and d["switches"] == 1
    assert np.array_equal(cls[2302:], raw[2302:]) and len(np.unique(cls[2302:])) > 1
    cls, d = _guarded(path, DeviceFacts(page_bytes=1 << 20, unit_pages=0, logical_pages=8192), min_deaths=256,
                      confirm=1)
    assert (cls == 0).all() and d["deaths_seen"] == 0


def test_without_scikit_learn_it_says_so_in_one_line(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "sklearn", None)  # not installed: the policy is refused when built
    with pytest.raises(KvbedError, match=r"needs scikit-learn .* pip install 'kvbed\[learn\]'"):
        LearnedHints(4)


def test_a_broken_scikit_learn_fails_at_the_first_fit_in_one_line(monkeypatch):
    """Installed but not importable: the background import's error is raised where the policy waits for it."""
    import sys

    monkeypatch.setitem(sys.modules, "sklearn.ensemble", None)
    imported = BackgroundImport("--hints learned")
    with pytest.raises(KvbedError, match=r"--hints learned needs scikit-learn .* pip install 'kvbed\[learn\]'"):
        imported.get()


def test_predictability_on_the_two_lifetime_trace(lifetimes_trace):
    """Two oracle classes split at the weighted median lifetime: every long-lived write (kind exact) is in class
    1, the short-lived ones (quantized) in class 0 except those whose random lifetime passes the median. The
    features know the kind, not that random draw: I(kind; class) = H(class) - P(short) h(P(class 1 | short))
    exactly, and no classifier beats 1 - P(short and class 1)."""
    from kvreplay.hints.predictability import analyse, feature_table

    tab = feature_table(lifetimes_trace(3000), n_classes=2)
    res = analyse(tab, mi_sample=3000, block=256)
    y = tab["oracle"]
    short = tab["rows"][:, F["kind"]] == S.KIND["quantized"]
    assert (y[~short] == 1).all() and 0.1 < y[short].mean() < 0.25  # 312 of 1821 short writes in class 1

    def h(p):
        return -(p * np.log2(p) + (1 - p) * np.log2(1 - p))

    assert res["entropy_bits"] == pytest.approx(h(y.mean()))
    assert res["mi_bits"]["kind"] == pytest.approx(h(y.mean()) - short.mean() * h(y[short].mean()), rel=1e-3)
    bayes = 1 - (short & (y == 1)).mean()
    assert bayes - 0.02 < res["cross_fit"]["accuracy"] <= bayes + 0.005
    assert res["cross_fit"]["joint_mi_bits_lower_bound"] <= res["entropy_bits"]


def test_its_feature_pass_run_ahead_gives_the_same_classes(lifetimes_trace):
    """The replay runs ``observe`` (the feature pass) in its reading thread, batches ahead of ``assign``. With every
    batch observed before the first is assigned (the furthest ahead it can be), the classes are those of a
    policy that observes each batch just before assigning it: observe touches nothing assign reads. 700-row
    batches, so refits fall inside and across them."""
    path = lifetimes_trace(3000)
    lut = action_table(S.TIER_SSD)
    batches = []
    for b in S.TraceReader(path).iter_batches():
        for lo in range(0, b.n, 700):
            x = b.take(slice(lo, lo + 700))
            act, tidx = select(lut, x["op"], x["tier"])
            batches.append((x, act, tidx[act[tidx] == A_WRITE]))
    params = LearnedParams(min_deaths=256, confirm=1, min_separation=0.3)
    plain, ahead = LearnedHints(4, params), LearnedHints(4, params)
    for pol in (plain, ahead):
        pol.know_device(DeviceFacts(MiB, 0, 0, 2000))
    want = np.concatenate([plain.assign(*x) for x in batches])
    seen = [ahead.observe(*x) for x in batches]
    got = np.concatenate([ahead.assign(*x, s) for x, s in zip(batches, seen)])
    assert len(batches) > 5 and plain.fits == ahead.fits == 2  # at 1,024 and 2,048 writes
    assert len(np.unique(want)) > 1  # it follows its classes, so the comparison is not of all zeros
    np.testing.assert_array_equal(got, want)
    assert ahead.describe() == plain.describe()


def test_a_replay_gives_the_classes_of_the_policy_run_batch_by_batch(lifetimes_trace):
    """A replay runs learned's feature pass in its reading thread, ahead of the classes (HintPolicy.observe), and
    the classes in a thread beside the layout's: its writes per class are those of the policy run batch by batch
    in one thread (classes_of), and they are spread over the classes."""
    from kvreplay.replay.engine import Replay, build_config

    path = lifetimes_trace(3000)
    job = Replay(build_config(str(path), "fdp", "learned", ["fill_ratio=1.0", "abstain=false"])).run()["result"]
    job = job["jobs"][0]
    n = len(job["per_class"])
    want = np.bincount(classes_of(LearnedHints, S.TraceReader(path).iter_batches(), n_classes=n,
                                  params=LearnedParams(abstain=False)), minlength=n)
    assert [c["writes"] for c in job["per_class"]] == want.tolist() and (want > 0).sum() > 2


def test_fits_and_predictions_run_on_one_openmp_thread_and_the_limit_is_restored(lifetimes_trace, monkeypatch):
    """Each batch's fits and predictions see OpenMP limited to one thread (on a shared machine more threads spin
    for nothing); between batches the process's own setting holds again."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_info

    def openmp_threads():
        return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp"}

    seen = {"fit": set(), "predict": set()}
    fit, predict = HistGradientBoostingRegressor.fit, HistGradientBoostingRegressor.predict

    def spy_fit(self, *a, **k):
        seen["fit"] |= openmp_threads()
        return fit(self, *a, **k)

    def spy_predict(self, *a, **k):
        seen["predict"] |= openmp_threads()
        return predict(self, *a, **k)

    monkeypatch.setattr(HistGradientBoostingRegressor, "fit", spy_fit)
    monkeypatch.setattr(HistGradientBoostingRegressor, "predict", spy_predict)
    before = openmp_threads()
    cls, info = _guarded(lifetimes_trace(3000), abstain=False, retrain_writes=1024)
    assert info["fits"] >= 2 and before  # scikit-learn's OpenMP is loaded, and the policy did fit
    assert seen == {"fit": {1}, "predict": {1}}
    assert openmp_threads() == before
