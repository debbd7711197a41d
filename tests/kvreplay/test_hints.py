"""Hint policies: what each may know, and that it uses only that.

The central check: an online policy must give the same class to every write
whether or not the rest of the trace exists (``predicted`` gives the same
classes when the future is removed), and whatever the row-group boundaries. The
oracle is the control: it *does* change, so the check can fail.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvreplay import schema as S
from kvreplay.hints import HINTS
from kvreplay.hints.base import DeviceFacts
from kvreplay.hints.base import classes_from_edges, lifetime_edges
from kvreplay.layout.actions import A_WRITE, action_table, select
from kvreplay.replay.scan import SCAN_COLUMNS, scan_trace
from tests.support.replay_fixtures import rewrite, truncate, two_lifetimes
from kvbed.core.errors import KvbedError

ONLINE = ("none", "hotness", "predicted", "type", "fill-phase", "learned")  # readmission: test_readmission.py
GUARDED = ("hotness", "predicted", "type", "learned")  # kvreplay.hints.abstain
#: the drive every policy is told of (the same for a trace and its cut): 4096 pages of 1 MiB, 1024 writes of the
#: two_lifetimes trace's 4 MiB objects - its long-lived copies outlive them, its short-lived ones do not
DRIVE = DeviceFacts(page_bytes=1 << 20, unit_pages=0, logical_pages=4096)
GUARD_EAGER = dict(min_deaths=64, confirm=1, min_separation=-1.0)


def classes_of(name: str, path: Path, n: int = 4, seed: int = 0, **params) -> np.ndarray:
    """Run one policy over a trace exactly as the replay does; the class of every tier write in order."""
    cls = HINTS.get(name)
    pol = cls(n, cls.Params(**params), seed=seed, tier=S.TIER_SSD)
    reader = S.TraceReader(path)
    pol.know_device(DRIVE)
    if cls.needs_future:
        pol.prepare(scan_trace(reader, S.TIER_SSD, 1 << 20, record_future=True, clock=pol.clock).future)
    cols = list(dict.fromkeys(SCAN_COLUMNS + cls.columns))
    lut = action_table(S.TIER_SSD)
    out = []
    for b in reader.iter_batches(cols):
        act, tidx = select(lut, b["op"], b["tier"])
        out.append(pol.assign(b, act, tidx[act[tidx] == A_WRITE]))
    return np.concatenate(out)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("hints")
    full = two_lifetimes(d / "full.parquet", n_objects=3000, row_group_rows=2048)
    rows = S.TraceReader(full).num_rows
    cut = truncate(full, d / "cut.parquet", rows * 11 // 20, row_group_rows=777)
    regrouped = rewrite(full, d / "regrouped.parquet", row_group_rows=5000)
    return full, cut, regrouped


@pytest.mark.parametrize("name", ONLINE)
def test_online_policies_do_not_see_the_future(traces, name):
    full, cut, regrouped = traces
    # the guarded policies with a guard that decides early and follows whenever it can measure a separation,
    # so that the guard's own state (deaths seen, decisions) is part of what is checked, not a constant class 0
    kw = GUARD_EAGER if name in GUARDED else {}
    a = classes_of(name, full, **kw)
    b = classes_of(name, cut, **kw)
    c = classes_of(name, regrouped, **kw)
    assert 1000 < len(b) < len(a)
    assert np.array_equal(a[: len(b)], b), f"{name}: classes changed when the future was removed"
    assert np.array_equal(a, c), f"{name}: classes depend on batch boundaries"
    if name != "none":
        assert len(np.unique(a)) > 1, f"{name} gives one class on this trace: the check would be vacuous"


def test_the_oracle_does_see_the_future(traces):
    full, cut, _ = traces
    a = classes_of("oracle", full)
    b = classes_of("oracle", cut)
    assert not np.array_equal(a[: len(b)], b)  # it is offline by design; this shows the check above bites


def _true_lifetimes_ns(path: Path) -> np.ndarray:
    """Per tier write, in write order: time until the object's evict on the tier (inf if never), by numpy."""
    b, _ = S.read_trace(path)
    ssd = b["tier"] == S.TIER_SSD
    w = np.flatnonzero(ssd & (b["op"] == S.OP_PERSIST))
    e = np.flatnonzero(ssd & (b["op"] == S.OP_EVICT))
    death = dict(zip(b["obj_id"][e].tolist(), b["ts_ns"][e].tolist()))
    return np.array([death.get(o, np.inf) - t for o, t in zip(b["obj_id"][w].tolist(), b["ts_ns"][w].tolist())])


