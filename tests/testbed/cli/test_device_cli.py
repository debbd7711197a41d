"""``kvbed device``: run/list/params through the real CLI group, including one-line errors."""

import json

import pytest
from click.testing import CliRunner

from testbed.cli import cli

SMALL = ["--param", "pages_per_block=16", "--param", "channels=2", "--param", "dies_per_channel=2"]


def run(*args):
    return CliRunner().invoke(cli, ["device", *args], catch_exceptions=False)


def test_run_prints_a_fio_like_summary():
    r = run("run", "--pages", "8192", "--writes-x", "2", "--op", "0.25", *SMALL)
    assert r.exit_code == 0, r.output
    out = r.output
    assert out.startswith("conv: (workload=uniform, writes=2.0x") and "gc=greedy" in out
    assert "99.00th=[" in out and "WAF=" in out and "page programs/s" in out
    assert "GC: runs=" in out and "wear: erase count" in out


def test_run_json_and_output_file(tmp_path):
    r = run("run", "--device", "fdp", "--workload", "hotcold", "--pages", "8192", "--writes-x", "1",
            "--op", "0.5", "--param", "ru_bytes=256KiB", *SMALL, "--json", "-o", str(tmp_path / "res"))
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    saved = json.loads((tmp_path / "res" / "result.json").read_text())
    assert saved["job"]["waf"] == res["job"]["waf"] > 1.0
    assert res["config"]["placement"] == "separate" and res["config"]["params"]["fdp"]["ru_bytes"] == 262144
    per = res["job"]["fdp"]["per_ruh"]
    assert per[0]["host_bytes_written"] > per[1]["host_bytes_written"] > 0  # hot on RUH 0, cold on RUH 1
    assert res["job"]["fdp"]["stats_log"]["mbmw"] == res["job"]["media_bytes_written"]
    assert res["sim"]["page_programs_per_s"] > 0
    assert [k for k in res["job"]["latency"]["write"]["lat_ns"]["percentile"]][-1] == "99.990000"


def test_zns_and_cxl_runs():
    r = run("run", "--device", "zns", "--workload", "sequential", "--param", "logical_bytes=64MiB",
            "--param", "zone_bytes=4MiB", "--param", "zone_cap_bytes=3MiB", "--writes-x", "2", "--json")
    assert r.exit_code == 0, r.output
    job = json.loads(r.output)["job"]
    assert job["waf"] == 1.0 and job["zones"]["resets"] > 0
    r = run("run", "--device", "cxl", "--pages", "4096", "--writes-x", "1", "--read-frac", "0.5", "--iops", "1e6")
    assert r.exit_code == 0, r.output
    assert "read: ios=" in r.output and "WAF=1.0000" in r.output


def test_list_and_params():
    r = run("list")
    assert "conv, cxl, cxl-ssd, dram, fdp, zns" in r.output and "d-choices" in r.output and "hotcold" in r.output
    assert all(f"cache policy  {p} " in r.output for p in ("clock", "fifo", "lru", "s3fifo"))
    r = run("params", "zns")
    assert "zone_cap_bytes" in r.output and "page_program_ns" in r.output


@pytest.mark.parametrize("args, msg", [
    (["run", "--device", "ssd"], "unknown device 'ssd'"),
    (["run", "--workload", "zipf"], "unknown workload 'zipf'"),
    (["run", "--op", "0.001", "--pages", "65536"], "too small for GC to make progress"),
    (["run", "--param", "nruh=4"], "unknown parameter 'nruh'"),
    (["run", "--gc", "lru"], "gc_policy: expected one of cost-benefit, d-choices, fifo, greedy, random, got 'lru'"),
    (["run", "--device", "zns", "--workload", "uniform"], "only takes sequential writes"),
    (["run", "--device", "cxl", "--op", "0.1"], "does not apply to device cxl"),
    (["run", "--pages", "0"], "--pages must be positive"),
    # a rate <= 0 would silently become "every op arrives at t=0", a saturated run
    (["run", "--iops", "-5"], "--iops must be > 0, got -5"),
    (["run", "--iops", "0"], "--iops must be > 0, got 0"),
    (["run", "--iops", "nan"], "--iops must be > 0, got nan"),
    (["run", "--load", "0"], "--load must be > 0, got 0"),
    (["run", "--load", "-1"], "--load must be > 0, got -1"),
])
def test_errors_are_one_line_with_exit_2(args, msg):
    r = CliRunner().invoke(cli, ["device", *args])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("kvbed: error: ") and msg in lines[0], r.output


def test_an_output_dir_that_cannot_be_made_is_refused_before_the_run(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    r = CliRunner().invoke(cli, ["device", "run", "--pages", "4096", "--writes-x", "0.1", *SMALL,
                                 "-o", str(blocker / "sub")])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("kvbed: error: ") and "not a directory" in lines[0], r.output
    assert blocker.read_text() == "x"
