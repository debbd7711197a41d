"""A hint-lab study's findings and plot: the share of the oracle's WAF cut per policy (issue 23), checked on a
known table whose shares and WAF changes are counted by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from testbed.study.labreport import lab_findings, oracle_share_figure, share_table
from testbed.study.findings import findings
from tests.support.cli import kvbed, ok
from tests.support.paths import ROOT

OP = "replay.param.op_ratio"
COLS = [OP]
DOC = {"axes": {"replay.hints": [], OP: []}, "zips": [], "traces": {"a": {"label": "t"}}}
NOISY = "noisy-oracle error_rate=0.1"
# (op_ratio, policy) -> end-to-end WAF per seed; none and oracle are the same in both seeds
WAF = {
    (0.07, "none"): (1.20, 1.20), (0.07, "oracle"): (1.00, 1.00),
    (0.07, "type"): (1.10, 1.14), (0.07, "predicted"): (1.22, 1.22), (0.07, NOISY): (1.02, 1.02),
    (0.28, "none"): (1.10, 1.10), (0.28, "oracle"): (1.00, 1.00),
    (0.28, "type"): (1.02, 1.02), (0.28, "predicted"): (1.099, 1.099), (0.28, NOISY): (1.01, 1.01),
}


def _table(lab: bool = True) -> pd.DataFrame:
    rows = []
    for (op, policy), wafs in WAF.items():
        none, oracle = WAF[(op, "none")][0], WAF[(op, "oracle")][0]
        for seed, w in enumerate(wafs):
            rows.append({"status": "ok", "device": "fdp", "policy": policy, "seed": seed, OP: op,
                         "end_to_end_waf": w, "saturated": 0, "run_dir": f"runs/{op}-{policy}-{seed}",
                         "oracle_waf_cut_captured_ratio": (none - w) / (none - oracle) if lab else None})
    return pd.DataFrame(rows)


def test_the_headline_is_the_best_practical_policys_share():
    got = lab_findings(_table(), COLS)
    # type: 0.07 -> (0.5 + 0.3) / 2 = 40%, 0.28 -> 80%: 60% on average; the noisy oracle (90%, 90%) is no
    # practical policy, so it is not the headline
    assert got[0] == ("fdp: the best practical hint policy, type, captures 60.0% of the oracle's end-to-end WAF cut "
                      "on average over 2 setting(s) (share of the oracle's WAF cut captured = (WAF_none - WAF_policy) "
                      "/ (WAF_none - WAF_oracle), end-to-end WAF, same device, setting and seed; the mean over 2 "
                      "seeds per setting; 5 of the 6 shares (policy x setting) the same in every seed).")


def test_each_policy_has_its_share_spread_and_worst_change_vs_none():
    got = lab_findings(_table(), COLS)[1:]
    assert got[0].startswith(f"fdp, {NOISY} captures 90.0% of the oracle's cut on average over 2 of 2 setting(s)")
    # type: worst change at 0.07, 1.12 / 1.20 - 1 = -6.7% (0.28: 1.02 / 1.10 - 1 = -7.3%)
    assert got[1] == ("fdp, type captures 60.0% of the oracle's cut on average over 2 of 2 setting(s) (least 40.0% "
                      "at op_ratio=0.07, most 80.0% at op_ratio=0.28); worst end-to-end WAF change vs none -6.7% at "
                      "op_ratio=0.07 (1.2000 -> 1.1200): never more than 1% worse than none.")
    # predicted: 0.07 -> -0.02 / 0.2 = -10%, 0.28 -> 0.001 / 0.1 = 1%: -4.5%; 1.22 / 1.20 - 1 = +1.7% is worse
    assert got[2] == ("fdp, predicted captures -4.5% of the oracle's cut on average over 2 of 2 setting(s) (least "
                      "-10.0% at op_ratio=0.07, most 1.0% at op_ratio=0.28); worst end-to-end WAF change vs none "
                      "+1.7% at op_ratio=0.07 (1.2000 -> 1.2200): more than 1% worse than none.")
    assert len(got) == 3  # none and oracle are the references: no share of their own


def test_the_share_table_has_a_row_per_policy():
    lines = share_table(_table(), COLS).splitlines()
    assert len(lines) == 2 + 3
    assert lines[3] == ("| fdp | type | 2 | 60.0% | 40.0% (op_ratio=0.07) | 80.0% (op_ratio=0.28) | "
                        "-6.7% (op_ratio=0.07) |")


def test_the_study_findings_include_them_and_a_study_without_the_lab_has_none():
    df = _table()
    got = findings(df, DOC)
    assert got[:4] == lab_findings(df, COLS)  # the headline of a hint-lab study comes first
    assert got[4].startswith("On fdp, ")  # then the WAF changes against none
    plain = _table(lab=False)
    assert lab_findings(plain, COLS) == [] and share_table(plain, COLS) == ""
    assert oracle_share_figure(plain, COLS) is None
    assert lab_findings(plain.drop(columns=["oracle_waf_cut_captured_ratio"]), COLS) == []


def test_the_plot_has_a_bar_per_policy_and_setting_at_the_mean_share():
    fig = oracle_share_figure(_table(), COLS)
    ax = fig.axes[0]
    # bars: type at 0.07, 0.28, then predicted, then the noisy oracle (table order), none and oracle as lines
    assert [p.get_height() for p in ax.patches] == pytest.approx([40, 80, -10, 1, 90, 90])
    assert sorted(round(y, 6) for line in ax.get_lines() if len(line.get_ydata()) == 2
                  and line.get_ydata()[0] == line.get_ydata()[1] for y in line.get_ydata()[:1]) == [0, 100]
    bar_labels = [t for t in ax.texts if "=" not in t.get_text()]
    assert sorted(t.get_text() for t in bar_labels) == sorted(["40%", "80%", "-10%", "1%", "90%", "90%"])
    # each label beyond its CI bar: type at 0.07 (shares 50%, 30%) has CI t(1) * 14.14 / sqrt(2) = 127.06
    assert next(t for t in bar_labels if t.get_text() == "40%").xy[1] == pytest.approx(40 + 12.706 * 10, abs=0.01)
    assert next(t for t in bar_labels if t.get_text() == "90%").xy[1] == pytest.approx(90)  # no spread, no CI
    assert sorted(t.get_text() for t in ax.texts if "=" in t.get_text()) == ["none = 0%", "oracle = 100%"]
    lo, hi = ax.get_ylim()
    assert lo < -10 and hi > 100  # the 0 and 100% lines and every bar in view
    assert "share of the oracle" in ax.get_ylabel() and "(%)" in ax.get_ylabel()
    assert "WAF_none - WAF_policy" in fig._suptitle.get_text()
    # under each setting, the cut the shares divide: 1.20 -> 1.00 and 1.10 -> 1.00
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["op_ratio=0.07\noracle's cut -16.7%\n(WAF 1.200 -> 1.000)",
                     "op_ratio=0.28\noracle's cut -9.1%\n(WAF 1.100 -> 1.000)"]


def test_settings_over_traces_get_the_best_practical_policy_per_trace():
    df = _table()
    df["trace"] = df[OP].map({0.07: "mooncake", 0.28: "synth"})
    got = lab_findings(df, [OP, "trace"])
    # the noisy oracle (90% on both) is no practical policy; type: 40% on mooncake, 80% on synth
    assert got[1] == ("fdp, the best practical hint policy by trace (share of the oracle's cut, mean over the "
                      "trace's settings): mooncake type 40.0% (1 setting(s)); synth type 80.0% (1 setting(s)).")
    assert "by trace" not in " ".join(lab_findings(_table(), COLS))  # one trace: no such sentence


def test_hint_accuracy_is_shown_with_its_one_class_reference():
    from testbed.study.table import metrics_of, shown_metrics

    assert shown_metrics(["end_to_end_waf", "hint_accuracy", "hint_spearman"]) == [
        "end_to_end_waf", "hint_accuracy", "hint_accuracy_one_class", "hint_spearman"]
    assert shown_metrics(["hint_accuracy_one_class", "hint_accuracy"]) == ["hint_accuracy_one_class", "hint_accuracy"]
    assert shown_metrics(["waf"]) == ["waf"]
    m = metrics_of({"hint_policy": {"lab": {"accuracy": 0.122, "accuracy_one_class": 0.125}}})
    assert (m["hint_accuracy"], m["hint_accuracy_one_class"]) == (0.122, 0.125)
    assert metrics_of({})["hint_accuracy_one_class"] is None


def test_the_reduced_study_reports_the_shares_end_to_end(tmp_path):
    """studies/reduced/practical-hints.toml: every point runs the lab; none's share is 0 and the oracle's 1 by
    definition, and the report leads with the best practical policy's share and draws the plot."""
    out = tmp_path / "ph"
    ok(kvbed("study", "run", ROOT / "studies" / "reduced" / "practical-hints.toml", "-o", out, "-j", "1", "-q"))
    df = pd.read_csv(out / "table.csv")
    share = dict(zip(df["policy"], df["oracle_waf_cut_captured_ratio"]))
    assert share["none"] == 0 and share["oracle"] == pytest.approx(1)
    for p in ("type", "predicted"):  # the lab's definition, from the grid's own none and oracle points
        waf = dict(zip(df["policy"], df["end_to_end_waf"]))
        assert share[p] == pytest.approx((waf["none"] - waf[p]) / (waf["none"] - waf["oracle"]), abs=1e-9)
    found = (out / "report.md").read_text().split("## Findings\n\n- ")[1]
    assert found.startswith("fdp: the best practical hint policy, ")
    # hint_accuracy (listed) comes with its one-class reference (not listed) beside it, in the summary and report
    acc = dict(zip(df["policy"], df["hint_accuracy"]))
    one = dict(zip(df["policy"], df["hint_accuracy_one_class"]))
    assert len(set(one.values())) == 1 and 0 < one["none"] < 1  # a property of the trace and the oracle alone
    assert acc["none"] <= one["none"] and acc["oracle"] == 1
    assert "| hint_accuracy | hint_accuracy_one_class | hint_spearman |" in (out / "report.md").read_text()
    assert "hint_accuracy_one_class_mean" in pd.read_csv(out / "summary.csv").columns
    assert (out / "plots" / "oracle_share_by_hints.png").stat().st_size > 0
