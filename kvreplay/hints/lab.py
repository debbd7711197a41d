"""The hint lab (``kvbed replay --hint-lab``): how good a run's hints were, against the oracle's on the same trace.

After the replay, the lab classifies every write of the replayed tier twice - with the run's policy (a fresh
instance, same classes, parameters and seed: its classes are those the replay used, since a policy's classes
depend only on the trace) and with ``oracle`` (exact remaining lifetime, on the policy's lifetime clock when it
has one, else the bytes clock) - and replays the trace twice more on the same sized device, with hints ``none``
and ``oracle``. It reports, in result.json ``jobs[].hint_policy.lab``:

- ``accuracy``: the share of writes the policy put in the oracle's class (``accuracy_bytes``: of the bytes,
  in mapping units); ``confusion_writes[o][p]``: writes of oracle class o given class p;
- ``accuracy_one_class`` (``accuracy_bytes_one_class``): the one-class reference of those two: the accuracy of
  giving every write the oracle's most common class (by writes; by bytes), i.e. the largest oracle class's
  share of the writes (of the bytes). A policy that abstains on every write (all class 0) scores the oracle's
  class-0 share, at most this; accuracy means something only against it (the oracle's classes are byte
  quantiles of the lifetime, so each holds about 1/n_classes of the bytes unless the copies that never die
  fill the top class, while by writes the largest class may hold far more);
- ``spearman``: Spearman's rank correlation between the policy's class (its predicted lifetime rank: class k
  holds longer-lived writes than class k-1, as the oracle's) and the true remaining lifetime (a copy that
  never dies ranks last), computed as the Pearson correlation of pandas ranks (ties averaged); null when
  either side is constant (a one-class policy predicts no order);
- ``oracle_waf_cut_captured_ratio`` = (WAF_none - WAF_policy) / (WAF_none - WAF_oracle), on end-to-end WAF:
  the share of the oracle's WAF cut the policy achieves (1: all of it, 0: nothing, below 0: worse than no
  hints). Its denominator is the oracle's cut, ``waf.oracle_cut``; when the oracle cuts less than
  ``MIN_ORACLE_CUT`` the ratio is undefined: null, with ``undefined_because`` saying so.

Knows: the lab itself is offline by design (it reads the future to judge); the run's replay is unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from kvreplay import schema as S
from kvreplay.hints.base import HintPolicy, classes_from_edges, lifetime_edges
from kvreplay.hints.oracle import OracleHints, future_lifetimes
from kvreplay.hints.registry import HINTS
from kvreplay.hints.testing import classes_of
from kvreplay.replay.scan import SCAN_COLUMNS, scan_trace

#: the smallest oracle cut (end-to-end WAF, absolute) a captured share is computed for
MIN_ORACLE_CUT = 1e-3
#: what the captured share is, as result.json and the report say it
CAPTURED_FORMULA = "(WAF_none - WAF_policy) / (WAF_none - WAF_oracle), end-to-end WAF"


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's rho by pandas ranks (average ties); None when either side is constant."""
    if len(a) < 2:
        return None
    ra = pd.Series(a, dtype=np.float64).rank()
    rb = pd.Series(b, dtype=np.float64).rank()
    if ra.nunique() < 2 or rb.nunique() < 2:
        return None
    return float(ra.corr(rb))


def agreement(policy: np.ndarray, oracle: np.ndarray, lifetime: np.ndarray, weight: np.ndarray,
              n_classes: int) -> dict[str, Any]:
    """The class-level figures of the lab for per-write arrays in write order."""
    n = len(policy)
    same = policy == oracle
    w = weight.astype(np.float64)
    conf = np.bincount(oracle.astype(np.int64) * n_classes + policy.astype(np.int64),
                       minlength=n_classes * n_classes).reshape(n_classes, n_classes)

    def share(cls: np.ndarray) -> list[float]:
        tot = w.sum()
        return [float(x / tot) if tot else 0.0 for x in np.bincount(cls, weights=w, minlength=n_classes)]

    oracle_bytes = np.bincount(oracle.astype(np.int64), weights=w, minlength=n_classes)
    return {
        "writes": int(n),
        "accuracy": float(same.mean()) if n else None,
        "accuracy_bytes": float(w[same].sum() / w.sum()) if n and w.sum() else None,
        # the reference: every write given the oracle's most common class (by writes; by bytes)
        "accuracy_one_class": float(conf.sum(axis=1).max() / n) if n else None,
        "accuracy_bytes_one_class": float(oracle_bytes.max() / w.sum()) if n and w.sum() else None,
        "spearman": spearman(policy, lifetime),
        "confusion_writes": conf.tolist(),
        "bytes_share_per_class": {"policy": share(policy), "oracle": share(oracle)},
    }