def test_oracle_orders_writes_by_true_remaining_lifetime(traces):
    full, _, _ = traces
    cls = classes_of("oracle", full, n=4, clock="time")
    life = _true_lifetimes_ns(full)
    order = np.argsort(life, kind="stable")
    assert (np.diff(cls[order].astype(int)) >= 0).all()  # sorted by true lifetime, classes never go down
    counts = np.bincount(cls, minlength=4)
    never = int(np.isinf(life).sum())
    assert never * 4 >= len(life)  # over a quarter never dies in this trace: they get the top class alone
    assert counts[3] == never
    assert np.abs(counts[:3] - (len(life) - never) / 3).max() <= 1  # the rest split at their own terciles


def test_lifetime_edges_hand_case():
    lt = np.arange(1, 9, dtype=float)
    edges = lifetime_edges(lt, np.ones(8), 4)
    assert edges.tolist() == [2.0, 4.0, 6.0]  # byte-weighted quartiles of 1..8
    assert classes_from_edges(lt, edges).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    # weights shift the edges: the first object carries half the bytes
    assert lifetime_edges(lt, np.array([7, 1, 1, 1, 1, 1, 1, 1]), 2).tolist() == [1.0]
    inf = np.array([1.0, 2.0, np.inf, np.inf])
    assert classes_from_edges(inf, lifetime_edges(inf, np.ones(4), 2)).tolist() == [0, 0, 1, 1]
    # half never dies (>= 1/3): top class for them, the finite ones split in two
    lt6 = np.array([1.0, 2.0, 3.0, 4.0, np.inf, np.inf, np.inf, np.inf])
    assert classes_from_edges(lt6, lifetime_edges(lt6, np.ones(8), 3)).tolist() == [0, 0, 1, 1, 2, 2, 2, 2]
    # a few never-dying copies (< 1/n) share the top class with the longest finite ones
    lt7 = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, np.inf])
    assert classes_from_edges(lt7, lifetime_edges(lt7, np.ones(8), 2)).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_noisy_oracle_flips_the_stated_share(traces):
    full, _, _ = traces
    exact = classes_of("oracle", full, n=8)
    assert np.array_equal(classes_of("noisy-oracle", full, n=8, error_rate=0.0), exact)
    noisy = classes_of("noisy-oracle", full, n=8, error_rate=0.3, seed=1)
    flipped = noisy != exact
    n = len(exact)
    assert abs(flipped.mean() - 0.3) < 4 * np.sqrt(0.3 * 0.7 / n)  # binomial, 4 sigma
    assert np.array_equal(classes_of("noisy-oracle", full, n=8, error_rate=0.3, seed=1), noisy)
    assert not np.array_equal(classes_of("noisy-oracle", full, n=8, error_rate=0.3, seed=2), noisy)


def _hot_trace(path: Path) -> Path:
    """Hand case: 1 hit 3 times then persisted; 2 persisted cold; 3 hit 3 times, persisted 2 half-lives later;
    4 is 1's next chunk (parent 1), persisted right after 1."""
    h = 1_000_000_000  # half-life used below
    ev = [  # ts, op, obj, parent, tier
        (0, S.OP_CREATE, 1, 0, S.TIER_GPU), (1, S.OP_HIT, 1, 0, S.TIER_GPU), (2, S.OP_HIT, 1, 0, S.TIER_GPU),
        (3, S.OP_HIT, 1, 0, S.TIER_GPU), (4, S.OP_PERSIST, 1, 0, S.TIER_SSD),
        (5, S.OP_CREATE, 2, 0, S.TIER_GPU), (6, S.OP_PERSIST, 2, 0, S.TIER_SSD),
        (7, S.OP_CREATE, 4, 1, S.TIER_GPU), (8, S.OP_PERSIST, 4, 1, S.TIER_SSD),
        (10, S.OP_CREATE, 3, 0, S.TIER_GPU), (11, S.OP_HIT, 3, 0, S.TIER_GPU), (12, S.OP_HIT, 3, 0, S.TIER_GPU),
        (13, S.OP_HIT, 3, 0, S.TIER_GPU), (13 + 2 * h, S.OP_PERSIST, 3, 0, S.TIER_SSD),
    ]
    ts, op, obj, parent, tier = (np.array(c) for c in zip(*ev))
    S.write_trace(path, S.make_batch(ts_ns=ts, op=op, obj_id=obj, parent_id=parent, tier=tier,
                                     nbytes=np.full(len(ts), 1 << 20)), S.TraceMeta())
    return path


