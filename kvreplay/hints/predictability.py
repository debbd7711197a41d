"""How much the causal features say about the oracle's class: a bound for any policy using them.

For the replayed tier's writes, :func:`feature_table` builds the causal feature rows (the same pass as
``learned``, :class:`kvreplay.hints.learned.FeatureStream`: only what is knowable at write time) beside each
write's true remaining lifetime and the oracle's class (:mod:`kvreplay.hints.oracle`, same classes and clock).
:func:`analyse` then reports, with scikit-learn (an optional dependency):

- ``entropy_bits``: H(oracle class), the information a policy would need to place every write as the oracle;
- ``mi_bits``: I(feature; oracle class) per feature (``mutual_info_classif``, k-NN estimator, on a seeded
  sample), and ``joint_mi_bits_lower_bound``: H(class) minus the held-out cross-entropy (bits) of the
  cross-fitted classifier - any classifier's held-out log loss bounds I(all features; class) from below;
- ``causal_split``: a ``HistGradientBoostingClassifier`` trained on the first ``train_share`` of the writes
  (with their oracle classes) and tested on the rest, against the majority class of the training part;
- ``cross_fit``: the same classifier (and a regressor of log2 lifetime, whose predictions are cut into
  classes at their quantiles) trained on interleaved blocks of writes and predicting the held-out blocks:
  every write gets a held-out class from a model that saw perfectly labelled writes just before *and after*
  it. Its labels come from the future, so it is **offline** (the "classifier-oracle"): more than a causal
  learner on these features can know (it learns only from the deaths already seen). Replaying with its
  classes (:class:`GivenClasses`) gives the share of the oracle's WAF cut these features could reach.

Knows: the future (it judges against the oracle); the features themselves are causal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvreplay import schema as S
from kvreplay.hints.base import HintPolicy, classes_from_edges, lifetime_edges
from kvreplay.hints.learned import FEATURE_COLUMNS, FEATURES, FeatureStream, require_sklearn
from kvreplay.hints.oracle import future_lifetimes
from kvreplay.layout.actions import A_WRITE, action_table, select
from kvreplay.replay.scan import SCAN_COLUMNS, scan_trace
from kvbed.core.errors import KvbedError
from kvbed.core.params import param

#: features whose values are codes (mutual information treats them as discrete)
DISCRETE = ("kind", "tenant", "scope", "op")


def feature_table(trace: str | Path, *, n_classes: int, tier: int = S.TIER_SSD, clock: str = "bytes",
                  page_bytes: int = 1 << 20) -> dict[str, np.ndarray]:
    """Per tier write, in write order: ``rows`` (float32[n, NF], :data:`FEATURES`), ``lifetime`` (clock
    ticks, inf = never dies), ``weight`` (mapping units), ``oracle`` (the oracle's class)."""
    reader = S.TraceReader(trace)
    future = scan_trace(reader, tier, page_bytes, record_future=True, clock=clock).future
    lifetime = future_lifetimes(future)
    oracle = classes_from_edges(lifetime, lifetime_edges(lifetime, future.weight, n_classes))
    stream = FeatureStream(clock, tier)
    lut = action_table(tier)
    rows = []
    for b in reader.iter_batches(list(dict.fromkeys([*SCAN_COLUMNS, *FEATURE_COLUMNS]))):
        act, tidx = select(lut, b["op"], b["tier"])
        writes = tidx[act[tidx] == A_WRITE]
        rows.append(stream.batch(b, act, len(writes))[0])
    x = np.concatenate(rows) if rows else np.zeros((0, len(FEATURES)), np.float32)
    if len(x) != future.n:
        raise RuntimeError(f"feature pass saw {len(x)} writes, the scan {future.n}")
    return {"rows": x, "lifetime": lifetime, "weight": future.weight, "oracle": oracle}


def entropy_bits(y: np.ndarray) -> float:
    p = np.bincount(y) / len(y)
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum())


def _classifier(seed: int, max_iter: int):
    from sklearn.ensemble import HistGradientBoostingClassifier

    cat = [FEATURES.index(f) for f in DISCRETE]
    return HistGradientBoostingClassifier(max_iter=max_iter, random_state=seed, early_stopping=False,
                                          categorical_features=_cat_mask(cat))


def _cat_mask(cat: list[int]) -> np.ndarray:
    m = np.zeros(len(FEATURES), bool)
    m[cat] = True
    return m


def _codes(x: np.ndarray) -> np.ndarray:
    """The discrete columns as small non-negative codes (the booster's categorical features need < 255)."""
    x = x.copy()
    for f in DISCRETE:
        k = FEATURES.index(f)
        _, inv = np.unique(x[:, k], return_inverse=True)
        x[:, k] = np.minimum(inv, 250)
    return x