def captured(waf_none: float | None, waf_policy: float | None, waf_oracle: float | None) -> dict[str, Any]:
    """The share of the oracle's WAF cut the policy captures, or null with the reason."""
    out: dict[str, Any] = {"oracle_waf_cut_captured_ratio": None, "formula": CAPTURED_FORMULA,
                           "denominator": "the oracle's cut, WAF_none - WAF_oracle (waf.oracle_cut)"}
    if None in (waf_none, waf_policy, waf_oracle):
        out["undefined_because"] = "a replay of the lab did not complete"
        return out
    cut = waf_none - waf_oracle
    if cut < MIN_ORACLE_CUT:
        out["undefined_because"] = (f"the oracle cuts nothing here: WAF_none - WAF_oracle = {cut:.4f} "
                                    f"< {MIN_ORACLE_CUT:g}")
        return out
    out["oracle_waf_cut_captured_ratio"] = (waf_none - waf_policy) / cut
    return out


def _waf_with(replay: Any, hints: str, hint_params: Any) -> float | None:
    """End-to-end WAF of the same run (same sized device, classes, seed) with other hints."""
    from kvreplay.replay.config import RunConfig

    cfg = RunConfig.from_dict(replay.cfg.to_dict())
    cfg.hints = hints
    cfg.hint_params = hint_params
    cfg.hint_source = None  # none and oracle are kvbed's own: the plugin's code is not theirs
    cfg.target = None  # the lab's WAFs are the embedded model's (a VM run's WAF is the model's too)
    cfg.replay = dataclasses.replace(cfg.replay, hint_lab=False, classes=replay.n_classes)
    parts = type(replay)(cfg, should_stop=replay.should_stop, trace_checked=True).run()  # the engine's class
    if parts["result"]["incomplete"]:
        return None
    return parts["result"]["jobs"][0]["end_to_end_waf"]


def run_lab(replay: Any, job: dict[str, Any]) -> dict[str, Any]:
    """The lab of a finished single-tier replay (a :class:`kvreplay.replay.engine.Replay` after ``run``)."""
    cfg, rp = replay.cfg, replay.cfg.replay
    policy_cls: type[HintPolicy] = HINTS.get(cfg.hints)
    clock = getattr(cfg.hint_params, "clock", "bytes")
    reader = S.TraceReader(cfg.trace)
    future = scan_trace(reader, rp.tier_code, replay.page_bytes, record_future=True, clock=clock,
                        header_bytes=replay.header_bytes).future
    lifetime = future_lifetimes(future)
    oracle = classes_from_edges(lifetime, lifetime_edges(lifetime, future.weight, replay.n_classes))
    cols = list(dict.fromkeys([*SCAN_COLUMNS, *policy_cls.columns]))
    policy = classes_of(policy_cls, reader.iter_batches(cols), n_classes=replay.n_classes, params=cfg.hint_params,
                        seed=rp.seed, tier=rp.tier_code, future=future, device=replay.policy.device)
    if len(policy) != len(oracle):
        raise RuntimeError(f"hint lab: {len(policy)} policy classes for {len(oracle)} writes")
    lab: dict[str, Any] = {"reference": "oracle", "clock": clock, "n_classes": replay.n_classes,
                           **agreement(policy, oracle, lifetime, future.weight, replay.n_classes)}
    own = job["end_to_end_waf"]
    oracle_params = OracleHints.Params(clock=clock)
    waf_none = own if cfg.hints == "none" else _waf_with(replay, "none", HINTS.get("none").Params())
    waf_oracle = (own if cfg.hints == "oracle" and cfg.hint_params == oracle_params
                  else _waf_with(replay, "oracle", oracle_params))
    lab["waf"] = {"kind": "end_to_end_waf", "none": waf_none, "policy": own, "oracle": waf_oracle,
                  "oracle_cut": None if None in (waf_none, waf_oracle) else waf_none - waf_oracle}
    lab.update(captured(waf_none, own, waf_oracle))
    return lab