def test_hotness_hand_case(tmp_path):
    p = _hot_trace(tmp_path / "hot.parquet")
    # scores at write: 1 -> 3 (class floor(log2(4)) = 2); 2 -> 0; 4 inherits 1's 3 -> 2;
    # 3 -> 3 / 2**2 = 0.75 -> floor(log2(1.75)) = 0
    # (the policy's own classes: abstain=False; with the guard, four writes and no death abstain to class 0)
    kw = dict(half_life_ns=1_000_000_000, abstain=False)
    assert classes_of("hotness", p, n=4, **kw).tolist() == [2, 0, 2, 0]
    assert classes_of("hotness", p, n=4, inherit=False, **kw).tolist() == [2, 0, 0, 0]
    assert classes_of("hotness", p, n=2, **kw).tolist() == [1, 0, 1, 0]  # capped at top class
    assert classes_of("hotness", p, n=4, half_life_ns=1_000_000_000).tolist() == [0, 0, 0, 0]


def test_predicted_learns_per_feature_bucket(traces):
    full, _, _ = traces
    cls = classes_of("predicted", full, n=4, refresh=64, min_samples=8, abstain=False)
    b, _ = S.read_trace(full)
    w = (b["tier"] == S.TIER_SSD) & (b["op"] == S.OP_PERSIST)
    short = b["kind"][w] == S.KIND["quantized"]  # the fixture gives short-lived objects this kind
    assert (cls[:20] == 0).all()  # nothing has died yet: it knows nothing
    late = np.arange(len(cls)) > len(cls) // 2
    assert cls[late & short].mean() + 1 <= cls[late & ~short].mean()  # learned: quantized copies die young


def test_type_assigns_pairs_in_order_of_first_write(tmp_path):
    kinds = ["exact", "quantized", "exact", "compressed", "exact", "exact"]
    tenants = [0, 1, 0, 0, 1, 0]
    n = len(kinds)
    S.write_trace(tmp_path / "t.parquet", S.make_batch(
        ts_ns=np.arange(n), op=np.full(n, S.OP_PERSIST), obj_id=np.arange(1, n + 1), tier=np.full(n, S.TIER_SSD),
        nbytes=np.full(n, 1024), kind=np.array(kinds), tenant=np.array(tenants)), S.TraceMeta(), tenants=["a", "b"])
    # pairs: (exact,a)=0 (quantized,b)=1 (compressed,a)=2 (exact,b)=3 % 3 = 0
    assert classes_of("type", tmp_path / "t.parquet", n=3, abstain=False).tolist() == [0, 1, 0, 2, 0, 0]
    assert classes_of("type", tmp_path / "t.parquet", n=3).tolist() == [0] * 6  # no death seen: abstains


def test_registry_and_knowledge_statements():
    assert HINTS.names() == ["fill-phase", "hotness", "learned", "noisy-oracle", "none", "oracle", "predicted",
                            "readmission", "type"]
    for name in HINTS.names():
        cls = HINTS.get(name)
        assert cls.knows and isinstance(cls.knows, str)
        assert cls.needs_future == (name in ("oracle", "noisy-oracle"))
    with pytest.raises(KvbedError, match="unknown hint policy 'magic'"):
        HINTS.get("magic")


def _classes_on_batches(name, batches, n=4):
    cls = HINTS.get(name)
    pol = cls(n, cls.Params(), seed=0, tier=S.TIER_SSD)
    pol.know_device(DRIVE)
    lut = action_table(S.TIER_SSD)
    out = []
    for b in batches:
        act, tidx = select(lut, b["op"], b["tier"])
        out.append(pol.assign(b, act, tidx[act[tidx] == A_WRITE]))
    return np.concatenate(out)


@pytest.mark.parametrize("name", ONLINE)
def test_policies_read_only_the_columns_they_declare(traces, name):
    """Scrambling every column a policy does not declare leaves its classes unchanged."""
    full, _, _ = traces
    cls = HINTS.get(name)
    batches = list(S.TraceReader(full).iter_batches())
    rng = np.random.default_rng(5)
    keep = set(cls.columns) | {"op", "tier"} | set(SCAN_COLUMNS)
    scrambled = []
    for b in batches:
        c = S.EventBatch({k: v.copy() for k, v in b.items()})
        for k in c:
            if k not in keep:
                c[k] = rng.permutation(c[k]) if k != "ts_ns" else np.sort(rng.integers(0, 1 << 40, b.n))
        scrambled.append(c)
    assert np.array_equal(_classes_on_batches(name, batches), _classes_on_batches(name, scrambled))


def test_online_quantile_edges_spread_scores_over_classes():
    from kvreplay.hints.quantiles import BINS_PER_OCTAVE, class_of, new_state, refresh_edges, score_bin

    hist, edges = new_state(4)
    scores = np.repeat([0.0, 1.0, 2.0, 3.0], 25)  # four equal groups, one octave apart
    for x in scores:
        hist[score_bin(x)] += 1
    refresh_edges(hist, edges)
    assert edges.tolist() == [1 / BINS_PER_OCTAVE, 1 + 1 / BINS_PER_OCTAVE, 2 + 1 / BINS_PER_OCTAVE]
    assert [class_of(x, edges) for x in (0.0, 1.0, 2.0, 3.0, 9.0)] == [0, 1, 2, 3, 3]


