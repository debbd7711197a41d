"""Figures that say what they are (issue 18): GC stall as a sum and per write command, a saturation flag in
every run, and no interval (nor a claim beyond one) from fewer than 2 seeds."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.support.cli import kvbed, ok
from tests.support.devices import make, writes

SMALL_DEVICE = ("--param", "channels=1", "--param", "dies_per_channel=1")


# ------------------------------------------------------------------------------------ GC stall per write


def _aged(*params):
    d = make("conv", "channels=1", "dies_per_channel=1", "op_ratio=0.25", *params)
    rng = np.random.default_rng(3)
    with d.untimed():
        d.submit(writes(range(d.logical_pages)))
        d.submit(writes(rng.integers(0, d.logical_pages, 3 * d.logical_pages)))
    d.reset_counters()
    return d, rng


def test_gc_stall_is_a_sum_and_a_share_of_write_commands():
    d, rng = _aged()
    n = 2000
    t = np.arange(n) * 10_000_000  # 10 ms apart: one page each, never queued by host load
    d.submit(writes(rng.integers(0, d.logical_pages, n), t=t))
    g = d.stats()["gc"]
    per_stall, per_write = g["fg_stall_lat_ns"], g["fg_stall_per_write_cmd_ns"]
    assert g["write_cmds"] == n
    # single-page commands: each stall is one command's wait
    assert 0 < g["fg_stalled_write_cmds"] == per_stall["N"] == per_write["N"] < n
    assert g["fg_stalled_write_cmds_ratio"] == g["fg_stalled_write_cmds"] / n
    assert per_write["max"] == per_stall["max"] and per_write["min"] == per_stall["min"]
    assert g["fg_stall_ns"] == pytest.approx(per_stall["mean"] * per_stall["N"])  # the sum over stalls


def test_a_command_whose_pages_stall_twice_counts_once_with_its_longest_wait():
    d, rng = _aged()
    ppl = d.geo.ppl
    c = d.submit(writes([0], npages=3 * ppl))  # crosses lines: its pages wait for GC more than once
    g = d.stats()["gc"]
    assert g["fg_stall_lat_ns"]["N"] >= 2
    assert g["write_cmds"] == 1 and g["fg_stalled_write_cmds"] == 1 and g["fg_stalled_write_cmds_ratio"] == 1.0
    per_write = g["fg_stall_per_write_cmd_ns"]
    assert per_write["N"] == 1 and per_write["max"] == g["fg_stall_lat_ns"]["max"]
    # the stalls overlap in time: their sum is more than the longest, the command waited at least the longest
    assert g["fg_stall_ns"] > per_write["max"] and c.done_ns[0] >= per_write["max"]


# ------------------------------------------------------------------------------------ saturation kernel


def test_saturation_is_the_union_of_waits_past_the_threshold():
    from devicemodels import saturation as SAT

    arr = np.array([0, 10, 100, 1000], np.int64)
    done = np.array([50, 30, 400, 1001], np.int64)
    s = SAT.new_state()
    SAT.record(arr, done, 20, s)
    f = SAT.summary(s, 20, 0.5, closed_loop=False)
    # busy: [0, 50) + [100, 400) + [1000, 1001); backlogged: [20, 50) + [120, 400) (op 1 waited exactly 20)
    assert f["span_ns"] == 1001 and f["busy_ns"] == 50 + 300 + 1 and f["longest_busy_ns"] == 300
    assert f["backlogged_ns"] == 30 + 280 and f["longest_backlog_ns"] == 280 and f["backlog_episodes"] == 2
    assert f["ops_waited_over_threshold"] == 2 and f["ops"] == 4
    assert f["backlogged_ratio"] == pytest.approx(310 / 1001) and f["saturated"] is False  # < 50% of the span
    assert SAT.summary(s, 20, 0.3, closed_loop=False)["saturated"] is True
    assert SAT.summary(s, 20, 0.3, closed_loop=True)["saturated"] is None
    # streamed segment by segment, the same figures
    s2 = SAT.new_state()
    for a, b in ((0, 1), (1, 3), (3, 4)):
        SAT.record(arr[a:b], done[a:b], 20, s2)
    assert np.array_equal(s, s2)


def test_an_op_out_of_arrival_order_is_counted():
    from devicemodels import saturation as SAT

    s = SAT.new_state()
    SAT.record(np.array([0, 100, 50], np.int64), np.array([10, 110, 60], np.int64), 1000, s)
    assert SAT.summary(s, 1000, 0.01, closed_loop=False)["arrivals_out_of_order"] == 1


# ------------------------------------------------------------------------------------ replays


@pytest.fixture(scope="module")
def trace(lifetimes_trace):
    return lifetimes_trace(2000)


def _run(trace, out, *args):
    res = ok(kvbed("replay", trace, "--fill-ratio", "1.0", *args, "-o", out, "--no-plots"))
    return res, json.loads((out / "result.json").read_text())["jobs"][0]


def test_a_device_that_cannot_keep_up_is_flagged_saturated(trace, tmp_path):
    # one die programs a 4 MiB object in 4 x 51 ms; the trace brings one every millisecond
    res, job = _run(trace, tmp_path / "over", *SMALL_DEVICE)
    sat = job["saturation"]
    assert sat["loop"] == "open" and sat["saturated"] is True
    assert sat["backlogged_ratio"] > 0.9 and sat["longest_backlog_ns"] > 60e9 and sat["busy_ratio"] == 1.0
    assert sat["span_ns"] == job["runtime_ns"] and sat["ops_waited_over_threshold_ratio"] > 0.5
    warn = [ln for ln in res.stderr.splitlines() if "device saturated" in ln]
    assert len(warn) == 1 and "of the span backlogged" in warn[0] and \
        "latency tails measure queueing behind a device that cannot keep up" in warn[0]
    assert "device saturated" in res.stdout  # in the summary table too


def test_the_same_device_with_time_to_spare_is_not(trace, tmp_path):
    res, job = _run(trace, tmp_path / "slow", *SMALL_DEVICE, "--time-scale", "0.001")  # 1 s between objects
    sat = job["saturation"]
    assert sat["saturated"] is False and sat["backlogged_ns"] == 0 and sat["ops_waited_over_threshold"] == 0
    assert 0.1 < sat["busy_ratio"] < 0.5
    assert "saturated" not in res.stderr and "backlogged 0.0% of the" in res.stdout


def test_the_threshold_is_a_replay_parameter(trace, tmp_path):
    _, job = _run(trace, tmp_path / "thr", *SMALL_DEVICE, "--time-scale", "0.001",
                  "--param", "saturation_wait_ns=100ms", "--param", "saturation_backlog_ratio=0")
    sat = job["saturation"]  # GC makes some writes wait over 100 ms
    assert sat["wait_threshold_ns"] == 100_000_000 and sat["backlogged_ns"] > 0 and sat["saturated"] is True


def test_a_closed_loop_is_backlogged_by_construction_not_flagged(trace, tmp_path):
    res, job = _run(trace, tmp_path / "afap", "--as-fast-as-possible")
    sat = job["saturation"]
    assert sat["loop"] == "closed" and sat["saturated"] is None and sat["busy_ratio"] == 1.0
    assert "closed loop" in res.stdout and "saturated" not in res.stderr


def test_gc_stall_in_the_job_names_what_it_counts(trace, tmp_path):
    res, job = _run(trace, tmp_path / "fdp", *SMALL_DEVICE)
    gs = job["gc_stall"]
    assert gs["total_ns"] == job["gc_stall_ns"] > 0
    assert gs["write_cmds"] == job["write"]["total_ios"] == 2000  # every object write is one command
    assert 0 < gs["stalled_write_cmds"] < gs["stalls"]  # 4 single-page lines per object: up to 4 stalls each
    assert gs["stalled_write_cmds_ratio"] == gs["stalled_write_cmds"] / gs["write_cmds"]
    w = gs["stalled_write_wait_ns"]
    assert 0 < w["p50"] <= w["p99"] <= w["max"] * 1.01
    # the sum over overlapping stalls exceeds the run itself: why it is labelled a sum
    assert gs["total_ns"] > job["runtime_ns"]
    assert "summed over" in res.stdout and "device write commands" in res.stdout


@pytest.mark.parametrize("device", ["zns", "cxl"])
def test_a_device_without_gc_reports_no_stall(trace, tmp_path, device):
    _, job = _run(trace, tmp_path / device, "--device", device)
    gs = job["gc_stall"]
    assert gs["total_ns"] == 0 and gs["stalls"] == 0 and gs["stalled_write_cmds"] == 0
    assert gs["stalled_write_cmds_ratio"] == 0.0 and gs["stalled_write_wait_ns"] is None
    assert gs["write_cmds"] >= 2000


def test_report_shows_stall_share_and_saturation(trace, tmp_path):
    _run(trace, tmp_path / "a", *SMALL_DEVICE)
    _run(trace, tmp_path / "b", *SMALL_DEVICE, "--time-scale", "0.001")
    rows = json.loads(ok(kvbed("report", tmp_path / "a", tmp_path / "b", "--json", "--no-plot")).stdout)
    assert [r["saturated"] for r in rows] == [True, False]
    assert rows[0]["gc_stall_total_ns"] == rows[0]["gc_stall_ns"] and rows[0]["gc_stalled_write_cmds_ratio"] > 0
    ok(kvbed("report", tmp_path / "a", tmp_path / "b", "--no-plot"))
    from rich.console import Console

    from testbed.report import compare, render_table
    from testbed.results import load_run

    con = Console(width=400, record=True)
    con.print(render_table(compare([load_run(tmp_path / "a"), load_run(tmp_path / "b")])))
    text = " ".join(con.export_text().split())  # the caption wraps at the table's width
    assert "GC stall (sum)" in text and "writes stalled" in text and "SATURATED" in text
    assert "a: device saturated: " in text and "latency tails measure queueing behind a device that cannot keep up" in text


def test_a_multi_tier_run_flags_each_tier(tmp_path, synth_trace):
    trace = synth_trace(120)
    # the SSD tier on one die cannot keep up; the DRAM tier can, and has no GC
    res = ok(kvbed("replay", trace, "--tiers", "cpu,ssd", "--param", "ssd:channels=1",
                   "--param", "ssd:dies_per_channel=1", "-o", tmp_path / "mt", "--no-plots", "--json"))
    jobs = {j["tier"]: j for j in json.loads((tmp_path / "mt" / "result.json").read_text())["jobs"]}
    assert jobs["ssd"]["saturation"]["saturated"] is True and jobs["cpu"]["saturation"]["saturated"] is False
    assert jobs["cpu"]["gc_stall"]["stalled_write_cmds"] == 0 and jobs["cpu"]["gc_stall"]["write_cmds"] > 0
    assert json.loads(res.stdout)["tiers"]["ssd"]["saturation"]["saturated"] is True
    warn = [ln for ln in res.stderr.splitlines() if "device saturated" in ln]
    assert len(warn) == 1 and warn[0].startswith("kvbed: warning (tier ssd): device saturated")


# ------------------------------------------------------------------------------------ studies


def _findings(seeds):
    from testbed.study.findings import findings

    rows = []
    for seed in seeds:
        for setting, none, oracle in (("64MiB", 1.30, 1.10), ("256MiB", 1.20, 1.19), ("1GiB", 1.25, 1.05)):
            for pol, waf in (("none", none + 0.001 * seed), ("oracle", oracle + 0.002 * seed)):
                rows.append({"status": "ok", "device": "fdp", "policy": pol, "seed": seed,
                             "replay.param.ru_bytes": setting, "end_to_end_waf": waf, "saturated": 0})
    doc = {"axes": {"replay.hints": [], "replay.param.ru_bytes": []}, "zips": [], "traces": {"a": {"label": "t"}}}
    return findings(pd.DataFrame(rows), doc)


def test_one_seed_gives_no_interval_and_no_claim_beyond_one():
    text = " ".join(_findings([0]))
    assert "beyond the 95% intervals" not in text
    assert "1 seed: no interval" in text


def test_two_seeds_still_compare_with_the_intervals():
    text = " ".join(_findings([0, 1]))
    assert "of 3 beyond the 95% intervals" in text and "no interval" not in text


STUDY = """
[study]
name = "one-seed"
seeds = [0]
metrics = ["end_to_end_waf", "gc_stall_ns", "gc_stalled_writes_ratio", "load_p99_ns", "backlogged_ratio"]

