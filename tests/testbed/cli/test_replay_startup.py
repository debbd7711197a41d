"""What a single replay process loads (issue 19): the replay command imports only what a replay needs, and the
whole run never imports pandas (pyarrow's own numpy conversions would; kvreplay.arrow_numpy replaces them).

Each check runs in a fresh interpreter: ``sys.modules`` of the test process holds whatever other tests loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from tests.support.cli import kvbed, ok
from kvreplay.arrow_numpy import column_to_numpy, from_values, to_numpy
from tests.support.replay_fixtures import two_lifetimes

# packages a replay on the embedded models never needs at import (VM, capture and study are other commands;
# matplotlib comes with the first plot, rich with the first line printed)
NOT_AT_IMPORT = ("matplotlib", "pandas", "rich", "testbed.vm", "testbed.study", "testbed.plots",
                 "testbed.paramdocs", "kvreplay.capture", "kvreplay.agent", "kvbed.study")
NEVER_IN_A_REPLAY = ("pandas", "testbed.vm", "testbed.study", "kvreplay.capture", "kvreplay.agent", "kvbed.study")

_PROBE = """
import json, sys
{code}
print(json.dumps(sorted(sys.modules)))
"""


def _modules_after(code: str) -> list[str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    res = subprocess.run([sys.executable, "-c", _PROBE.format(code=code)], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def _loaded(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted({p for p in prefixes for m in modules if m == p or m.startswith(p + ".")})


def test_the_replay_command_imports_only_what_a_replay_needs():
    mods = _modules_after("from testbed.cli import cli\ncmd = cli.get_command(None, 'replay')\n"
                          "assert cmd.name == 'replay', cmd")
    assert "kvreplay.replay.engine" in mods and "devicemodels" in mods  # it did load the command itself
    assert _loaded(mods, NOT_AT_IMPORT) == []


def test_the_probe_sees_an_unwanted_import():
    assert _loaded(_modules_after("import testbed.plots"), NOT_AT_IMPORT) == ["matplotlib", "testbed.plots"]


def test_a_whole_replay_with_plots_never_imports_pandas(tmp_path):
    """Nor does its plot helper (testbed.plot_helper), which draws the plots: the replay process itself never
    imports matplotlib, and without a helper it draws them itself, still without pandas."""
    trace = two_lifetimes(tmp_path / "t.parquet", n_objects=400)
    out = tmp_path / "run"
    mods = _modules_after(f"from testbed.cli import main\nmain(['replay', {str(trace)!r}, '-o', {str(out)!r}])")
    assert (out / "latency_cdf.png").exists() and "matplotlib" not in mods  # drawn by the helper
    assert _loaded(mods, NEVER_IN_A_REPLAY) == []
    seen = tmp_path / "helper-modules"  # what each drawing process had loaded once it drew
    seen.mkdir()
    mods = _modules_after(f"""
import json, os, sys
import testbed.plots as P
draw = P.draw_jobs
def spy(*a, **k):
    out = draw(*a, **k)
    open(os.path.join({str(seen)!r}, str(os.getpid())), "w").write(json.dumps(sorted(sys.modules)))
    return out
