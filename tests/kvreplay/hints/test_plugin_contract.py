"""A plugin that breaks the hint-policy contract is refused in one line naming it (exit 2, nothing written):
classes checked on the policy's own output before any cast (65537 is not class 1, 1.9 not class 1, a list is
not an array), one class per write, trace columns read only when declared, parameters with defaults; an
exception in the plugin's own code keeps its traceback and says which policy raised it."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from kvbed.core.errors import KvbedError
from kvreplay import schema as S
from kvreplay.hints import HINTS, HintPolicy
from kvreplay.hints.base import checked_classes
from kvreplay.hints.testing import OnlineCheckFailed, check_online, classes_of
from tests.support.cli import kvbed, one_line_error

BAD = textwrap.dedent('''
    from dataclasses import dataclass

    import numpy as np

    from kvbed.core.params import param
    from kvreplay.hints import HintPolicy


    class TooHigh(HintPolicy):
        knows = "nothing"

        def _assign(self, batch, actions, writes):
            return np.full(len(writes), 65537, np.int64)  # int16 would make it class 1


    class Fractional(HintPolicy):
        knows = "nothing"

        def _assign(self, batch, actions, writes):
            return np.full(len(writes), 1.9)  # int16 would make it class 1


    class AsList(HintPolicy):
        knows = "nothing"

        def _assign(self, batch, actions, writes):
            return [0] * len(writes)


    class OneShort(HintPolicy):
        knows = "nothing"

        def _assign(self, batch, actions, writes):
            return np.zeros(max(len(writes) - 1, 0), np.int16)


    class ReadsKind(HintPolicy):
        knows = "the kind of the object"

        def _assign(self, batch, actions, writes):
            return (batch["kind"][writes] > 0).astype(np.int16)


    @dataclass(frozen=True)
    class NoDefaultParams:
        step_bytes: int


    class NoDefault(HintPolicy):
        knows = "nothing"
        Params = NoDefaultParams

        def _assign(self, batch, actions, writes):
            return np.zeros(len(writes), np.int16)


    class Crashes(HintPolicy):
        knows = "nothing"

        def _assign(self, batch, actions, writes):
            return np.zeros(len(writes), np.int16) + {}["boom"]  # a bug of its own
''')


@pytest.fixture
def bad(plugin_module):
    return plugin_module("bad_hints", BAD)


@pytest.fixture(scope="module")
def trace(lifetimes_trace):
    return lifetimes_trace(3000)


def test_classes_are_checked_before_the_cast():
    with pytest.raises(KvbedError, match=r"hint policy 'p' returned a class outside \[0, 8\): 65537"):
        checked_classes("p", np.array([0, 65537]), 2, 8)
    with pytest.raises(KvbedError, match="dtype float64: classes are integers"):
        checked_classes("p", np.array([1.9, 0.0]), 2, 8)
    with pytest.raises(KvbedError, match="returned a list, not a numpy array"):
        checked_classes("p", [1, 0], 2, 8)
    with pytest.raises(KvbedError, match="returned 1 classes for 2 writes"):
        checked_classes("p", np.array([1]), 2, 8)
    with pytest.raises(KvbedError, match=r"outside \[0, 8\): -1"):
        checked_classes("p", np.array([-1, 3], np.int64), 2, 8)
    got = checked_classes("p", np.array([7, 0], np.uint8), 2, 8)
    assert got.dtype == np.int16 and got.tolist() == [7, 0]


@pytest.mark.parametrize("name, fragment", [
    ("TooHigh", r"returned a class outside \[0, 4\): 65537"),
    ("Fractional", "returned classes of dtype float64"),
    ("AsList", "returned a list, not a numpy array"),
    ("OneShort", r"returned \d+ classes for \d+ writes"),
    ("ReadsKind", "reads the trace column 'kind' .* without declaring it: add 'kind' to its `columns`"),
])
def test_check_online_refuses_what_a_replay_would(bad, trace, name, fragment):
    with pytest.raises(OnlineCheckFailed, match=fragment):
        check_online(HINTS.get(f"bad_hints:{name}"), trace)


@pytest.mark.parametrize("name, fragments", [
    ("TooHigh", ["hint policy 'bad_hints:TooHigh' returned a class outside [0, 8): 65537"]),
    ("Fractional", ["'bad_hints:Fractional'", "dtype float64"]),
    ("AsList", ["'bad_hints:AsList'", "returned a list"]),
    ("OneShort", ["'bad_hints:OneShort'", "classes for", "one class per write"]),
    ("ReadsKind", ["'bad_hints:ReadsKind'", "add 'kind' to its `columns`"]),
    ("NoDefault", ["'bad_hints:NoDefault'", "NoDefault.Params field 'step_bytes' has no default"]),
])
def test_a_contract_broken_during_a_replay_is_one_line_exit_2_and_nothing_written(bad, trace, tmp_path, name,
                                                                                   fragments):
    out = tmp_path / "out"
    extra = ["--param", "step_bytes=1MiB"] if name == "NoDefault" else []
    one_line_error(kvbed("replay", trace, "--hints", f"bad_hints:{name}", *extra, "-o", out, "-q", "--no-plots"),
                   *fragments)
    assert not out.exists()


def test_an_exception_in_the_plugins_code_keeps_its_traceback_and_names_the_policy(bad, trace, tmp_path):
    res = kvbed("replay", trace, "--hints", "bad_hints:Crashes", "-o", tmp_path / "out", "-q", "--no-plots")
    assert isinstance(res.exception, KeyError) and res.exception.args == ("boom",)
    assert res.exception.__notes__[-1] == ("kvbed: the exception above was raised by hint policy "
                                           "'bad_hints:Crashes' (in its _assign)")
    assert not (tmp_path / "out").exists()


def test_a_declared_column_is_read(bad, trace):
    class DeclaresKind(HINTS.get("bad_hints:ReadsKind")):
        columns = ("kind",)

    got = classes_of(DeclaresKind, S.TraceReader(trace).iter_batches(["ts_ns", "op", "obj_id", "tier", "nbytes",
                                                                       "kind"]))
    assert len(got) > 1000


class _CountsWrong(HintPolicy):
    """Overrides assign itself, skipping the check: the replay checks again."""

    knows = "nothing"

    def _assign(self, batch, actions, writes):
        return np.zeros(len(writes), np.int16)

    def assign(self, batch, actions, writes):
        return np.zeros(len(writes) + 1, np.int16)


def test_the_replay_checks_a_plugin_that_overrides_assign(trace):
    from kvreplay.replay.engine import Replay, build_config

    r = Replay(build_config(str(trace), "fdp", "none", []))
    r.prepare = (lambda orig: lambda: (orig(), setattr(r, "policy", _CountsWrong(r.n_classes))))(r.prepare)
    with pytest.raises(KvbedError, match=r"hint policy '_CountsWrong' returned \d+ classes for \d+ writes"):
        r.run()


SIZE = textwrap.dedent('''
    import numpy as np

    from kvreplay.hints import HintPolicy


    class Halves(HintPolicy):
        knows = "the order of writes"

        def _assign(self, batch, actions, writes):
            return ((self.writes_seen + np.arange(len(writes))) % 2).astype(np.int16)
''')


def test_a_plugin_run_records_its_file_and_code_and_refuses_a_rerun_on_changed_code(trace, tmp_path, monkeypatch):
    import hashlib
    import json

    from tests.support.cli import ok

    work = tmp_path / "work"
    work.mkdir()
    src = work / "halves.py"
    src.write_text(SIZE)
    monkeypatch.chdir(work)
    out = tmp_path / "run"
    ok(kvbed("replay", trace, "--hints", "./halves.py:Halves", "-o", out, "-q", "--no-plots"))
    cfg = json.loads((out / "config.json").read_text())
    want = {"file": str(src.resolve()), "sha256": "sha256:" + hashlib.sha256(src.read_bytes()).hexdigest()}
    assert cfg["hints"] == f"{src.resolve()}:Halves"  # not ./halves.py, which depends on the cwd
    assert cfg["hint_source"] == want
    job = json.loads((out / "result.json").read_text())["jobs"][0]
    assert job["hint_policy"]["source"] == want and job["hint_policy"]["name"] == cfg["hints"]
    writes = [c["writes"] for c in job["per_class"]]
    assert writes[0] > 1000 and abs(writes[0] - writes[1]) <= 1 and sum(writes[2:]) == 0

    monkeypatch.chdir(tmp_path)  # elsewhere: the same file by its absolute path
    HINTS.forget_plugins()
    ok(kvbed("replay", "--config", out / "config.json", "-o", tmp_path / "again", "-q", "--no-plots"))
    assert json.loads((tmp_path / "again" / "result.json").read_text())["jobs"][0]["waf"] == job["waf"]

    src.write_text(SIZE.replace("% 2", "% 3"))
    for mod in [m for m in sys.modules if m.startswith("kvbed_plugin_") and "halves" in m]:
        del sys.modules[mod]  # a new process would load the file again
    HINTS.forget_plugins()
    res = kvbed("replay", "--config", out / "config.json", "-o", tmp_path / "changed", "-q", "--no-plots")
    one_line_error(res, "its code changed since the run", str(src.resolve()), "rerun without --config")
    assert not (tmp_path / "changed").exists()

    del cfg["hint_source"]  # a config that does not say which code ran
    (tmp_path / "old.json").write_text(json.dumps(cfg))
    one_line_error(kvbed("replay", "--config", tmp_path / "old.json", "-o", tmp_path / "old", "-q"),
                   "records no hash of its code")


def test_a_module_plugin_records_its_modules_file(plugin_module):
    from kvreplay.hints.provenance import plugin_source
    from kvreplay.replay.engine import build_config

    d = plugin_module("halves_mod", SIZE)
    cfg = build_config(str(d / "t.parquet"), "fdp", "halves_mod:Halves", [])
    assert cfg.hints == "halves_mod:Halves"
    assert cfg.hint_source["file"] == str((d / "halves_mod.py").resolve())
    assert build_config(str(d / "t.parquet"), "fdp", "hotness", []).hint_source is None
    assert plugin_source("oracle", HINTS.get("oracle")) is None


def test_an_exception_in_a_plugins_init_or_prepare_names_the_policy_once(plugin_module):
    plugin_module("init_hints", textwrap.dedent('''
        import numpy as np
        from kvreplay.hints import HintPolicy

        class Base(HintPolicy):
            knows = "nothing"

            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
                self.table = {}["missing"]

            def _assign(self, batch, actions, writes):
                return np.zeros(len(writes), np.int16)

        class Child(Base):
            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
    '''))
    with pytest.raises(KeyError) as e:
        HINTS.get("init_hints:Child")(8)
    assert e.value.__notes__ == ["kvbed: the exception above was raised by hint policy 'init_hints:Child' "
                                 "(in its __init__)"]


def test_a_column_the_replay_reads_for_itself_is_not_the_policys(bad):
    """request_id is in a multi-tier replay's batches (for its request model), not the policy's to read."""
    cls = HINTS.get("bad_hints:ReadsKind")
    n = 4
    batch = S.EventBatch(ts_ns=np.arange(n), op=np.full(n, S.OP_PERSIST, np.int8), obj_id=np.arange(n),
                         tier=np.full(n, S.TIER_SSD, np.int8), nbytes=np.full(n, 1 << 20), kind=np.zeros(n, np.int8))
    with pytest.raises(KvbedError, match="reads the trace column 'kind'"):
        cls(4).assign(batch, np.ones(n, np.int8), np.arange(n))

    class Declares(cls):
        columns = ("kind",)

    assert Declares(4).assign(batch, np.ones(n, np.int8), np.arange(n)).tolist() == [0] * n


def test_the_default_run_directory_names_a_plugin_by_file_stem_and_class(tmp_path):
    from kvreplay.replay.engine import build_config
    from testbed.runname import run_name

    (tmp_path / "halves.py").write_text(SIZE)
    try:
        cfg = build_config(str(tmp_path / "t.parquet"), "fdp", f"{tmp_path}/halves.py:Halves", [])
        assert run_name(cfg) == "t-fdp-halves.Halves-s0"
    finally:
        HINTS.forget_plugins()
