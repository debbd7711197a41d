#!/usr/bin/env python3
"""How predictable is the oracle's class from causal features? (issue 23) - and what a policy on them captures.

For one trace and device setting (a point of kv-hints-fdp: ``--device fdp -p op_ratio=0.07 --fill-ratio 1.0``),
this script:

1. builds the causal feature table of the replayed tier's writes and the oracle's class of each
   (:mod:`kvreplay.hints.predictability`), and prints H(oracle class), I(feature; class) per feature, the
   joint information's lower bound (H - held-out cross-entropy of the best classifier), the classifier's
   held-out accuracy (trained on the first half, tested on the second) against the majority class;
2. replays the trace with ``none``, ``oracle``, ``learned`` (the causal online policy) and the
   **classifier-oracle** (offline: the same classifier trained on perfectly labelled writes, cross-fitted
   halves - an upper bound for any learner on these features) and prints each end-to-end WAF and its
   share of the oracle's cut, (WAF_none - WAF_x) / (WAF_none - WAF_oracle).

Run: ``python scripts/predictability.py TRACE [--op-ratio 0.07] [--fill-ratio 1.0] [-p K=V ...] [--json OUT]``;
``python scripts/predictability.py --rows NAME=OUT.json ...`` prints the table rows of the hints guide from
saved outputs (docs/figures/predictability/).
Needs scikit-learn (``pip install 'kvbed[learn]'``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def waf_of(trace: str, device: str, hints: str, params: list[str]) -> tuple[float, float, dict]:
    from kvreplay.replay.config import build_config
    from kvreplay.replay.engine import Replay

    cfg = build_config(trace, device, hints, params)
    t0 = time.perf_counter()
    parts = Replay(cfg).run()
    job = parts["result"]["jobs"][0]
    return job["end_to_end_waf"], time.perf_counter() - t0, job.get("hint_policy", {})


def markdown_row(path: Path, name: str) -> str:
    """The docs table row (docs/guides/replay-and-hints.md) of a saved ``--json`` output."""
    r = json.loads(Path(path).read_text())
    w = {k: v["end_to_end_waf"] for k, v in r["replays"].items()}
    sh = {k: v["oracle_cut_share"] for k, v in r["replays"].items()}
    cs, cf = r["causal_split"], r["cross_fit"]

    def x(k: str) -> str:
        return f"{w[k]:.4f} ({sh[k]:+.0%})"

    return (f"| {name} | {r['writes']:,} | {r['entropy_bits']:.3f} | {cf['joint_mi_bits_lower_bound']:.3f} | "
            f"{cs['accuracy']:.3f} ({cs['majority_accuracy']:.3f}) | {cf['accuracy']:.3f} "
            f"({cf['within_one_class']:.3f}) | {w['none']:.4f} | {x('learned')} | "
            f"{x('classifier-oracle (offline)')} | {x('regressor-oracle (offline)')} | {w['oracle']:.4f} |")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--rows":  # --rows NAME=saved.json ...: the docs table rows
        for arg in sys.argv[2:]:
            name, path = arg.split("=", 1)
            print(markdown_row(Path(path), name))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--device", default="fdp")
    ap.add_argument("--op-ratio", type=float, default=0.07)
    ap.add_argument("--fill-ratio", type=float, default=1.0)
    ap.add_argument("-p", "--param", action="append", default=[], help="more replay parameters K=V")
    ap.add_argument("--classes", type=int, default=8, help="placement classes (the fdp default: 8 RUHs)")
    ap.add_argument("--no-replay", action="store_true", help="only the analysis, no replays")
    ap.add_argument("--json", type=Path, help="write the figures here")
    a = ap.parse_args()

    from kvbed.core.errors import KvbedError
    from kvreplay.hints.learned import FEATURES
    from kvreplay.hints.predictability import analyse, feature_table

    params = [f"op_ratio={a.op_ratio}", f"fill_ratio={a.fill_ratio}", *a.param]
    try:
        t0 = time.perf_counter()
        table = feature_table(a.trace, n_classes=a.classes)
        res = analyse(table)
    except KvbedError as exc:
        raise SystemExit(f"error: {exc}") from None
    classes = res.pop("classes")
    reg_classes = res.pop("regressor_classes")
    res["analysis_s"] = time.perf_counter() - t0
    cs, cf = res["causal_split"], res["cross_fit"]
    print(f"{a.trace}: {res['writes']:,} tier writes, {res['n_classes']} oracle classes "
          f"(analysis {res['analysis_s']:.0f} s)")
    print(f"H(oracle class) = {res['entropy_bits']:.3f} bits; joint I(features; class) >= "
          f"{cf['joint_mi_bits_lower_bound']:.3f} bits (cross-fitted cross-entropy {cf['cross_entropy_bits']:.3f})")
    print(f"causal split (train first half, test second): accuracy {cs['accuracy']:.3f}, within one class "
          f"{cs['within_one_class']:.3f}; majority class {cs['majority_accuracy']:.3f}")
    print(f"cross-fitted (offline labels, {cf['folds']} folds of {cf['block_writes']}-write blocks): accuracy "
          f"{cf['accuracy']:.3f}, within one {cf['within_one_class']:.3f}; regressor classes accuracy "
          f"{cf['regressor_accuracy']:.3f}, Spearman {cf['regressor_spearman']:.3f}")
    print(f"{'feature':28} {'I(f; class) bits':>16}")
    for f in FEATURES:
        print(f"{f:28} {res['mi_bits'][f]:16.3f}")
    res["replays"] = {}
    if not a.no_replay:
        with tempfile.TemporaryDirectory(prefix="kvbed-predictability-") as tmp:
            files = {}
            for name, c in (("clf", classes), ("reg", reg_classes)):
                files[name] = Path(tmp) / f"{name}.npy"
                np.save(files[name], c)
            given = "kvreplay.hints.predictability:GivenClasses"
            runs = [("none", "none", []), ("oracle", "oracle", []), ("learned", "learned", ["abstain=false"]),  # its own classes: the guard is the study's question
                    ("classifier-oracle (offline)", given, [f"classes_file={files['clf']}"]),
                    ("regressor-oracle (offline)", given, [f"classes_file={files['reg']}"])]
            for label, hints, extra in runs:
                waf, wall, _ = waf_of(a.trace, a.device, hints, params + extra)
                res["replays"][label] = {"end_to_end_waf": waf, "wall_s": wall}
        w = {k: v["end_to_end_waf"] for k, v in res["replays"].items()}
        cut = w["none"] - w["oracle"]
        print(f"\nend-to-end WAF ({a.device}, {' '.join(params)}); share of the oracle's cut {cut:.4f}:")
        for k, v in w.items():
            share = (w["none"] - v) / cut if cut > 0 else float("nan")
            res["replays"][k]["oracle_cut_share"] = share
            print(f"  {k:30} {v:.4f}  {share:+.1%}")
    res.update(trace=str(a.trace), device=a.device, params=params)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