def test_adaptive_hotness_balances_classes(traces):
    full, _, _ = traces
    fixed = np.bincount(classes_of("hotness", full, n=4, adaptive=False, abstain=False), minlength=4)
    adaptive_cls = classes_of("hotness", full, n=4, refresh=256, abstain=False)
    adaptive = np.bincount(adaptive_cls, minlength=4)
    assert np.array_equal(adaptive_cls[:256], classes_of("hotness", full, n=4, adaptive=False, abstain=False)[:256])
    # on this trace the fixed scale gives [943, 653, 1249, 155]; quantile edges even it out
    assert adaptive.max() < fixed.max() and adaptive.min() > fixed.min()
    assert adaptive.std() < 0.6 * fixed.std()


@pytest.mark.parametrize("clock,unit", [("bytes", "bytes"), ("time", "ns")])
def test_lifetime_figures_in_result_json_name_their_clock_unit(traces, clock, unit):
    """result.json keys carry units: the oracle's edges and predicted's learned lifetimes are in bytes written
    or in ns depending on the clock, and the key says which."""
    full, _, _ = traces
    pol = HINTS.get("oracle")(4, HINTS.get("oracle").Params(clock=clock), tier=S.TIER_SSD)
    pol.prepare(scan_trace(S.TraceReader(full), S.TIER_SSD, 1 << 20, record_future=True, clock=clock).future)
    d = pol.describe()
    assert "edges" not in d and d[f"edges_{unit}"] == [None if not np.isfinite(e) else int(e) for e in pol.edges]
    assert len(d[f"edges_{unit}"]) == 3
    pred = HINTS.get("predicted")(4, HINTS.get("predicted").Params(clock=clock, refresh=64), tier=S.TIER_SSD)
    lut = action_table(S.TIER_SSD)
    for b in S.TraceReader(full).iter_batches():
        act, tidx = select(lut, b["op"], b["tier"])
        pred.assign(b, act, tidx[act[tidx] == A_WRITE])
    d = pred.describe()
    e = d[f"edges_log2_{unit}"]  # distinct edges only (coinciding quantiles make fewer classes)
    assert d[f"mean_log2_lifetime_{unit}"] > 0 and 1 <= len(e) <= 3 and all(a < b for a, b in zip(e, e[1:]))


def test_predicted_features_follow_the_reference_definitions(tmp_path):
    """``predicted`` computes prefix depth and session turn online in its own kernel (only for objects it
    still tracks); on a tier-simulated synth trace, streamed in small row groups, every tracked object's
    depth and turn bucket equal kvreplay.tiers.features' definitions (PrefixDepth, session_turns)."""
    from kvreplay.hints.predicted import TURN_BUCKETS, _log_bucket
    from kvreplay.synth import SYNTH_TIER_DEFAULTS, SynthParams, synthesize
    from kvreplay.tiers.features import PrefixDepth, session_turns
    from kvreplay.tiers.sim import simulate_to_file

    path = tmp_path / "s.parquet"
    simulate_to_file(synthesize(SynthParams(duration_s=150)), SYNTH_TIER_DEFAULTS, path, S.TraceMeta(),
                     row_group_rows=2000)
    whole, _ = S.read_trace(path)
    turn_of: dict[int, int] = {}
    for o, t in zip(whole["obj_id"].tolist(), session_turns(whole["request_id"], whole["session_id"]).tolist()):
        turn_of.setdefault(o, max(t, 0))
    cls = HINTS.get("predicted")
    pol = cls(4, cls.Params(), seed=0, tier=S.TIER_SSD)
    reader = S.TraceReader(path)
    lut = action_table(S.TIER_SSD)
    ref = PrefixDepth()
    got, want = [], []
    for b in reader.iter_batches(list(dict.fromkeys(SCAN_COLUMNS + cls.columns))):
        act, tidx = select(lut, b["op"], b["tier"])
        pol.assign(b, act, tidx[act[tidx] == A_WRITE])
        depth = dict(zip(b["obj_id"].tolist()[::-1], ref(b).tolist()[::-1]))  # first event of each object
        for o, d in depth.items():
            s = pol.objs.find(o)
            if s >= 0:
                got.append((int(pol.objs.cols["depth"][s]), int(pol.objs.cols["bucket"][s]) % TURN_BUCKETS))
                want.append((d, _log_bucket(turn_of[o], TURN_BUCKETS)))
    assert reader.num_row_groups > 20 and len(got) > 10_000
    assert max(d for d, _ in want) >= 3 and max(t for _, t in want) >= 1  # deep prefixes, later turns
    assert got == want
