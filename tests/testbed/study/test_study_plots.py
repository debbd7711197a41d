"""A study's plots read at a glance (issue 20): a WAF difference of 2% is visible, sums and latencies are
never drawn below 0, per-RUH bytes per setting; checked on the matplotlib Figures of known tables."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from testbed.study.plots import bars_figure, lines_figure, per_ruh_figure

DOC = {"axes": {"replay.hints": [], "replay.param.op_ratio": []}, "zips": [], "traces": {"a": {"label": "t"}}}
OPS = (0.07, 0.28)


def _table(policies=("none", "oracle")) -> pd.DataFrame:
    """2 seeds; oracle 2% above none at op 0.07, equal at 0.28; GC stall and load p99 with wide spreads."""
    rows = []
    for seed in (0, 1):
        for op in OPS:
            for pol in policies:
                waf = (1.00 if op == 0.28 else 1.02 if pol == "oracle" else 1.00) + 0.001 * seed
                rows.append({"status": "ok", "device": "fdp", "policy": pol, "seed": seed, "replay.param.op_ratio": op,
                             "end_to_end_waf": waf, "gc_stall_ns": [1e9, 30e9][seed] if op == 0.07 else 0.0,
                             "load_p99_ns": [100e6, 5000e6][seed] / (1 + op), "saturated": 0,
                             "run_dir": f"runs/{pol}-{op}-{seed}"})
    return pd.DataFrame(rows)


def _segments_y(ax) -> list[float]:
    """The y of every error bar end (LineCollections of errorbar)."""
    ys = []
    for c in ax.collections:
        for seg in c.get_segments():
            ys += [float(p[1]) for p in seg]
    return ys


def test_waf_by_hints_shows_the_change_against_none():
    fig = bars_figure(_table(), DOC, "end_to_end_waf", "end-to-end WAF", relative_to="none")
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]  # none at 0.07, 0.28; then oracle at 0.07, 0.28
    assert heights == pytest.approx([0.0, 0.0, 100 * (1.0205 / 1.0005 - 1), 0.0])
    lo, hi = ax.get_ylim()
    assert lo < 0 < hi and hi - lo < 50  # percent: 2% fills a visible share of the axis, not 2% of 0..1.02
    assert max(abs(lo), abs(hi)) < 25 * max(heights)
    texts = " ".join(t.get_text() for t in ax.texts)
    assert "+2.0%" in texts and "change vs none" in ax.get_ylabel()
    assert "none: 1.000" in " ".join(t.get_text() for t in ax.get_xticklabels())  # the baseline, as a figure


def test_without_none_the_waf_axis_is_zoomed_to_the_values():
    fig = bars_figure(_table(("oracle", "hotness")), DOC, "end_to_end_waf", "end-to-end WAF", relative_to="none")
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert lo > 0.9 and hi < 1.1  # not from 0
    assert all(p.get_y() == pytest.approx(lo) for p in ax.patches)
    assert "1.020" in " ".join(t.get_text() for t in ax.texts) and "zoomed" in ax.get_ylabel()


def test_gc_stall_bars_and_their_intervals_stay_at_or_above_0():
    fig = bars_figure(_table(), DOC, "gc_stall_ns", "foreground GC stall,\nsum over stalls (s)", 1e-9)
    ax = fig.axes[0]
    assert ax.get_ylim()[0] == 0
    ys = _segments_y(ax)
    assert ys and min(ys) >= 0  # mean 15.5 s, CI over 2 seeds +-184 s: clipped at 0


def test_latency_panels_are_log_and_never_below_0():
    fig = lines_figure(_table(), DOC, "replay.param.op_ratio")
    waf, lat = fig.axes[0], fig.axes[1]
    assert lat.get_yscale() == "log" and lat.get_ylim()[0] > 0
    ys = _segments_y(lat)
    assert ys and min(ys) >= lat.get_ylim()[0] * (1 - 1e-9)
    assert "(ms" in lat.get_ylabel() and "op_ratio" in fig._suptitle.get_text()
    assert lat.get_xlabel() == "op_ratio (fraction)"
    policies = [line for line in waf.get_lines() if not line.get_label().startswith("_")]  # not the CI caps
    assert len({(str(line.get_linestyle()), line.get_marker()) for line in policies}) == 2  # none, oracle differ


def test_per_ruh_bytes_per_setting_in_gib(tmp_path):
    df = _table()
    per = {"none": [40, 0, 0, 2], "oracle": [10, 20, 12, 1]}  # GiB per RUH (last: the shared GC destination)
    for _, r in df.iterrows():
        d = tmp_path / r["run_dir"]
        d.mkdir(parents=True)
        scale = 1 + r["seed"]  # seed 1 writes twice as much: the bars are the mean (1.5 x)
        ruhs = [{"ruh": str(k) if k < 3 else "gc-shared", "host_bytes_written": int(g * scale * 2**30)}
                for k, g in enumerate(per[r["policy"]])]
        (d / "result.json").write_text(json.dumps({"jobs": [{"per_ruh": ruhs}]}))
    fig = per_ruh_figure(tmp_path, df, ["replay.param.op_ratio"])
    assert len(fig.axes) == len(OPS)  # one panel per setting, not the first setting only
    for ax, op in zip(fig.axes, OPS):
        assert f"op_ratio={op}" in ax.get_title() and "GiB" in ax.get_ylabel()
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2", "gc-shared"]
        heights = [p.get_height() for p in ax.patches]
        assert heights == pytest.approx([1.5 * g for g in per["none"] + per["oracle"]])
        assert np.isclose(ax.get_ylim()[0], 0)
