"""`kvbed report` and the plots: made from saved run files only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_helpers import kvbed
from replay_fixtures import two_lifetimes
from testbed.plots import make_run_plots
from testbed.results import load_run

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    trace = two_lifetimes(d / "t.parquet", n_objects=2000)
    out = []
    for h in ("none", "oracle"):
        res = kvbed("replay", trace, "--hints", h, "--fill-ratio", "1.0", "-o", d / "runs" / h, "-q")
        assert res.exit_code == 0, res.stderr
        out.append(d / "runs" / h)
    return out


def test_replay_draws_its_plots(runs):
    for r in runs:
        for name in ("waf.png", "latency_cdf.png", "ruh_bytes.png"):
            assert (r / name).read_bytes()[:8] == PNG


def test_report_table_json_and_plot(runs):
    res = kvbed("report", *runs, "--json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    for row, run in zip(rows, runs):
        job = json.loads((run / "result.json").read_text())["jobs"][0]
        assert row["hints"] == job["hints"] and row["waf"] == job["waf"]
        assert row["object_read_p99_ns"] == job["object_read"]["lat_ns"]["percentile"]["99.000000"]
        assert row["gc_bytes_moved"] == job["gc"]["bytes_moved"]
    assert rows[0]["waf_change_vs_first"] == 0.0
    assert rows[1]["waf_change_vs_first"] == pytest.approx(rows[1]["end_to_end_waf"] / rows[0]["end_to_end_waf"] - 1)
    assert rows[1]["end_to_end_waf"] < rows[0]["end_to_end_waf"]  # oracle vs none on this trace
    assert (runs[0].parent / "report.png").read_bytes()[:8] == PNG  # default: beside the first run
    res = kvbed("report", *runs, "--plot", runs[0].parent / "cmp.png")
    assert res.exit_code == 0 and "oracle" in res.stdout and "none" in res.stdout and "WAF" in res.stdout
    assert (runs[0].parent / "cmp.png").read_bytes()[:8] == PNG


def test_plots_need_only_the_saved_files(runs, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(runs[1], copy, ignore=shutil.ignore_patterns("*.png", "runtime.json"))
    paths = make_run_plots(copy)
    assert all(p.read_bytes()[:8] == PNG for p in paths)
    run = load_run(copy)
    hi, cnt = run.histogram("object_read")
    assert cnt.sum() == run.job["object_read"]["total_ios"] and (hi[1:] > hi[:-1]).all()


def test_report_refuses_what_is_not_a_run(runs, tmp_path):
    res = kvbed("report", runs[0], tmp_path)
    assert res.exit_code == 2 and res.stderr.startswith("kvbed: error: ") and "missing config.json" in res.stderr
    (tmp_path / "broken").mkdir()
    for name in ("config.json", "result.json", "timeseries.parquet", "latency.parquet"):
        (tmp_path / "broken" / name).write_text("{}")
    res = kvbed("report", tmp_path / "broken")
    assert res.exit_code == 2 and "no jobs" in res.stderr and res.stderr.count("\n") == 1
    for name in ("timeseries.parquet", "latency.parquet"):
        shutil.copy(runs[0] / name, tmp_path / "broken" / name)
    for bad in ('{"jobs": [1]}', '{"jobs": {"0": {}}}'):  # jobs that are not a list of job objects
        (tmp_path / "broken" / "result.json").write_text(bad)
        res = kvbed("report", tmp_path / "broken", "--no-plot")
        assert res.exit_code == 2 and "no jobs" in res.stderr and res.stderr.count("\n") == 1, res.stderr
    shutil.copy(runs[0] / "result.json", tmp_path / "broken" / "result.json")
    (tmp_path / "broken" / "config.json").write_text("[]")
    res = kvbed("report", tmp_path / "broken", "--no-plot")
    assert res.exit_code == 2 and "config.json" in res.stderr and res.stderr.count("\n") == 1, res.stderr


def test_replay_will_not_overwrite_a_foreign_directory(runs, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    trace = Path(json.loads((runs[0] / "config.json").read_text())["trace"]["path"])
    res = kvbed("replay", trace, "-o", tmp_path / "mine", "-q")
    assert res.exit_code == 2 and "not a kvbed run directory" in res.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    # a config.json of something else does not make a directory a run to be replaced
    (tmp_path / "mine" / "config.json").write_text('{"editor": "vim"}')
    res = kvbed("replay", trace, "-o", tmp_path / "mine", "-q", "--no-plots")
    assert res.exit_code == 2 and "not a kvbed run directory" in res.stderr, res.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert (tmp_path / "mine" / "config.json").read_text() == '{"editor": "vim"}'
    shutil.copytree(runs[0], tmp_path / "old_run")
    res = kvbed("replay", trace, "-o", tmp_path / "old_run", "-q", "--no-plots")  # a kvbed run is replaced whole
    assert res.exit_code == 0, res.stderr
    assert not (tmp_path / "old_run" / "waf.png").exists()
