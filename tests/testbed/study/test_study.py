"""kvbed study: specs validate like the CLI, grids run locally and on Ray to the same table, a study is
resumable, a failing point does not stop the others, and the report is reproducible from the saved files."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import kvbed, ok, one_line_error

from tests.support.paths import ROOT
STUDIES = ROOT / "studies"
KVBED = [sys.executable, "-X", "faulthandler", "-c", "from testbed.cli import main; main()"]

SMALL = """
[study]
name = "small"
seeds = [0, 1]

[trace]
synth = true
duration_s = 90

[replay]
device = "fdp"

[axes]
"replay.hints" = ["none", "oracle"]
"replay.param.ru_bytes" = ["64MiB", "256MiB"]
"""


def spec(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("path", sorted(STUDIES.rglob("*.toml")), ids=lambda p: str(p.relative_to(STUDIES)))
def test_every_example_spec_validates(path):
    if "shared" in path.read_text() and not (ROOT / "../shared").exists():
        pytest.skip("needs ../shared beside the project")
    res = ok(kvbed("study", "validate", path, "--json"))
    doc = json.loads(res.output)
    assert doc["points"] > 0 and doc["traces"]
    from testbed.study.run import plan
    from testbed.study.spec import load

    grid = plan(load(path), Path("out"))  # what study.json will hold: every point with its hashes
    assert len(grid["points"]) == doc["points"] and set(grid["traces"]) == set(doc["traces"])
    assert all("seed=" not in t["label"] for t in grid["traces"].values())  # seeds do not split a setting


def test_validate_counts_points_and_traces(tmp_path):
    res = ok(kvbed("study", "validate", spec(tmp_path, SMALL), "--json"))
    doc = json.loads(res.output)
    assert doc["points"] == 8 and len(doc["traces"]) == 2  # 2 x 2 settings x 2 seeds; one synth trace per seed


@pytest.mark.parametrize("text,line,fragments", [
    (SMALL.replace('device = "fdp"', 'device = "fdp"\nfil_ratio = 0.5'), 12, ["replay.fil_ratio", "unknown key"]),
    (SMALL.replace('["none", "oracle"]', "[]"), 14, ["axes.replay.hints", "non-empty list"]),
    (SMALL.replace("duration_s = 90", 'duration_s = "long"'), 8, ["trace.duration_s", "expected a number"]),
    (SMALL.replace('device = "fdp"', 'device = "fpd"'), 11, ["replay.device", "unknown device 'fpd'"]),
    (SMALL.replace('"oracle"]', '"oracel"]'), 14, ["axes.replay.hints", "unknown hint policy 'oracel'"]),
    (SMALL.replace('"replay.param.ru_bytes"', '"replay.param.rubytes"'), 15,
     ["axes.replay.param.rubytes", "unknown parameter 'rubytes'"]),
    (SMALL.replace('"64MiB"', '"64ms"'), 15, ["axes.replay.param.ru_bytes", "unit 'ms' does not fit"]),
    (SMALL.replace("synth = true\nduration_s = 90", 'import = "mooncake"\nsource = "nope.jsonl"'), 8,
     ["trace.source", "no such file", "nope.jsonl"]),
    (SMALL.replace("seeds = [0, 1]", "seeds = [0, 1]\ncolour = 3"), 5, ["study.colour", "unknown key"]),
    (SMALL.replace("[axes]", "[axes]\nbroken = [1"), 15, ["not valid TOML"]),
    (SMALL + '\n[[zip]]\n"replay.param.op_ratio" = [0.1, 0.2]\n"replay.param.nruh" = [2]\n', 18,
     ["zip.replay.param.op_ratio", "differ in length"]),
    (SMALL.replace('device = "fdp"', 'device = "fdp"\nparam = { error_rate = 0.1 }'), 12,
     ["replay.param", "unknown parameter 'error_rate'"]),
    # range errors: of a trace setting (was an IndexError), of a device or hint parameter (was a failure per point)
    (SMALL.replace("duration_s = 90", "duration_s = 90\ntokens_per_object = 0"), 9,
     ["trace.tokens_per_object", "must be positive, got 0"]),
    (SMALL + '"trace.ssd_bytes" = ["1TiB", "-1TiB"]\n', 16, ["axes.trace.ssd_bytes", "must not be negative"]),
    (SMALL + '"replay.param.op_ratio" = [0.07, 11]\n', 16,
     ["axes.replay.param.op_ratio", "op_ratio must be in (0, 10), got 11"]),
    (SMALL.replace('device = "fdp"', 'device = "fdp"\nparam = { op_ratio = 11 }'), 12,
     ["replay.param.op_ratio", "op_ratio must be in (0, 10), got 11"]),
    (SMALL.replace('"replay.hints" = ["none", "oracle"]\n', "") +
     '\n[[zip]]\n"replay.hints" = ["none", "noisy-oracle"]\n"replay.param.error_rate" = ["-", 2]\n', 18,
     ["zip.replay.param.error_rate", "must be in [0, 1], got 2"]),
])
def test_bad_specs_are_refused_before_anything_runs(tmp_path, text, line, fragments):
    p = spec(tmp_path, text)
    one_line_error(kvbed("study", "validate", p), f"{p}:{line}:", *fragments)
    one_line_error(kvbed("study", "run", p, "-o", tmp_path / "out", "-q"), f"{p}:{line}:", *fragments)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("trace,axes,line,fragments", [
    ("tokens_per_object = 0", "", 6, ["trace.tokens_per_object", "must be positive, got 0"]),
    ('ssd_bytes = "-1TiB"', "", 6, ["trace.ssd_bytes", "must not be negative"]),
    ("", '[axes]\n"trace.ssd_bytes" = ["1TiB", "-1TiB"]', 10, ["axes.trace.ssd_bytes", "must not be negative"]),
])
def test_range_errors_of_an_imported_trace_are_one_line(tmp_path, trace, axes, line, fragments):
    (tmp_path / "t.jsonl").write_text("")  # validation does not read the source
    p = spec(tmp_path, f'[study]\nname = "m"\n[trace]\nimport = "mooncake"\nsource = "t.jsonl"\n{trace}\n'
                       f'[replay]\ndevice = "fdp"\n{axes}\n')
    one_line_error(kvbed("study", "validate", p), f"{p}:{line}:", *fragments)
    one_line_error(kvbed("study", "run", p, "-o", tmp_path / "out", "-q"), f"{p}:{line}:", *fragments)
    assert not (tmp_path / "out").exists()


def test_a_plugin_path_is_relative_to_the_spec(tmp_path, monkeypatch):
    d = tmp_path / "specs"
    d.mkdir()
    (d / "my_hints.py").write_text("from kvreplay.hints import HintPolicy\n\n\nclass One(HintPolicy):\n"
                                   "    knows = 'nothing'\n\n    def _assign(self, batch, actions, writes):\n"
                                   "        return 0 * writes[writes]\n")
    p = spec(d, SMALL.replace('"oracle"]', '"./my_hints.py:One"]'))
    monkeypatch.chdir(tmp_path)  # not the spec's directory
    from testbed.study.spec import load

    hints = {pt.hints for pt in load(p).points}
    assert hints == {"none", f"{d / 'my_hints.py'}:One"}, hints
    ok(kvbed("study", "validate", p))


def test_the_old_name_of_the_gc_stall_sum_is_read_as_the_new():
    from testbed.study.table import shown_metrics

    assert shown_metrics(["waf", "gc_stall_ns"]) == ["waf", "gc_stall_total_ns"]


def test_validate_help_says_what_it_prints():
    text = " ".join(ok(kvbed("study", "validate", "--help")).output.split())
    assert "the number of points, the axes and the traces to build" in text
    assert "print the points and traces" not in text


def _table(d: Path):
    import pandas as pd

    return pd.read_parquet(d / "table.parquet")


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    """The reduced first example study, run locally with two workers."""
    out = tmp_path_factory.mktemp("study") / "local"
    res = kvbed("study", "run", STUDIES / "reduced" / "kv-hints-fdp.toml", "-o", out, "-j", "2", "-q")
    ok(res)
    return out


def test_reduced_study_runs_end_to_end(reduced):
    df = _table(reduced)
    assert len(df) == 16 and set(df["status"]) == {"ok"}
    assert set(df["replay.hints"]) == {"none", "predicted", "oracle", "noisy-oracle"}
    assert df["end_to_end_waf"].notna().all() and (df["end_to_end_waf"] >= 1.0).all()
    # whether each run's policy read the future, as result.json recorded it (what "practical" is decided by)
    assert df.groupby("hints")["hint_offline"].agg(lambda v: set(v)).to_dict() == {
        "none": {False}, "predicted": {False}, "oracle": {True}, "noisy-oracle": {True}}
    assert "gc_stall_total_ns" in df.columns and "gc_stall_ns" not in df.columns
    # oracle never does worse than no hints at the same setting and seed
    key = ["replay.param.op_ratio", "seed"]
    none = df[df["hints"] == "none"].set_index(key)["end_to_end_waf"]
    oracle = df[df["hints"] == "oracle"].set_index(key)["end_to_end_waf"]
    assert (oracle <= none + 1e-9).all()
    # the trace's per-tier hit ratios, named for their denominators (every chunk reference / the lookups)
    assert {"ref_hit_ratio_gpu", "lookup_hit_ratio_gpu", "ref_hit_ratio_ssd", "lookup_hit_ratio_ssd"} <= set(df.columns)
    assert not any(c.startswith("hit_ratio") for c in df.columns)
    assert (df["ref_hit_ratio_gpu"] < df["lookup_hit_ratio_gpu"]).all()
    for f in ("table.csv", "summary.csv", "report.md", "report.html", "plots/waf_by_hints.png"):
        assert (reduced / f).exists(), f
    # the GC stall is a sum over stalls, and each report says so
    assert "gc_stall_total_ns (sum over stalls)" in (reduced / "report.md").read_text()
    assert "gc_stall_total_ns_mean (sum over stalls)" in (reduced / "report.html").read_text()
    summary = (reduced / "summary.csv").read_text().splitlines()
    assert len(summary) == 1 + 8 and "end_to_end_waf_ci95" in summary[0]
    # every point is an ordinary run directory: kvbed replay --config reruns it to the same result
    row = df.iloc[0]
    again = reduced.parent / "again"
    ok(kvbed("replay", "--config", reduced / row["run_dir"] / "config.json", "-o", again, "-q", "--no-plots"))
    a, b = (json.loads((d / "result.json").read_text())["jobs"][0] for d in (reduced / row["run_dir"], again))
    assert a == b


def test_report_is_reproducible_from_a_copy(reduced, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(reduced, copy)
    ok(kvbed("study", "report", copy))
    for f in ("report.md", "report.html", "table.csv", "summary.csv", "plots/waf_by_hints.png"):
        assert filecmp.cmp(reduced / f, copy / f, shallow=False), f
    assert str(reduced) not in (copy / "report.html").read_text()


def test_rerun_of_a_finished_study_runs_nothing(reduced):
    before = {p: p.stat().st_mtime_ns for p in (reduced / "runs").glob("*/result.json")}
    res = ok(kvbed("study", "run", STUDIES / "reduced" / "kv-hints-fdp.toml", "-o", reduced, "-q"))
    assert "0 ran, 16 already done" in res.output
    assert {p: p.stat().st_mtime_ns for p in (reduced / "runs").glob("*/result.json")} == before


def test_python_entry_point_loads_the_table(reduced):
    import kvbed.study

    df = kvbed.study.load(reduced)
    assert len(df) == 16 and "end_to_end_waf" in df.columns


@pytest.mark.slow
def test_ray_executor_gives_the_same_table(reduced, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "ray"
    ok(kvbed("study", "run", STUDIES / "reduced" / "kv-hints-fdp.toml", "-o", out, "--executor", "ray", "-j", "2",
             "-q"))
    a, b = _table(reduced), _table(out)
    assert a.equals(b)
    assert (out / "report.html").exists()


def test_a_failing_point_is_recorded_and_the_others_complete(tmp_path):
    text = SMALL.replace('"replay.param.ru_bytes" = ["64MiB", "256MiB"]',
                         '"replay.param.logical_bytes" = ["128GiB", "64MiB"]').replace("seeds = [0, 1]", "seeds = [0]")
    out = tmp_path / "out"
    res = kvbed("study", "run", spec(tmp_path, text), "-o", out, "-q")
    assert res.exit_code == 1, res.output
    df = _table(out)
    failed = df[df["status"] == "failed"]
    assert len(failed) == 2 and set(failed["replay.param.logical_bytes"]) == {"64MiB"}
    assert failed["error"].str.contains("device too small for the live data").all()
    assert set(df[df["status"] != "failed"]["status"]) == {"ok"}
    res = kvbed("study", "status", out, "--json")
    assert res.exit_code == 1, res.output  # points failed: not a success
    st = json.loads(res.output)
    assert st["counts"] == {"done": 2, "failed": 2, "missing": 0}
    assert kvbed("study", "status", out).exit_code == 1
    assert all("too small" in p["error"] for p in st["points"] if p["state"] == "failed")
    assert "too small" in (out / "report.md").read_text()


def _finished(out: Path) -> dict[str, int]:
    """Run directories in place (not a hidden one being assembled), with their result's mtime."""
    return {q.parent.name: q.stat().st_mtime_ns for q in (out / "runs").glob("*/result.json")
            if not q.parent.name.startswith(".")}