def analyse(table: dict[str, np.ndarray], *, train_share: float = 0.5, seed: int = 0, mi_sample: int = 8000,
            max_iter: int = 40, folds: int = 4, block: int = 2048) -> dict[str, Any]:
    """The predictability figures of a :func:`feature_table` (see the module doc); also ``classes``: the
    classifier-oracle's class of every write and ``regressor_classes``: the regressor-oracle's (cross-fitted
    on interleaved blocks of ``block`` writes, ``folds`` folds), for :class:`GivenClasses`."""
    require_sklearn("the predictability analysis")
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.feature_selection import mutual_info_classif

    x, y = _codes(table["rows"]), table["oracle"].astype(np.int64)
    n = len(y)
    if n < 100:
        raise KvbedError(f"predictability: {n} tier writes, too few to train and test on")
    n_classes = int(y.max()) + 1
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(n, min(mi_sample, n), replace=False))
    disc = _cat_mask([FEATURES.index(f) for f in DISCRETE])
    mi = mutual_info_classif(x[sample], y[sample], discrete_features=disc, random_state=seed)
    mi_bits = {f: float(v / np.log(2)) for f, v in zip(FEATURES, mi)}
    # causal split: trained on the first part, tested on the rest
    cut = int(n * train_share)
    clf = _classifier(seed, max_iter).fit(x[:cut], y[:cut])
    pred_te = clf.predict(x[cut:])
    majority = int(np.bincount(y[:cut], minlength=n_classes).argmax())
    # cross-fitted on interleaved blocks: labelled neighbours on both sides in time (offline, optimistic)
    fold = (np.arange(n) // block) % folds
    proba = np.full((n, n_classes), 1e-12)
    score = np.zeros(n)
    life = np.log2(np.clip(table["lifetime"], 1.0, None))
    life[~np.isfinite(life)] = np.nanmax(life[np.isfinite(life)], initial=0.0) + 1.0  # never dies: last
    for k in range(folds):
        tr, te = fold != k, fold == k
        c = _classifier(seed, max_iter).fit(x[tr], y[tr])
        proba[np.ix_(te, c.classes_)] = np.maximum(c.predict_proba(x[te]), 1e-12)
        reg = HistGradientBoostingRegressor(max_iter=max_iter, random_state=seed, early_stopping=False)
        score[te] = reg.fit(x[tr], life[tr]).predict(x[te])
    proba /= proba.sum(axis=1, keepdims=True)
    classes = np.argmax(proba, axis=1).astype(np.int16)
    ce_bits = float(-np.log2(proba[np.arange(n), y]).mean())
    h = entropy_bits(y)
    reg_classes = classes_from_edges(score, lifetime_edges(score, table["weight"], n_classes))
    return {
        "writes": n, "n_classes": n_classes, "train_writes": cut, "test_writes": n - cut,
        "entropy_bits": h,
        "mi_bits": mi_bits, "mi_sample": len(sample),
        "causal_split": {"accuracy": float((pred_te == y[cut:]).mean()),
                         "within_one_class": float((np.abs(pred_te - y[cut:]) <= 1).mean()),
                         "majority_accuracy": float((y[cut:] == majority).mean())},
        "cross_fit": {"folds": folds, "block_writes": block,
                      "accuracy": float((classes == y).mean()),
                      "within_one_class": float((np.abs(classes - y) <= 1).mean()),
                      "cross_entropy_bits": ce_bits,
                      "joint_mi_bits_lower_bound": max(h - ce_bits, 0.0),
                      "regressor_accuracy": float((reg_classes == y).mean()),
                      "regressor_spearman": _spearman(score, table["lifetime"])},
        "classes": classes,
        "regressor_classes": reg_classes,
    }


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    import pandas as pd

    return float(pd.Series(a).rank().corr(pd.Series(b).rank()))


@dataclass(frozen=True)
class GivenClassesParams:
    classes_file: str = param("", "a .npy file of int16 classes, one per tier write in write order")


class GivenClasses(HintPolicy):
    """Replays the classes of a file (``--hints kvreplay.hints.predictability:GivenClasses -p
    classes_file=F.npy``): the classifier-oracle of the analysis. Offline: the file was made from the future."""

    knows = "the future: classes computed offline (the predictability analysis' classifier-oracle)"
    needs_future = True
    Params = GivenClassesParams

    def __init__(self, n_classes, params=None, *, seed=0, tier=3):
        super().__init__(n_classes, params, seed=seed, tier=tier)
        try:
            self.classes = np.load(self.params.classes_file).astype(np.int16)
        except (OSError, ValueError) as exc:
            raise KvbedError(f"{self.params.classes_file}: not a .npy file of classes ({exc})") from None
        if len(self.classes) and (self.classes.min() < 0 or self.classes.max() >= n_classes):
            raise KvbedError(f"{self.params.classes_file}: classes outside [0, {n_classes})")

    def prepare(self, future):
        if future.n != len(self.classes):
            raise KvbedError(f"{self.params.classes_file}: {len(self.classes)} classes for {future.n} tier writes")

    def _assign(self, batch, actions, writes):
        return self.classes[self.writes_seen:self.writes_seen + len(writes)]
