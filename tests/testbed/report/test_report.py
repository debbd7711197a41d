"""`kvbed report` and the plots: made from saved run files only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.cli import kvbed, ok, one_line_error
from testbed.plots import make_run_plots
from testbed.results import load_run

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, lifetimes_trace):
    d = tmp_path_factory.mktemp("report")
    trace = lifetimes_trace(2000)
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
    default = runs[0].parent / "report-none-oracle"  # default: named after its runs, beside the first
    assert (default / "report.png").read_bytes()[:8] == PNG
    doc = json.loads((default / "report.json").read_text())
    assert doc["runs"] == [str(r.resolve()) for r in runs] and doc["rows"] == rows and doc["plots"] == ["report.png"]
    res = kvbed("report", *runs, "-o", runs[0].parent / "cmp")
    assert res.exit_code == 0 and "oracle" in res.stdout and "none" in res.stdout and "WAF" in res.stdout
    assert (runs[0].parent / "cmp" / "report.png").read_bytes()[:8] == PNG


def test_the_baseline_is_the_first_run_or_the_one_named(runs, tmp_path):
    """A shell glob lists runs by name, so the first (the baseline of every change) is often not the one meant:
    --baseline names it, and it is listed first."""
    none, oracle = runs
    rows = json.loads(ok(kvbed("report", oracle, none, "--baseline", none, "--json")).stdout)
    assert [r["hints"] for r in rows] == ["none", "oracle"] and rows[0]["waf_change_vs_first"] == 0.0
    assert rows[1]["waf_change_vs_first"] == pytest.approx(rows[1]["end_to_end_waf"] / rows[0]["end_to_end_waf"] - 1)
    assert rows[1]["waf_change_vs_first"] < 0  # oracle against none
    flipped = json.loads(ok(kvbed("report", oracle, none, "--json")).stdout)  # no --baseline: the first given
    assert flipped[0]["hints"] == "oracle" and flipped[1]["waf_change_vs_first"] > 0
    one_line_error(kvbed("report", none, oracle, "--baseline", tmp_path, "--no-plot"), "--baseline",
                   "not one of the runs compared")
    ok(kvbed("report", oracle, none, "--baseline", none, "-o", tmp_path / "rep"))  # the files agree on it
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert doc["runs"] == [str(none.resolve()), str(oracle.resolve())] and doc["rows"][0]["hints"] == "none"
    ok(kvbed("report", oracle, none, "--baseline", none))  # the default directory: named after the baseline first
    assert (none.parent / "report-none-oracle" / "report.json").exists()


def test_a_report_printed_to_a_file_cuts_no_figure(runs, tmp_path, lifetimes_trace):
    """A ZNS run adds the host-GC columns, wider than a pipe's default width: every cell is printed whole (the
    old table ended them with "…", a WAF of 1.673 as "1.…")."""
    zns = tmp_path / "zns"
    ok(kvbed("replay", lifetimes_trace(2000), "--device", "zns", "--fill-ratio", "1.0", "-o", zns, "-q", "--no-plots"))
    res = ok(kvbed("report", runs[0], runs[1], zns, "--no-plot"))
    assert "…" not in res.stdout
    for run in (*runs, zns):
        job = json.loads((run / "result.json").read_text())["jobs"][0]
        row = next(ln for ln in res.stdout.splitlines() if ln.startswith(f"│ {run.name} ") and "%" in ln)
        assert f"│ {job['end_to_end_waf']:.3f} │" in row  # the WAF, whole


def test_a_contract_that_writes_more_is_compared_by_media_bytes(tmp_path, lifetimes_trace):
    """A recovery contract's headers are written for every object, so its WAF divides by more bytes: on the
    Mooncake trace the full contract wrote 2.7% more to flash yet showed a WAF 0.3% lower. The report then adds
    what each run wrote for the trace and the change in media bytes, and says why."""
    trace = lifetimes_trace(2000)
    for c in ("none", "full"):
        ok(kvbed("replay", trace, "--contract", c, "--fill-ratio", "1.0", "-o", tmp_path / c, "-q", "--no-plots"))
    jobs = [json.loads((tmp_path / c / "result.json").read_text())["jobs"][0] for c in ("none", "full")]
    assert jobs[1]["user_bytes_written"] > jobs[0]["user_bytes_written"]  # the headers
    res = ok(kvbed("report", tmp_path / "none", tmp_path / "full", "--no-plot", "--json"))
    rows = json.loads(res.stdout)
    want = jobs[1]["media_bytes_written"] / jobs[0]["media_bytes_written"] - 1
    assert rows[1]["media_change_vs_first"] == pytest.approx(want) and want > 0
    text = ok(kvbed("report", tmp_path / "none", tmp_path / "full", "--no-plot")).stdout
    assert "media change" in text and "its change is not the change in flash writes" in " ".join(text.split())
    row = next(ln for ln in text.splitlines() if ln.startswith("│ full ") and "%" in ln)
    assert f"{100 * want:+.1f}%" in row
    plain = ok(kvbed("report", tmp_path / "none", tmp_path / "none", "--no-plot")).stdout
    assert "media change" not in plain  # same bytes written: WAF compares as it is


def test_report_never_replaces_another_report_silently(runs, tmp_path):
    """The old code wrote report.png beside the first run whatever the runs, replacing an earlier report."""
    d = tmp_path / "rep"
    ok(kvbed("report", *runs, "-o", d))
    before = {f: (d / f).read_bytes() for f in ("report.png", "report.json")}
    one_line_error(kvbed("report", runs[1], runs[0], "-o", d), f"{d / 'report.png'}", "holds another report",
                   "--force")
    assert {f: (d / f).read_bytes() for f in before} == before
    one_line_error(kvbed("report", runs[0], "-o", d), "holds another report")
    ok(kvbed("report", *runs, "-o", d))  # the same report made again replaces its own files
    ok(kvbed("report", runs[1], runs[0], "-o", d, "--force"))
    assert json.loads((d / "report.json").read_text())["runs"] == [str(runs[1].resolve()), str(runs[0].resolve())]
    (tmp_path / "old").mkdir()  # a report of an older kvbed: a plot and no report.json
    (tmp_path / "old" / "report.png").write_bytes(PNG)
    one_line_error(kvbed("report", *runs, "-o", tmp_path / "old"), "old/report.png", "holds another report")
    ok(kvbed("report", *runs, "-o", tmp_path / "file2", "--no-plot"))
    assert not (tmp_path / "file2").exists()  # --no-plot writes nothing


def test_report_shows_the_settings_that_differ(runs, tmp_path):
    trace = Path(json.loads((runs[0] / "config.json").read_text())["trace"]["path"])
    more = {"op20": ["--hints", "oracle", "--param", "op_ratio=20%", "--seed", "3"],
            "checksum": ["--hints", "oracle", "--contract", "checksum", "--fault", "power-loss@1s"],
            "conv": ["--device", "conv"]}
    for name, extra in more.items():
        ok(kvbed("replay", trace, "--fill-ratio", "1.0", *extra, "-o", tmp_path / name, "-q", "--no-plots"))
    res = ok(kvbed("report", runs[1], tmp_path / "op20", tmp_path / "checksum", "--json", "--no-plot"))
    diffs = [r["differs"] for r in json.loads(res.stdout)]
    # the checksum contract's headers make the objects larger: the device sized from the trace is larger too
    logical = [json.loads((d / "config.json").read_text())["device_params"]["flash"]["logical_bytes"]
               for d in (runs[1], tmp_path / "op20", tmp_path / "checksum")]
    assert logical[0] == logical[1] < logical[2]
    assert diffs == [{"contract": "none", "faults": None, "replay.seed": 0, "logical_bytes": logical[0],
                      "op_ratio": 0.07, "flash.seed": 0},
                     {"contract": "none", "faults": None, "replay.seed": 3, "logical_bytes": logical[1],
                      "op_ratio": 0.2, "flash.seed": 3},
                     {"contract": "checksum", "faults": "power-loss@1s", "replay.seed": 0,
                      "logical_bytes": logical[2], "op_ratio": 0.07, "flash.seed": 0}]
    table = ok(kvbed("report", runs[1], tmp_path / "op20", tmp_path / "checksum", "--no-plot")).stdout
    header = next(line for line in table.splitlines() if "contract" in line)
    assert all(c in header for c in ("run", "hints", "op_ratio", "logical_bytes", "replay.seed", "flash.seed"))
    assert "checksum" in table and "power-loss@1s" in table and "3.0 GiB" in table and "0.2 " in table
    # identical settings give no column; an FDP-only parameter (nruh, ru_bytes) is not compared with a
    # conventional SSD, a parameter both have is (conv's 8-block lines, FDP's lines of a whole RU)
    res = ok(kvbed("report", runs[0], tmp_path / "conv", "--json", "--no-plot"))
    assert [r["differs"] for r in json.loads(res.stdout)] == [{"blocks_per_line": 0}, {"blocks_per_line": 8}]
    res = ok(kvbed("report", *runs, "--json", "--no-plot"))
    assert [r["differs"] for r in json.loads(res.stdout)] == [{"clock": None}, {"clock": "bytes"}]
    shutil.copy(trace, tmp_path / "other.parquet")  # the same events under another name: the trace differs
    ok(kvbed("replay", tmp_path / "other.parquet", "--fill-ratio", "1.0", "-o", tmp_path / "other", "-q",
             "--no-plots"))
    res = ok(kvbed("report", runs[0], tmp_path / "other", "--json", "--no-plot"))
    assert [r["differs"] for r in json.loads(res.stdout)] == [{"trace": trace.name}, {"trace": "other.parquet"}]


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


def test_report_of_multitier_runs_compares_tier_by_tier(tmp_path, synth_trace):
    """Per-tier hints and parameters: a cpu row is compared with the cpu rows, an ssd row with the ssd rows."""
    trace = synth_trace(60)
    ok(kvbed("replay", trace, "--tiers", "cpu,ssd", "-o", tmp_path / "plain", "-q", "--no-plots"))
    ok(kvbed("replay", trace, "--tiers", "cpu,ssd", "--hints", "ssd=oracle", "--param", "ssd:op_ratio=20%",
             "-o", tmp_path / "tuned", "-q", "--no-plots"))
    rows = json.loads(ok(kvbed("report", tmp_path / "plain", tmp_path / "tuned", "--json", "--no-plot")).stdout)
    assert [(r["tier"], r["hints"]) for r in rows] == [("cpu", "none"), ("ssd", "none"), ("cpu", "none"),
                                                        ("ssd", "oracle")]
    assert [r["differs"] for r in rows] == [{"clock": None, "op_ratio": None}, {"clock": None, "op_ratio": 0.07},
                                            {"clock": None, "op_ratio": None}, {"clock": "bytes", "op_ratio": 0.2}]
    out = ok(kvbed("report", tmp_path / "plain", tmp_path / "tuned", "--no-plot")).stdout
    assert "what differs" in out and "op_ratio" in out
    # each tier's two hit ratios, named for their denominators, are those of the run's requests section
    req = json.loads((tmp_path / "plain" / "result.json").read_text())["requests"]["tiers"]
    for r in rows[:2]:
        assert (r["ref_hit_ratio"], r["lookup_hit_ratio"]) == (req[r["tier"]]["ref_hit_ratio"],
                                                               req[r["tier"]]["lookup_hit_ratio"])
    # a minute of synth traffic hits the cpu tier (a share of all chunks below its share of lookups) and
    # never reaches back to the ssd: nothing the cpu evicted is asked for again within the minute
    cpu, ssd = rows[:2]
    assert 0 < cpu["ref_hit_ratio"] < cpu["lookup_hit_ratio"] < 1
    assert (ssd["ref_hit_ratio"], ssd["lookup_hit_ratio"]) == (0.0, 0.0) and req["ssd"]["lookups"] > 0
    assert "hits / all chunks" in out and "hits / lookups" in out


def test_report_reads_the_hit_ratios_of_a_run_saved_before_their_names():
    """Before: requests.tiers had chunk_share (hits / all chunks) and hit_ratio (hits / lookups)."""
    from testbed.report import _hit_ratios

    old = {"cpu": {"lookups": 40, "hits": 10, "hit_ratio": 0.25, "chunk_share": 0.05}}
    assert _hit_ratios(old, "cpu") == {"ref_hit_ratio": 0.05, "lookup_hit_ratio": 0.25}
    assert _hit_ratios(old, "ssd") == {} and _hit_ratios(None, "cpu") == {}


def test_a_run_is_labelled_with_its_own_name(runs, tmp_path):
    """load_run's file check once reused the ``name`` argument as its loop variable: every run was labelled
    "latency.parquet" in plot titles and report legends (issue 18)."""
    assert load_run(runs[0]).label == "none"
    assert load_run(runs[1], "oracle run").label == "oracle run"
    import matplotlib.figure
    titles = []
    real = matplotlib.figure.Figure.savefig

    def spy(fig, *a, **kw):
        titles.extend(ax.get_title() for ax in fig.axes)
        return real(fig, *a, **kw)

    copy = tmp_path / "renamed"
    shutil.copytree(runs[1], copy)
    mp = pytest.MonkeyPatch()
    mp.setattr(matplotlib.figure.Figure, "savefig", spy)
    try:
        make_run_plots(copy)
    finally:
        mp.undo()
    assert titles and all(t.endswith("- renamed") for t in titles if " - " in t)
    assert not any("parquet" in t for t in titles)
