"""The hint lab (``kvbed replay --hint-lab``, issue 23): its figures against hand-computed values and analytic
formulas, and on a trace where the oracle cuts WAF (two lifetimes at fill 1.0: none 1.41, oracle 1.00) the
controls that pin it down: the oracle judged against itself scores 1 on everything, no hints capture 0, and the
noisy oracle's accuracy is its 1 - error_rate."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvreplay.hints.lab import MIN_ORACLE_CUT, agreement, captured, spearman
from tests.support.cli import kvbed, ok


def _spearman_no_ties(a, b) -> float:
    """The textbook formula for distinct ranks: 1 - 6 sum d^2 / (n (n^2 - 1))."""
    ra, rb = np.argsort(np.argsort(a)) + 1, np.argsort(np.argsort(b)) + 1
    n = len(a)
    return 1 - 6 * float(((ra - rb) ** 2).sum()) / (n * (n * n - 1))


def test_spearman_is_the_textbook_formula_and_handles_ties_and_constants():
    rng = np.random.default_rng(3)
    a, b = rng.permutation(50).astype(float), rng.permutation(50).astype(float)
    assert spearman(a, b) == pytest.approx(_spearman_no_ties(a, b), abs=1e-12)
    assert spearman(np.array([0, 0, 1, 1]), np.array([1.0, 2.0, 3.0, np.inf])) == pytest.approx(2 / np.sqrt(5))
    assert spearman(np.zeros(10), np.arange(10.0)) is None  # one class: no order predicted


def test_agreement_hand_case():
    policy = np.array([0, 1, 1, 0], np.int16)
    oracle = np.array([0, 1, 0, 0], np.int16)
    life = np.array([1.0, 9.0, 2.0, 3.0])
    weight = np.array([1, 1, 2, 4], np.int32)
    a = agreement(policy, oracle, life, weight, 2)
    assert a["writes"] == 4 and a["accuracy"] == 0.75
    assert a["accuracy_bytes"] == pytest.approx(6 / 8)  # the weight-2 write is the one misplaced
    assert a["confusion_writes"] == [[2, 1], [0, 1]]
    assert a["bytes_share_per_class"] == {"policy": [5 / 8, 3 / 8], "oracle": [7 / 8, 1 / 8]}
    # the one-class reference: oracle class 0 holds 3 of the 4 writes and 7 of the 8 bytes
    assert a["accuracy_one_class"] == 0.75 and a["accuracy_bytes_one_class"] == pytest.approx(7 / 8)


def test_one_class_reference_is_what_every_write_in_class_0_scores_and_its_bytes_majority_may_differ():
    oracle = np.array([0, 0, 0, 1], np.int16)
    weight = np.array([1, 1, 1, 5], np.int32)  # class 0 holds 3 of 4 writes, class 1 holds 5 of 8 bytes
    a = agreement(np.zeros(4, np.int16), oracle, np.array([1.0, 2.0, 3.0, 9.0]), weight, 8)
    assert a["accuracy"] == a["accuracy_one_class"] == 0.75  # all class 0 = the write-majority class
    assert a["accuracy_bytes"] == pytest.approx(3 / 8)
    assert a["accuracy_bytes_one_class"] == pytest.approx(5 / 8)  # the byte majority is class 1, not class 0
    assert a["accuracy_bytes"] < a["accuracy_bytes_one_class"]
    # a perfect policy beats it; the reference is a property of the oracle alone
    b = agreement(oracle.copy(), oracle, np.array([1.0, 2.0, 3.0, 9.0]), weight, 8)
    assert b["accuracy"] == 1.0 and b["accuracy_one_class"] == 0.75 and b["accuracy_bytes_one_class"] == 5 / 8
    empty = agreement(np.zeros(0, np.int16), np.zeros(0, np.int16), np.zeros(0), np.zeros(0, np.int32), 8)
    assert empty["accuracy"] is None and empty["accuracy_one_class"] is None
    assert empty["accuracy_bytes_one_class"] is None


def test_captured_names_its_denominator_and_is_null_when_the_oracle_cuts_nothing():
    c = captured(1.2, 1.1, 1.0)
    assert c["oracle_waf_cut_captured_ratio"] == pytest.approx(0.5) and "WAF_none - WAF_oracle" in c["denominator"]
    assert captured(1.2, 1.3, 1.0)["oracle_waf_cut_captured_ratio"] == pytest.approx(-0.5)
    nothing = captured(1.0, 1.0, 1.0 - MIN_ORACLE_CUT / 2)
    assert nothing["oracle_waf_cut_captured_ratio"] is None and "cuts nothing" in nothing["undefined_because"]


@pytest.fixture(scope="module")
def labs(lifetimes_trace, tmp_path_factory):
    trace = lifetimes_trace(3000)
    out = tmp_path_factory.mktemp("lab")
    got = {}
    for hints, extra in (("oracle", []), ("none", []), ("noisy-oracle", ["--param", "error_rate=0.2"])):
        ok(kvbed("replay", trace, "--hints", hints, *extra, "--param", "fill_ratio=1.0", "--hint-lab", "-q",
                 "--no-plots", "-o", out / hints))
        got[hints] = json.loads((out / hints / "result.json").read_text())["jobs"][0]
    return got


def test_the_oracle_against_itself_scores_one(labs):
    lab = labs["oracle"]["hint_policy"]["lab"]
    assert lab["accuracy"] == 1.0 and lab["accuracy_bytes"] == 1.0
    assert lab["spearman"] > 0.9  # classes are a monotone bucketing of the lifetime: rho < 1 only by ties
    assert lab["waf"]["none"] == pytest.approx(1.41, abs=0.01) and lab["waf"]["oracle"] == pytest.approx(1.0, abs=1e-3)
    assert lab["waf"]["policy"] == labs["oracle"]["end_to_end_waf"] == lab["waf"]["oracle"]
    assert lab["oracle_waf_cut_captured_ratio"] == 1.0
    conf = np.array(lab["confusion_writes"])
    assert conf.sum() == lab["writes"] and (conf == np.diag(np.diag(conf))).all()


def test_no_hints_capture_nothing_and_their_accuracy_is_the_oracle_class_0_share(labs):
    lab = labs["none"]["hint_policy"]["lab"]
    conf = np.array(lab["confusion_writes"])
    assert (conf[:, 1:] == 0).all()
    assert lab["accuracy"] == pytest.approx(conf[0, 0] / conf.sum())
    # all class 0 scores the oracle's class-0 share, at most the reference (the largest oracle class's share)
    assert lab["accuracy_one_class"] == pytest.approx(conf.sum(axis=1).max() / conf.sum())
    assert lab["accuracy"] <= lab["accuracy_one_class"] < 1
    assert lab["accuracy_bytes_one_class"] == pytest.approx(max(lab["bytes_share_per_class"]["oracle"]))
    assert lab["accuracy_bytes"] == pytest.approx(lab["bytes_share_per_class"]["oracle"][0])
    assert lab["spearman"] is None
    assert lab["oracle_waf_cut_captured_ratio"] == 0.0
    assert lab["waf"]["none"] == labs["oracle"]["hint_policy"]["lab"]["waf"]["none"]  # the same device


def test_the_noisy_oracle_is_as_accurate_as_its_error_rate_says(labs):
    lab = labs["noisy-oracle"]["hint_policy"]["lab"]
    n = lab["writes"]
    assert abs(lab["accuracy"] - 0.8) < 4 * np.sqrt(0.16 / n)  # binomial: within 4 standard deviations
    assert lab["accuracy"] == 1 - labs["noisy-oracle"]["hint_policy"]["writes_misclassified"] / n
    r = lab["oracle_waf_cut_captured_ratio"]
    w = lab["waf"]
    assert r == pytest.approx((w["none"] - w["policy"]) / (w["none"] - w["oracle"]))


def test_report_table_and_plot_show_the_lab(labs, tmp_path_factory):
    from testbed.plots import hint_lab_figure
    from testbed.results import load_run

    out = next(iter(tmp_path_factory.getbasetemp().glob("lab*")))
    res = ok(kvbed("report", out / "none", out / "oracle", out / "noisy-oracle", "--no-plot"))
    text = " ".join(res.output.split())
    assert "hint lab" in text and "(WAF none - WAF hints) / (WAF none - WAF oracle)" in text
    oracle_row = [line for line in res.output.splitlines() if line.startswith("│ oracle ")][-1]  # the lab table
    assert "100.0%" in oracle_row and "100%" in oracle_row  # accuracy, and all of its own cut captured
    one = labs["none"]["hint_policy"]["lab"]["accuracy_one_class"]
    none_cells = [c.strip() for c in [ln for ln in res.output.splitlines() if ln.startswith("│ none ")][-1].split("│")]
    assert none_cells[4] == f"{100 * one:.1f}%" and "one class: the accuracy of giving every write" in text
    fig = hint_lab_figure(load_run(out / "noisy-oracle"))
    a0, a1 = fig.axes[:2]
    assert "accuracy" in a0.get_title() and "(0-1)" in fig.axes[2].get_ylabel()
    one = labs["noisy-oracle"]["hint_policy"]["lab"]["accuracy_one_class"]
    assert f"the oracle's largest class: {100 * one:.1f}%" in a0.get_title()
    assert "every write abstained on)" in a0.get_xlabel()  # noisy-oracle has no guard: no share to give
    guarded = load_run(out / "noisy-oracle")
    guarded.job["hint_policy"]["abstained_writes_share"] = 0.25  # as a guarded policy's describe() reports it
    assert "every write abstained on: 25.0% of writes)" in hint_lab_figure(guarded).axes[0].get_xlabel()
    guarded.job["hint_policy"]["no_opinion_writes_share"] = 0.125  # of them, those it had no opinion on
    assert "on: 25.0% of writes, 12.5% with no opinion)" in hint_lab_figure(guarded).axes[0].get_xlabel()
    del guarded.job["hint_policy"]["no_opinion_writes_share"]
    del guarded.job["hint_policy"]["lab"]["accuracy_one_class"]  # a result from before the reference: the matrix's
    conf = np.array(labs["noisy-oracle"]["hint_policy"]["lab"]["confusion_writes"])
    assert f"{100 * conf.sum(axis=1).max() / conf.sum():.1f}%)" in hint_lab_figure(guarded).axes[0].get_title()
    assert "captured" in a1.get_title() and "media / user bytes" in a1.get_ylabel()
    assert [round(p.get_height(), 3) for p in a1.patches] == [round(v, 3) for v in (
        labs["noisy-oracle"]["hint_policy"]["lab"]["waf"][k] for k in ("none", "policy", "oracle"))]