def test_an_interrupted_study_reruns_only_the_missing_points(tmp_path):
    text = SMALL.replace("seeds = [0, 1]", "seeds = [0]").replace("duration_s = 90", "duration_s = 3000")
    text = text.replace('["none", "oracle"]', '["none", "oracle", "predicted", "type"]')  # 8 points of ~1 s
    p = spec(tmp_path, text)
    out = tmp_path / "out"
    proc = subprocess.Popen([*KVBED, "study", "run", str(p), "-o", str(out), "-j", "1", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and len(_finished(out)) < 1:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C does: to the whole process group
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    err = err.strip()
    assert err.startswith("kvbed: interrupted: ") and "\n" not in err and "rerun the same command" in err, err
    finished = _finished(out)
    assert 1 <= len(finished) < 8
    assert json.loads((out / "study.json").read_text())["incomplete"] is True
    assert "did not finish" in ok(kvbed("study", "status", out)).output
    assert not [q for q in out.rglob("*") if q.name.endswith(".tmp")]  # workers stopped leave nothing
    assert not (out / "report.md").exists()
    # no worker is left behind: nothing of the run's process group lives on
    for _ in range(50):
        left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
        if not left:
            break
        time.sleep(0.2)
    assert left == []
    res = ok(kvbed("study", "run", p, "-o", out, "-q"))
    assert f"{8 - len(finished)} ran, {len(finished)} already done" in res.output
    assert {q: m for q, m in ((d, (out / "runs" / d / "result.json").stat().st_mtime_ns) for d in finished)} == finished
    assert len(_table(out)) == 8 and set(_table(out)["status"]) == {"ok"}
    assert json.loads((out / "study.json").read_text())["incomplete"] is False


@pytest.mark.slow
def test_ray_workers_without_the_drivers_files_get_the_trace_shipped(reduced, tmp_path):
    """A worker that cannot see the driver's trace file gets its bytes from the object store (kept in its
    own cache by hash), and the run it returns names the driver's path."""
    pytest.importorskip("ray")
    from kvreplay.replay.config import trace_fingerprint
    from testbed.study.run import RayExecutor, Task
    from testbed.study.spec import load

    st = load(STUDIES / "reduced" / "kv-hints-fdp.toml")
    pt = st.points[0]
    th = pt.trace.hash()
    real = reduced / "traces" / f"{th}.parquet"
    elsewhere = tmp_path / "driver-only" / f"{th}.parquet"  # a path no worker has
    os.environ["XDG_CACHE_HOME"] = str(tmp_path / "worker-cache")  # the local Ray's workers inherit it
    try:
        ex = RayExecutor(1, None)
        try:
            ref = ex.ship(th, real)
            task = Task("point", "x", pt.trace, str(elsewhere), trace_fingerprint(real), pt)
            (res,) = list(ex.map([task], {th: ref}))
        finally:
            ex.close()
    finally:
        del os.environ["XDG_CACHE_HOME"]
    assert res["ok"], res.get("error")
    assert res["parts"]["config"]["trace"]["path"] == str(elsewhere)
    cached = tmp_path / "worker-cache" / "kvbed" / "study-traces" / f"{th}.parquet"
    assert cached.read_bytes() == real.read_bytes()
    done = json.loads((reduced / "runs" / pt.hash(th) / "result.json").read_text())["jobs"][0]
    assert res["parts"]["result"]["jobs"][0] == done


def test_the_guides_example_spec_validates_where_it_says_to_save_it(tmp_path):
    """docs/guides/studies.md's spec, saved where it says (beside studies/, its source relative to that): the
    documented example is checked as a user would run it."""
    from tests.support.paths import MOONCAKE

    if not MOONCAKE.exists():
        pytest.skip(f"{MOONCAKE} not present")
    text = (ROOT / "docs" / "guides" / "studies.md").read_text()
    spec = text.split("```toml\n", 1)[1].split("```", 1)[0]
    assert 'name = "my-study"' in spec and "studies/my-study.toml" in text
    here = tmp_path / "repo" / "studies"
    here.mkdir(parents=True)
    (tmp_path / "shared").symlink_to(MOONCAKE.parents[3])  # ../../shared from the spec, as in the repository
    (here / "my-study.toml").write_text(spec)
    res = ok(kvbed("study", "validate", here / "my-study.toml"))
    assert "study 'my-study': 48 points (16 settings x 3 seeds), 1 trace(s) to build" in res.stdout