[trace]
synth = true
duration_s = 60

[replay]
device = "fdp"
fill_ratio = 1.0

[axes]
"replay.hints" = ["none", "oracle"]
"replay.param.channels" = [1]
"replay.param.dies_per_channel" = [1]
"replay.param.time_scale" = [1.0, 0.001]
"""


def test_a_one_seed_study_says_so_and_marks_its_saturated_points(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(STUDY)
    out = tmp_path / "out"
    ok(kvbed("study", "run", spec, "-o", out, "-q"))
    df = pd.read_parquet(out / "table.parquet")
    assert {"saturated", "backlogged_ratio", "busy_ratio", "gc_stalled_writes_ratio", "gc_stall_p99_ns"} <= set(df)
    sat = df[df["saturated"] == 1]
    assert len(sat) >= 1 and set(sat["replay.param.time_scale"]) == {1.0}  # one die at the trace's pace
    assert (df[df["replay.param.time_scale"] == 0.001]["saturated"] == 0).all()  # 1000 times slower: keeps up
    md = (out / "report.md").read_text()
    assert "beyond the 95% intervals" not in md and "1 seed: no interval" in md
    assert "## Summary (mean; 1 seed: no interval)" in md and "±" not in md
    assert "## Saturated points" in md and "latency tails measure queueing behind a device that cannot keep up" in md
    for _, r in sat.iterrows():
        assert r["run_dir"] in md


def test_the_default_threshold_is_above_every_gc_stall_of_a_device_that_keeps_up(tmp_path):
    """saturation_wait_ns's default (2 s) is justified in its help by the demo: the runs of `make demo` keep up, and
    their longest single foreground-GC stall stays below it, so the flag does not mistake a GC stall for overload."""
    from kvreplay.replay.params import ReplayParams

    ok(kvbed("trace", "synth", "-o", tmp_path / "sample.parquet"))
    for hints in ("none", "oracle"):
        ok(kvbed("replay", tmp_path / "sample.parquet", "--device", "fdp", "--hints", hints, "-o", tmp_path / hints,
                 "--no-plots", "-q"))
        job = json.loads((tmp_path / hints / "result.json").read_text())["jobs"][0]
        gs, sat = job["gc_stall"], job["saturation"]
        assert gs["stalled_write_cmds"] > 100 and sat["saturated"] is False, hints  # GC stalls, and it keeps up
        assert 0.3e9 < gs["stalled_write_wait_ns"]["max"] < ReplayParams().saturation_wait_ns, hints
