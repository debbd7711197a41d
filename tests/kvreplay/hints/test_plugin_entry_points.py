"""Installed ``kvbed.hints`` entry points are loaded when named, not before: a broken one (its module does not
import) fails only the command that names it, in one line, and listings mark it broken instead of failing;
one named like a built-in never replaces it, and naming that built-in warns once."""

from __future__ import annotations

import pytest

from kvbed.core.errors import KvbedError
from kvreplay.hints import HINTS
from tests.support.cli import kvbed, ok, one_line_error


@pytest.fixture
def broken_dist(tmp_path, monkeypatch):
    dist = tmp_path / "broken_hints-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-hints\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[kvbed.hints]\nbroken = no_such_module_qq:X\n"
                                           "oracle = no_such_module_qq:Y\n")
    from testbed.cli.replay_cmd import replay

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(replay, "epilog", None)  # made once per process from the sets, on the first --help
    HINTS.forget_plugins()
    yield tmp_path
    monkeypatch.undo()
    HINTS.forget_plugins()


@pytest.fixture(scope="module")
def trace(lifetimes_trace):
    return lifetimes_trace(3000)


def test_a_broken_entry_point_breaks_no_listing(broken_dist, tmp_path):
    res = ok(kvbed("params"))
    assert "hints.broken" in res.output and "BROKEN" in res.output and "no_such_module_qq" in res.output
    assert "hints.hotness" in res.output
    assert "warning" not in res.stderr  # listing every policy names none of them
    res = ok(kvbed("replay", "--help"))
    assert "broken (broken)" in " ".join(res.output.split())
    assert "hints.broken: none (`kvbed params hints.broken`)" in res.output
    ok(kvbed("params", "hints.hotness.window"))
    spec = tmp_path / "s.toml"
    spec.write_text('[study]\nname = "v"\nseeds = [0]\n[trace]\nsynth = true\nduration_s = 30\n'
                    '[replay]\ndevice = "fdp"\n[axes]\n"replay.hints" = ["none", "hotness"]\n')
    ok(kvbed("study", "validate", spec))
    assert HINTS.load_error("broken").startswith("hint policy 'broken' (entry point 'no_such_module_qq:X'")
    assert HINTS.load_error("hotness") is None and HINTS.summary("broken").startswith("BROKEN: ")


def test_a_broken_entry_point_fails_when_named_in_one_line(broken_dist, trace, tmp_path):
    out = tmp_path / "out"
    one_line_error(kvbed("replay", trace, "--hints", "broken", "-o", out, "-q"),
                   "hint policy 'broken'", "cannot load", "ModuleNotFoundError", "no_such_module_qq")
    assert not out.exists()
    with pytest.raises(KvbedError, match="cannot load"):
        HINTS.get("broken")


def test_an_entry_point_named_like_a_built_in_is_not_used_and_naming_it_warns_once(broken_dist, capsys):
    assert "oracle" in HINTS.shadowed() and "oracle" not in HINTS.entry_points()
    assert HINTS.get("oracle").__module__ == "kvreplay.hints.oracle"
    err = capsys.readouterr().err
    assert err.count("kvbed: warning:") == 1 and "entry point 'oracle' = 'no_such_module_qq:Y'" in err
    assert "is not used (give it as no_such_module_qq:Y to use it)" in err
    HINTS.get("oracle")
    assert capsys.readouterr().err == ""
    HINTS.get("hotness")  # no entry point of that name
    assert capsys.readouterr().err == ""
