"""The run and report plots read at a glance (issue 20): every series visible, counts without negative ticks,
latencies never below 0, WAF differences as a change, titles and units; checked on the matplotlib Figures."""

from __future__ import annotations

import copy

import json

import numpy as np
import pytest

from tests.support import fault_traces as T
from tests.support.cli import kvbed, ok
from testbed.plots import (_cdf_steps, _subplots, comparison_figure, contract_outcomes_figure, fault_outcomes_figure,
                           latency_cdf_figure, ruh_bytes_figure, tiers_waf_figure, waf_figure)
from testbed.results import load_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory, lifetimes_trace):
    d = tmp_path_factory.mktemp("plots")
    trace = lifetimes_trace(2000)
    for h in ("none", "oracle"):
        ok(kvbed("replay", trace, "--hints", h, "--fill-ratio", "1.0", "-o", d / h, "-q", "--no-plots"))
    return [load_run(d / h) for h in ("none", "oracle")]


@pytest.fixture(scope="module")
def fault_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("faultplots")
    power = T.write(d / "power.parquet", T.POWER, nbytes=T.POWER_BYTES)
    for c in ("none", "full"):
        ok(kvbed("replay", power, "--device", "conv", "--fault", "media-error@360ms,objects=1/3", "--contract", c,
                 "-o", d / c, "-q", "--no-plots"))
    return [load_run(d / c) for c in ("none", "full")]


CATEGORIES = ("reclaim unit handle", "placement class")  # axes of names, without units


def _says_what_and_units(fig) -> None:
    """A title on every panel (or the figure) and units, in parentheses, on every labelled axis of numbers."""
    sup = fig._suptitle.get_text() if fig._suptitle else ""
    for ax in fig.axes:
        assert ax.get_title() or sup, ax
        for label in (ax.get_xlabel(), ax.get_ylabel()):
            if label and label not in CATEGORIES:
                assert "(" in label and ")" in label, label


def _styles(ax) -> list[tuple]:
    return [(str(line.get_linestyle()), line.get_linewidth()) for line in ax.get_lines()]


def test_a_cdf_equal_to_an_earlier_one_shows_on_top_of_it_and_says_so():
    fig, ax = _subplots((4, 3))
    x, y = np.array([1e6, 2e6, 4e6]), np.array([0.2, 0.7, 1.0])
    _cdf_steps(ax, [("object_read", x, y), ("read", x, y.copy()), ("write", 2 * x, y)])
    a, b, c = ax.get_lines()
    assert [l.get_label() for l in (a, b, c)] == ["object_read", "read (= object_read)", "write"]
    assert b.get_zorder() > a.get_zorder() and b.get_linewidth() < a.get_linewidth()  # on top, thinner: both show
    assert len(set(_styles(ax))) == 3


def test_run_cdf_lines_have_distinct_styles_and_a_0_to_1_axis(runs):
    for run in runs:
        fig = latency_cdf_figure(run)
        ax = fig.axes[0]
        assert len(ax.get_lines()) == 4 and len(set(_styles(ax))) == 4
        assert ax.get_xscale() == "log" and ax.get_ylim()[0] == 0
        assert run.label in ax.get_title() and "latency CDF" in ax.get_title()
        _says_what_and_units(fig)


def _tick_labels(fig, ax):
    fig.canvas.draw()
    return [t.get_text() for t in ax.xaxis.get_majorticklabels() + ax.xaxis.get_minorticklabels() if t.get_text()]


def test_latency_axes_label_their_ticks_as_plain_numbers():
    """Log-axis ticks read 0.01, 1, 100 (ms): plain text, no mathtext (no "$"); on an axis spanning less than a
    decade the minor ticks are labelled too, so it is never left without numbers."""
    fig, ax = _subplots((7, 4))
    _cdf_steps(ax, [("a", np.array([1e4, 1e5, 1e6, 1e7]), np.array([0.25, 0.5, 0.75, 1.0]))])  # 0.01-10 ms
    labels = _tick_labels(fig, ax)
    assert {"0.01", "0.1", "1", "10"} <= set(labels) and not any("$" in t for t in labels)
    fig, ax = _subplots((7, 4))
    _cdf_steps(ax, [("a", np.array([2.2e6, 3e6, 4e6, 5.5e6]), np.array([0.25, 0.5, 0.75, 1.0]))])  # 2.2-5.5 ms
    labels = _tick_labels(fig, ax)
    assert set(labels) & {"3", "4", "5"} and not any("$" in t for t in labels)


def test_every_run_plot_says_what_it_compares_with_units(runs):
    for run in runs:
        for fig in (waf_figure(run), latency_cdf_figure(run), ruh_bytes_figure(run)):
            _says_what_and_units(fig)
    _says_what_and_units(comparison_figure(runs))