P.draw_jobs = spy
from testbed.cli import main
main(['replay', {str(trace)!r}, '-o', {str(tmp_path / 'run2')!r}])""")
    helpers = [json.loads(f.read_text()) for f in seen.iterdir()]
    assert len(helpers) == 2  # the helper and the second process it forked, neither of them this one
    for helper in helpers:
        assert "matplotlib" in helper and "kvreplay.replay.engine" in helper
        assert _loaded(helper, NEVER_IN_A_REPLAY) == [] == _loaded(mods, NEVER_IN_A_REPLAY)
    no_helper = "import testbed.plot_helper as H\nH.PlotHelper.start = classmethod(lambda cls: None)\n"
    mods = _modules_after(no_helper + f"from testbed.cli import main\n"
                                      f"main(['replay', {str(trace)!r}, '-o', {str(tmp_path / 'run3')!r}])")
    assert "matplotlib" in mods and _loaded(mods, NEVER_IN_A_REPLAY) == []  # drawn here, without pandas


def test_replay_help_still_lists_every_param_key():
    """The --param keys come from every parameter set, imported for --help only."""
    text = ok(kvbed("replay", "--help")).output
    assert "--param keys" in text
    for key in ("ru_bytes", "op_ratio", "fill_ratio", "error_rate"):
        assert key in text, key


def test_plots_from_the_replay_equal_plots_from_its_files(tmp_path):
    """write_run hands the plots the tables it has just written: redrawn from the saved files, in a directory of
    the same name (the titles name it), every PNG is the same, byte for byte."""
    trace = two_lifetimes(tmp_path / "t.parquet", n_objects=600)
    run = tmp_path / "a" / "run"
    ok(kvbed("replay", trace, "--fill-ratio", "1.0", "-o", run, "-q"))
    from testbed.plots import make_run_plots

    again = tmp_path / "b" / "run"
    again.mkdir(parents=True)
    for name in ("config.json", "result.json", "timeseries.parquet", "latency.parquet"):
        (again / name).write_bytes((run / name).read_bytes())
    drawn = make_run_plots(again)
    assert sorted(p.name for p in drawn) == ["latency_cdf.png", "ruh_bytes.png", "waf.png"]
    for p in drawn:
        assert p.read_bytes() == (run / p.name).read_bytes(), p.name


@pytest.mark.parametrize("values, typ", [
    ([1, None, 3, -(2**63), 2**63 - 1], pa.int64()),
    ([0.5, None, float("nan"), 2, -1e300], pa.float64()),
    (["object_read", None, "", "ttft.best", "ünïcode"], pa.string()),
    ([None, None], pa.int64()),
    ([], pa.int64()),
    ([], pa.string()),
    (list(range(20)), pa.int64()),
    (np.arange(5, dtype=np.int64) * 7, pa.int64()),
])
def test_from_values_is_pa_array(values, typ):
    got = from_values(values, typ)
    got.validate(full=True)
    want = pa.array(values, typ)
    assert got.type == want.type and got.null_count == want.null_count and len(got) == len(want)
    assert [repr(v) for v in got.to_pylist()] == [repr(v) for v in want.to_pylist()]  # NaN too
    assert pa.table({"c": got}).equals(pa.table({"c": want})) or typ == pa.float64()  # NaN != NaN


def test_to_numpy_reads_slices_and_chunks():
    arr = pa.array(np.arange(100, dtype=np.uint64) * 3)
    view = to_numpy(arr.slice(17, 40))
    assert view.dtype == np.uint64 and view.tolist() == list(range(51, 171, 3))
    chunked = pa.chunked_array([arr.slice(0, 10), arr.slice(95), pa.array(np.zeros(0, np.uint64))])
    got = column_to_numpy(chunked, np.int64)
    assert got.dtype == np.int64 and got.tolist() == [3 * i for i in list(range(10)) + list(range(95, 100))]
    got[0] = 1  # a new, writable array
    assert column_to_numpy(pa.chunked_array([], pa.int32())).dtype == np.int32
    with_nulls = pa.array([1.5, None])
    assert np.isnan(to_numpy(with_nulls)[1])  # not a view: pyarrow's own conversion


def test_a_replay_with_faults_and_its_report_never_import_pandas(tmp_path):
    """The fault model reads the trace's obj_id statistics and scope names, and ``kvbed report`` reads the runs'
    tables back: through pq.ParquetFile, whose read does not go through the dataset layer that imports pandas."""
    from tests.support import fault_traces as T

    trace = T.write(tmp_path / "power.parquet", T.POWER, nbytes=T.POWER_BYTES)
    run, rep = tmp_path / "run", tmp_path / "rep"
    mods = _modules_after(f"from testbed.cli import main\nmain(['replay', {str(trace)!r}, '--device', 'conv', "
                          f"'--fault', 'version-drift@1ms,scope=m1', '--contract', 'version', '-o', {str(run)!r}, "
                          f"'-q'])")
    assert "kvreplay.faults.analysis" in mods and (run / "faults.png").exists()  # it ran the fault model
    assert _loaded(mods, NEVER_IN_A_REPLAY) == []
    mods = _modules_after(f"from testbed.cli import main\nmain(['report', {str(run)!r}, {str(run)!r}, '-o', "
                          f"{str(rep)!r}])")
    assert (rep / "report.png").exists() and "testbed.results" in mods
    assert _loaded(mods, ("pandas",)) == []
