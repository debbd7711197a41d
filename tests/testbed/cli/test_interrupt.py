"""Ctrl-C: exit status 130, one line saying it was interrupted and what was kept, and either a valid result
marked ``"incomplete": true`` with the phase it was interrupted in, or nothing; never a half file. Each case
sends a real SIGINT from inside the process at a chosen moment (interrupt_helpers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import kvbed, ok
from tests.support.interrupt import kvbed_interrupted, one_interrupted_line

PNGS = ("waf.png", "latency_cdf.png", "ruh_bytes.png")


@pytest.fixture(scope="module")
def trace(lifetimes_trace):
    return lifetimes_trace(3000)


def _result(run: Path) -> dict:
    return json.loads((run / "result.json").read_text())


def _no_litter(d: Path) -> None:
    assert not [p for p in d.rglob("*") if p.name.endswith(".tmp") or ".old." in p.name], list(d.rglob("*"))


# ------------------------------------------------------------------------------------------- kvbed replay
def test_replay_interrupted_in_the_scan_writes_nothing(trace, tmp_path):
    out = tmp_path / "run"
    proc = kvbed_interrupted("kvreplay.replay.scan:select", "replay", trace, "-o", out, when="before")
    one_interrupted_line(proc, "during the scan", "nothing written")
    assert not out.exists()
    _no_litter(tmp_path)


def test_replay_interrupted_during_the_replay(trace, tmp_path):
    out = tmp_path / "run"
    proc = kvbed_interrupted("kvreplay.replay.record:record_segment", "replay", trace, "-o", out, "-q")
    one_interrupted_line(proc, "during the replay (stopped at row 4,096 of", str(out))
    r = _result(out)
    assert r["incomplete"] is True and r["interrupted"] == "replay"
    assert 0 < r["jobs"][0]["events"]["rows_replayed"] == r["stopped_at_row"] < r["scan"]["rows"]
    assert json.loads((out / "runtime.json").read_text())["incomplete"] is True
    assert not any((out / p).exists() for p in PNGS)  # Ctrl-C: stop soon, no plots
    res = ok(kvbed("report", out, "--no-plot"))
    assert "(partial)" in res.output
    _no_litter(tmp_path)


def test_a_second_ctrl_c_aborts_and_leaves_nothing(trace, tmp_path):
    out = tmp_path / "run"
    proc = kvbed_interrupted("kvreplay.replay.record:record_segment", "replay", trace, "-o", out, "-q",
                             when="twice")
    assert one_interrupted_line(proc) == "kvbed: interrupted"
    assert not out.exists()
    _no_litter(tmp_path)


def test_replay_interrupted_while_writing_results(trace, tmp_path):
    out = tmp_path / "run"
    proc = kvbed_interrupted("testbed.results:latency_table", "replay", trace, "-o", out, "-q")
    one_interrupted_line(proc, "while writing results", "marked incomplete")
    r = _result(out)
    assert r["incomplete"] is True and r["interrupted"] == "writing results"
    assert r["jobs"][0]["events"]["rows_replayed"] == r["scan"]["rows"]  # every row was replayed
    assert not any((out / p).exists() for p in PNGS)
    _no_litter(tmp_path)


def test_replay_interrupted_while_plotting(trace, tmp_path):
    """The old code marked this run complete without its plots and exited 0."""
    out = tmp_path / "run"
    ok(kvbed("replay", trace, "-o", out, "-q", "--no-plots", "--hints", "oracle"))  # an older run there
    proc = kvbed_interrupted("testbed.plots:plot_waf", "replay", trace, "-o", out, "-q")
    one_interrupted_line(proc, "while plotting", "marked incomplete", str(out))
    r = _result(out)
    assert r["incomplete"] is True and r["interrupted"] == "plotting" and r["jobs"][0]["hints"] == "none"
    assert (out / "waf.png").read_bytes()[:4] == b"\x89PNG"  # drawn whole before the Ctrl-C
    # the plot helper draws every other plot in a second process: latency_cdf may have been under way (then it
    # is whole), ruh_bytes, after waf in the same process, was not begun
    assert not (out / "ruh_bytes.png").exists()
    assert not (out / "latency_cdf.png").exists() or (out / "latency_cdf.png").read_bytes()[:4] == b"\x89PNG"
    _no_litter(tmp_path)


def test_multitier_replay_interrupted(tmp_path, synth_trace):
    synth = synth_trace(120)
    out = tmp_path / "run"
    proc = kvbed_interrupted("kvreplay.replay.record:record_segment", "replay", synth, "--tiers", "cpu,ssd",
                             "-o", out, "-q")
    one_interrupted_line(proc, "during the replay", str(out))
    r = _result(out)
    assert r["incomplete"] is True and r["interrupted"] == "replay"
    assert [j["tier"] for j in r["jobs"]] == ["cpu"] and r["requests"] is None


def test_multitier_stopped_in_a_later_scan_keeps_the_tiers_before(tmp_path, synth_trace):
    from kvreplay.replay.multitier import MultiTierReplay, build_multitier_config

    synth = synth_trace(120)

    class Phases:
        name = ""

        def phase(self, name, total):
            self.name = name

        def advance(self, n):
            pass

    prog = Phases()
    cfg = build_multitier_config(str(synth), ["cpu", "ssd"], {}, {}, [], {})
    parts = MultiTierReplay(cfg, progress=prog, should_stop=lambda: prog.name == "ssd: scan").run()
    r = parts["result"]
    assert r["incomplete"] is True and [j["tier"] for j in r["jobs"]] == ["cpu"]
    assert r["jobs"][0]["events"]["rows_replayed"] > 0 and r["requests"] is None


# ------------------------------------------------------------------------------------------- the others
def test_trace_synth_and_import_interrupted_write_nothing(tmp_path):
    out = tmp_path / "s.parquet"
    proc = kvbed_interrupted("kvreplay.tiers.sim:simulate", "trace", "synth", "-o", out, "--duration-s", "30")
    one_interrupted_line(proc, "nothing written", "not created")
    assert not out.exists()
    ok(kvbed("trace", "synth", "-o", out, "--duration-s", "30"))
    before = out.read_bytes()
    proc = kvbed_interrupted("kvreplay.tiers.sim:simulate", "trace", "synth", "-o", out, "--duration-s", "60")
    one_interrupted_line(proc, "nothing written", "left as it was")
    assert out.read_bytes() == before
    src = tmp_path / "mc.jsonl"
    src.write_text("".join(f'{{"timestamp": {i * 1000}, "input_length": 1024, "output_length": 8, '
                           f'"hash_ids": [{i}, {i + 1}]}}\n' for i in range(50)))
    proc = kvbed_interrupted("kvreplay.tiers.sim:simulate", "trace", "import", "mooncake", src,
                             "-o", tmp_path / "mc.parquet")
    one_interrupted_line(proc, "nothing written")
    assert not (tmp_path / "mc.parquet").exists()
    _no_litter(tmp_path)


def test_device_run_interrupted_writes_nothing(tmp_path):
    proc = kvbed_interrupted("devicemodels.synthetic:auto_iops", "device", "run", "--device", "conv", "--pages",
                             "65536", "--param", "blocks_per_line=1", "--writes-x", "1", "-o", tmp_path / "dev")
    one_interrupted_line(proc, "during the simulation", "nothing written")
    assert not (tmp_path / "dev" / "result.json").exists()
    _no_litter(tmp_path)


XO = ("crossover", "--tiers", "remote", "--models", "llama-3-8b", "--queue-depths", "1", "--max-tokens", "64")


def test_crossover_interrupted(tmp_path):
    out = tmp_path / "xo"
    proc = kvbed_interrupted("kvreplay.crossover:size_grid", *XO, "-o", out)
    one_interrupted_line(proc, "during the sweep", "nothing written")
    assert not out.exists()
    ok(kvbed(*XO, "-o", out))
    assert json.loads((out / "crossover.json").read_text())["incomplete"] is False
    # while writing: the files at hand are finished, the older plot removed, crossover.json says so
    proc = kvbed_interrupted("kvreplay.crossover:_write_csv", *XO, "-o", out)
    one_interrupted_line(proc, "while writing results", "marked incomplete")
    doc = json.loads((out / "crossover.json").read_text())
    assert doc["incomplete"] is True and doc["interrupted"] == "writing results"
    assert not (out / "crossover.png").exists()
    proc = kvbed_interrupted("testbed.crossover_plot:plot", *XO, "-o", out)
    one_interrupted_line(proc, "while plotting")
    doc = json.loads((out / "crossover.json").read_text())
    assert doc["incomplete"] is True and doc["interrupted"] == "plotting" and (out / "crossover.png").exists()
    _no_litter(tmp_path)


def test_report_interrupted_writes_nothing(trace, tmp_path):
    runs = []
    for h in ("none", "oracle"):
        ok(kvbed("replay", trace, "--hints", h, "-o", tmp_path / h, "-q", "--no-plots"))
        runs.append(tmp_path / h)
    proc = kvbed_interrupted("testbed.plots:comparison_plot", "report", *runs)
    one_interrupted_line(proc, "nothing written", "not created")
    assert not (tmp_path / "report-none-oracle").exists()
    _no_litter(tmp_path)


def test_study_interrupted_while_writing_its_report(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('[study]\nname = "x"\nseeds = [0]\n[trace]\nsynth = true\nduration_s = 20\n[replay]\n'
                    'device = "fdp"\n[axes]\n"replay.hints" = ["none", "oracle"]\n')
    out = tmp_path / "study"
    ok(kvbed("study", "run", spec, "-o", out, "-j", "1", "-q"))
    assert (out / "report.md").exists() and json.loads((out / "study.json").read_text())["incomplete"] is False
    proc = kvbed_interrupted("testbed.study.report:findings", "study", "run", spec, "-o", out, "-j", "1", "-q")
    one_interrupted_line(proc, "while writing the report", f"kvbed study report {out}")
    assert not (out / "report.md").exists() and not (out / "report.html").exists()
    assert json.loads((out / "study.json").read_text())["incomplete"] is False  # every point is done
    ok(kvbed("study", "report", out))
    assert (out / "report.md").exists()
    _no_litter(out)