def test_report_shows_the_waf_change_against_the_first_run(runs):
    fig = comparison_figure(runs)
    ax = next(a for a in fig.axes if "change" in a.get_ylabel())
    wafs = [r.job["end_to_end_waf"] for r in runs]
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([0.0, 100 * (wafs[1] / wafs[0] - 1)])
    lo, hi = ax.get_ylim()
    assert lo < 0 < hi and hi - lo <= 2 * 1.4 * max(map(abs, heights)) + 1e-9  # the range is the change's
    assert f"{100 * (wafs[1] / wafs[0] - 1):+.1f}%" in " ".join(t.get_text() for t in ax.texts)
    tail = next(a for a in fig.axes if a.get_title() == "tail latency of KV object loads")
    bars = [b.get_height() for b in tail.patches]
    assert max(bars) < 10 * min(bars)  # within a decade: a linear axis from 0, so heights compare as they are
    assert tail.get_yscale() == "linear" and tail.get_ylim() == (0, pytest.approx(1.15 * max(bars)))
    cdf = next(a for a in fig.axes if "CDF" in a.get_title())
    assert len(set(_styles(cdf))) == len(runs)
    assert all(line.get_ydata()[0] == 0 for line in cdf.get_lines())  # each CDF rises from 0, not mid-air


def test_report_tails_over_decades_on_a_log_axis_from_a_decade_below(runs):
    slow = copy.deepcopy(runs)
    pct = slow[1].job["object_read"]["lat_ns"]["percentile"]
    for k in ("99.000000", "99.900000"):
        pct[k] *= 1000  # three decades above the other run's
    fig = comparison_figure(slow)
    tail = next(a for a in fig.axes if a.get_title() == "tail latency of KV object loads")
    low = min(b.get_height() for b in tail.patches)
    assert tail.get_yscale() == "log" and tail.get_ylim()[0] == 10 ** np.floor(np.log10(low))
    fig.canvas.draw()
    ticks = [t.get_text() for t in tail.yaxis.get_majorticklabels() + tail.yaxis.get_minorticklabels()]
    assert any(ticks) and not any("$" in t for t in ticks)  # plain numbers, as the run plots


def test_runs_that_wrote_different_bytes_compare_media_bytes_not_waf(runs):
    """A recovery contract's headers add to the bytes WAF divides by: a contract that writes 3% more can show a
    lower WAF. The report then compares media bytes, and says so."""
    other = copy.deepcopy(runs)
    job = other[1].job
    job["user_bytes_written"] = runs[1].job["user_bytes_written"] * 103 // 100
    job["media_bytes_written"] = runs[0].job["media_bytes_written"] * 103 // 100
    fig = comparison_figure(other)
    ax = next(a for a in fig.axes if "change" in a.get_ylabel())
    assert ax.get_ylabel().startswith("media bytes written change") and "not WAF" in ax.get_title()
    assert [p.get_height() for p in ax.patches] == pytest.approx([0.0, 3.0], abs=1e-6)


def test_the_waf_plot_says_how_long_its_windows_are(runs):
    from testbed.humanize import fmt_ns

    for run in runs:
        labels = [t.get_text() for t in waf_figure(run).axes[0].get_legend().get_texts()]
        assert f"device WAF per window of {fmt_ns(run.result['window_ns'], sig3=True)}" in labels


def test_a_report_names_a_waf_line_hidden_under_an_equal_one(runs):
    """Two runs with the same WAF curve (here the same run twice): the second line lies under the first, so the
    legend says "(= first)", as the latency CDF's legend does."""
    fig = comparison_figure([runs[0], runs[0], runs[1]])
    ax = next(a for a in fig.axes if a.get_title().startswith("end-to-end WAF (cumulative)"))
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(labels) == 3 and labels[1] == f"{labels[0]} (= {runs[0].label})" and "(=" not in labels[2]


def test_fault_counts_have_no_negative_ticks_and_every_outcome_is_written(fault_runs):
    for run in fault_runs:
        fig = fault_outcomes_figure(run)
        bars, series = fig.axes
        assert series.get_yscale() == "symlog" and series.get_ylim()[0] == 0
        ticks = [t for t in series.get_yticks() if series.get_ylim()[0] <= t <= series.get_ylim()[1]]
        assert ticks and min(ticks) >= 0
        assert len(set(_styles(series)) - {("--", 0.8)}) == 4  # four outcomes, each its own style
        inj = run.result["faults"]["injected"][0]["outcomes"]
        text = " ".join(t.get_text() for t in bars.texts)
        assert f"wrong {inj['wrong']['objects']:,}" in text and f"missing {inj['missing']['objects']:,}" in text
        _says_what_and_units(fig)
    fig = contract_outcomes_figure(fault_runs)
    assert fig.axes[0].get_ylim()[0] == 0 and fig.axes[0].get_title()


def test_multitier_waf_lines_stay_visible(tmp_path, synth_trace):
    ok(kvbed("replay", synth_trace(60), "--tiers", "cpu,ssd", "-o", tmp_path / "t", "-q", "--no-plots"))
    run = load_run(tmp_path / "t")
    fig = tiers_waf_figure(run)
    ax = fig.axes[0]
    assert len(ax.get_lines()) == 2 and len(set(_styles(ax))) == 2
    _says_what_and_units(fig)
    assert json.loads((tmp_path / "t" / "result.json").read_text())["jobs"][0]["tier"] == "cpu"
