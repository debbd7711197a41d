"""What a study says it has: seeds that gave one value are one sample, not an interval (a deterministic policy
on an imported trace); 2 seeds give intervals too wide to say much; a sum is called a sum. Checked on known
tables whose means, intervals and counts are worked by hand."""

from __future__ import annotations

import math

import pandas as pd

from testbed.study.labreport import lab_findings
from testbed.study.findings import findings
from testbed.study.report import interval_note, md_table, pivot_markdown
from testbed.study.table import summarize

OP = "replay.param.op_ratio"
DOC = {"axes": {"replay.hints": [], OP: []}, "zips": [], "traces": {"a": {"label": "t"}}}


def _table(wafs: dict[tuple[float, str], tuple[float, ...]]) -> pd.DataFrame:
    rows = []
    for (op, policy), values in wafs.items():
        for seed, w in enumerate(values):
            rows.append({"status": "ok", "device": "fdp", "policy": policy, "seed": seed, OP: op,
                         "end_to_end_waf": w, "gc_stall_total_ns": 3.6e12, "saturated": 0,
                         "run_dir": f"runs/{op}-{policy}-{seed}"})
    return pd.DataFrame(rows)


# Mooncake-like: none and oracle the same in every seed; noisy-oracle varies at 0.07 only
DETERMINISTIC = {
    (0.07, "none"): (1.1153, 1.1153, 1.1153), (0.07, "oracle"): (1.05, 1.05, 1.05),
    (0.07, "noisy"): (1.08, 1.09, 1.10),
    (0.28, "none"): (1.02, 1.02, 1.02), (0.28, "oracle"): (1.01, 1.01, 1.01), (0.28, "noisy"): (1.015,) * 3,
}


def test_identical_seeds_are_one_sample_with_no_interval():
    df = _table(DETERMINISTIC)
    s = summarize(df, DOC, ["end_to_end_waf"]).set_index([OP, "policy"])
    none = s.loc[(0.07, "none")]
    assert none["n"] == 3 and none["end_to_end_waf_distinct"] == 1
    assert math.isnan(none["end_to_end_waf_ci95"])  # was 0.0: a zero-width "interval"
    noisy = s.loc[(0.07, "noisy")]
    assert noisy["end_to_end_waf_distinct"] == 3
    # sd 0.01, t(2 dof) 4.303: 4.303 * 0.01 / sqrt(3) = 0.02484
    assert abs(noisy["end_to_end_waf_ci95"] - 4.303 * 0.01 / math.sqrt(3)) < 1e-9
    summary = s.reset_index()
    table = md_table(summary, [OP, "policy"], ["end_to_end_waf"])
    assert "| 0.07 | none | 3 | 1.1153 (identical over 3 seeds) |" in table
    assert "| 0.07 | noisy | 3 | 1.0900 ± 0.0248 |" in table
    assert "± 0.0000" not in table
    piv = pivot_markdown(summary, DOC)
    assert "1.1153 (identical over 3 seeds)" in piv and "± 0.0000" not in piv
    assert "identical over N seeds" in interval_note(summary, ["end_to_end_waf"])


def test_findings_do_not_count_identical_runs_as_beyond_the_intervals():
    got = findings(_table(DETERMINISTIC), DOC)
    oracle = next(s for s in got if s.startswith("fdp, oracle "))
    # both settings: oracle and none the same in every seed: no interval on either side, nothing "beyond"
    assert "beyond" not in oracle and "does not vary with the seed" in oracle, oracle
    noisy = next(s for s in got if s.startswith("fdp, noisy "))
    # 0.07: |1.09 - 1.1153| = 0.0253 > 0.0248 (none exact): beyond; 0.28: both identical over the seeds
    assert noisy.endswith("1 of 1 beyond the 95% intervals; at 1 more setting(s) it and none gave one value in every "
                          "seed: there the result does not vary with the seed, no interval."), noisy


def test_every_setting_identical_says_the_seed_does_not_matter():
    same = {k: v for k, v in DETERMINISTIC.items() if k[1] != "noisy"}
    head = next(s for s in findings(_table(same), DOC) if s.startswith("On fdp, "))
    # (1.05 / 1.1153 - 1 + 1.01 / 1.02 - 1) / 2 = (-5.85% - 0.98%) / 2 = -3.4%
    assert head.startswith("On fdp, oracle hints change end-to-end WAF the most against none (-3.4% on average")
    assert "does not vary with the seed, so there is no interval to exceed" in head
    assert "beyond" not in " ".join(findings(_table(same), DOC))


def test_no_change_anywhere_is_said_once_identical_settings_included():
    # 0.07 varies with the seed and oracle stays within none's interval; 0.28 gives none's value in every seed
    wafs = {(0.07, "none"): (1.10, 1.20, 1.15), (0.07, "oracle"): (1.11, 1.19, 1.16),
            (0.28, "none"): (1.02,) * 3, (0.28, "oracle"): (1.02,) * 3}
    head = [s for s in findings(_table(wafs), DOC) if "fdp" in s]
    # 0.07: 1.1533 / 1.15 - 1 = +0.29%, 0.28: 0%: +0.14% on average
    assert head == ["On fdp, no hint policy changes end-to-end WAF beyond the 95% intervals against none (oracle "
                    "+0.14% on average over the settings); 1 of the 2 comparisons gave none's value in every seed."]


def test_two_seeds_get_a_warning_about_their_intervals():
    two = {(0.07, "none"): (1.10, 1.20), (0.07, "oracle"): (1.00, 1.05)}
    df = _table(two)
    note = interval_note(summarize(df, DOC, ["end_to_end_waf"]))
    assert "2 seeds: an interval from 2 samples is the mean ± 12.7 standard errors" in note, note
    got = findings(df, DOC)
    assert got[-1].startswith("2 of the 2 means of end-to-end WAF have an interval from 2 seeds"), got
    three = {(0.07, "none"): (1.10, 1.20, 1.15), (0.07, "oracle"): (1.00, 1.05, 1.02)}
    assert not any("2 seeds" in s for s in findings(_table(three), DOC))
    assert "2 seeds" not in interval_note(summarize(_table(three), DOC, ["end_to_end_waf"]))


def test_gc_stall_is_headed_as_a_sum_over_stalls():
    summary = summarize(_table(DETERMINISTIC), DOC, ["gc_stall_total_ns"])
    table = md_table(summary, [OP, "policy"], ["gc_stall_total_ns"])
    assert table.splitlines()[0] == "| op_ratio | policy | n | gc_stall_total_ns (sum over stalls) |"
    assert "1.00 h (identical over 3 seeds)" in table


def test_a_policy_that_read_the_future_is_not_practical_whatever_its_name():
    rows = []
    for seed in (0, 1):
        for policy, waf, offline in (("none", 1.2, False), ("oracle", 1.0, True), ("my-plugin", 1.02, True),
                                     ("type", 1.1, False)):
            rows.append({"status": "ok", "device": "fdp", "policy": policy, "seed": seed, OP: 0.07,
                         "end_to_end_waf": waf, "hint_offline": offline, "run_dir": f"runs/{policy}-{seed}",
                         "oracle_waf_cut_captured_ratio": (1.2 - waf) / 0.2})
    got = lab_findings(pd.DataFrame(rows), [OP])
    # my-plugin captures 90% but read the future; type captures (1.2 - 1.1) / 0.2 = 50%
    assert got[0].startswith("fdp: the best practical hint policy, type, captures 50.0% "), got[0]
    assert any(s.startswith("fdp, my-plugin captures 90.0%") for s in got)
