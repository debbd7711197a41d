"""Hint policies from outside kvbed (issue 23): ``--hints module:Class``, ``--hints file.py:Class`` and the
``kvbed.hints`` entry points, through the one registry; the worked example of docs/development/extending.md runs
as written through ``check_online``, a replay and a study; bad specs are one line and exit 2; and
``check_online`` catches a policy that looks ahead."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from kvbed.core.errors import KvbedError
from kvreplay import schema as S
from kvreplay.hints import HINTS, HintPolicy
from kvreplay.hints.testing import OnlineCheckFailed, check_online, classes_of
from tests.support.cli import kvbed, ok, one_line_error
from tests.support.paths import ROOT

DOC = ROOT / "docs" / "development" / "extending.md"


def _example() -> str:
    text = DOC.read_text()
    m = re.search(r"<!-- plugin-example -->\n```python\n(.*?)```", text, re.S)
    assert m, "extending.md lost its plugin example"
    return m.group(1)


@pytest.fixture
def plugin_dir(plugin_module):
    """The doc's example as my_hints.py in a directory outside the repository, importable as my_hints."""
    return plugin_module("my_hints", _example())


@pytest.fixture(scope="module")
def trace(lifetimes_trace):
    return lifetimes_trace(3000)


def _sizes(path) -> np.ndarray:
    b, _ = S.read_trace(path)
    w = (b["tier"] == S.TIER_SSD) & np.isin(b["op"], [S.OP_PERSIST])
    return b["nbytes"][w]


def test_the_worked_example_is_causal_and_classes_by_size(plugin_dir, trace):
    cls = HINTS.get("my_hints:SizeClasses")
    assert cls.__name__ == "SizeClasses" and cls.name == "my_hints:SizeClasses"
    rep = check_online(cls, trace)
    assert rep.writes > 1000 and rep.prefix_writes < rep.writes
    # by hand: the fixture's objects are 4 MiB, 4 pieces of 1 MiB: class 2
    got = classes_of(cls, S.TraceReader(trace).iter_batches(), n_classes=4)
    sizes = _sizes(trace)
    assert len(got) == len(sizes) and set(sizes.tolist()) == {4 << 20}
    assert set(got.tolist()) == {2}


def test_the_worked_example_does_what_its_help_says(plugin_dir):
    """step_bytes: "objects up to this size go to class 0, each doubling one class up" - 1.9 MiB is class 1 (it
    had been class 0, below 2 MiB, with the old code), 2 MiB class 1, 2.1 MiB class 2."""
    from dataclasses import fields

    cls = HINTS.get("my_hints:SizeClasses")
    assert fields(cls.Params)[0].metadata["help"].startswith("objects up to this size go to class 0, each doubling")
    mib = 1 << 20
    sizes = np.array([1, mib - 1, mib, mib + 1, int(1.9 * mib), 2 * mib, int(2.1 * mib), 4 * mib, 4 * mib + 1,
                      8 * mib, 100 * mib], np.int64)
    batch = S.EventBatch(ts_ns=np.arange(len(sizes)), nbytes=sizes, op=np.full(len(sizes), S.OP_PERSIST, np.int8),
                         obj_id=np.arange(len(sizes)), tier=np.full(len(sizes), S.TIER_SSD, np.int8))
    got = cls(8).assign(batch, np.ones(len(sizes), np.int8), np.arange(len(sizes)))
    assert got.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 7]
    assert cls(4).assign(batch, np.ones(len(sizes), np.int8), np.arange(len(sizes))).tolist()[-1] == 3


def test_a_plugin_runs_in_a_replay_by_file_and_by_module(plugin_dir, trace, tmp_path):
    for spec in (f"{plugin_dir}/my_hints.py:SizeClasses", "my_hints:SizeClasses"):
        out = tmp_path / re.sub(r"\W", "_", spec)
        ok(kvbed("replay", trace, "--hints", spec, "--param", "step_bytes=2MiB", "-o", out, "-q", "--no-plots"))
        job = json.loads((out / "result.json").read_text())["jobs"][0]
        hp = job["hint_policy"]
        assert hp["name"] == spec and hp["knows"].startswith("the size of the written object")
        assert hp["offline"] is False
        assert json.loads((out / "config.json").read_text())["hint_params"] == {"step_bytes": 2 << 20}
        # config.json reruns it
        again = tmp_path / (out.name + "-again")
        ok(kvbed("replay", "--config", out / "config.json", "-o", again, "-q", "--no-plots"))
        assert json.loads((again / "result.json").read_text())["jobs"][0]["waf"] == job["waf"]


def test_an_entry_point_of_an_installed_distribution_is_a_policy(plugin_dir, trace):
    dist = plugin_dir / "my_hints-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-hints\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[kvbed.hints]\nsize = my_hints:SizeClasses\n")
    HINTS.forget_plugins()
    assert "size" in HINTS.names() and "size" in HINTS
    assert HINTS.get("size").__name__ == "SizeClasses" and HINTS.get("size").name == "size"
    assert "oracle" in HINTS.names()  # built-ins stay


def test_a_plugin_runs_in_a_study(plugin_dir, tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(f"""
[study]
name = "plugin"
seeds = [0]

[trace]
synth = true
duration_s = 90

[replay]
device = "fdp"

[axes]
"replay.hints" = ["none", "{plugin_dir}/my_hints.py:SizeClasses"]
""")
    out = tmp_path / "out"
    ok(kvbed("study", "run", spec, "-o", out, "-q", "-j", "1"))
    runs = sorted((out / "runs").glob("*/result.json"))
    names = {json.loads(p.read_text())["jobs"][0]["hint_policy"]["name"] for p in runs}
    assert names == {"none", f"{plugin_dir}/my_hints.py:SizeClasses"}, names


@pytest.mark.parametrize("spec, fragments", [
    ("no_such_module_xyz:Cls", ["no_such_module_xyz", "cannot import", "ModuleNotFoundError"]),
    ("{d}/missing.py:Cls", ["no such file", "missing.py"]),
    ("my_hints:Nope", ["has no attribute 'Nope'"]),
    ("my_hints:SizeParams", ["is not a subclass of kvreplay.hints.base.HintPolicy"]),
    ("{d}/broken.py:X", ["cannot import", "SyntaxError"]),
    ("{d}/abstract.py:Half", ["Half is abstract", "_assign"]),
    ("{d}/unknowing.py:Quiet", ["must say what it may know"]),
    ("nosuchpolicy", ["unknown hint policy 'nosuchpolicy'", "module:Class"]),
])
def test_bad_plugin_specs_are_one_line_and_exit_2(plugin_dir, trace, tmp_path, spec, fragments):
    (plugin_dir / "broken.py").write_text("def (:\n")
    (plugin_dir / "abstract.py").write_text("from kvreplay.hints import HintPolicy\nclass Half(HintPolicy):\n"
                                            "    knows = 'x'\n")
    (plugin_dir / "unknowing.py").write_text("import numpy as np\nfrom kvreplay.hints import HintPolicy\n"
                                             "class Quiet(HintPolicy):\n    def _assign(self, b, a, w):\n"
                                             "        return np.zeros(len(w), np.int16)\n")
    spec = spec.format(d=plugin_dir)
    out = tmp_path / "out"
    one_line_error(kvbed("replay", trace, "--hints", spec, "-o", out, "-q"), *fragments)
    assert not out.exists()
    with pytest.raises(KvbedError):
        HINTS.get(spec)
    assert spec not in HINTS


class _LooksAhead(HintPolicy):
    """Class 1 when the written object is evicted later in the same batch: the future, through the batch."""

    knows = "claims the past; reads ahead in its batch"

    def _assign(self, batch, actions, writes):
        ev = set(batch["obj_id"][batch["op"] == S.OP_EVICT].tolist())
        return np.array([1 if o in ev else 0 for o in batch["obj_id"][writes].tolist()], np.int16)


class _OutOfRange(HintPolicy):
    knows = "nothing"

    def _assign(self, batch, actions, writes):
        return np.full(len(writes), self.n_classes, np.int16)


class _SharesObserveState(HintPolicy):
    """Counts the writes in observe and reads the count in _assign: right when each batch is observed just before
    it is assigned, wrong once observe runs ahead (the replay's reading thread)."""

    knows = "the number of writes so far"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.count = 0

    def observe(self, batch, actions, writes):
        self.count += len(writes)
        return len(writes)

    def _assign(self, batch, actions, writes, seen=None):
        first = self.count - seen  # writes before this batch, if observe saw nothing after it
        return np.minimum((first + np.arange(len(writes))) // 500, self.n_classes - 1).astype(np.int16)


class _OldAssign(HintPolicy):
    """A plugin written before observe existed, overriding assign with three arguments."""

    knows = "nothing"

    def _assign(self, batch, actions, writes):
        return np.zeros(len(writes), np.int16)

    def assign(self, batch, actions, writes):
        return super().assign(batch, actions, writes)


def test_check_online_catches_observe_sharing_state_with_assign(trace):
    with pytest.raises(OnlineCheckFailed, match="observe runs ahead of assign"):
        check_online(_SharesObserveState, trace)
    assert len(np.unique(classes_of(_SharesObserveState, S.TraceReader(trace).iter_batches()))) > 1


def test_a_plugin_with_the_old_three_argument_assign_still_replays(trace, tmp_path):
    from kvreplay.replay.engine import Replay, build_config

    cfg = build_config(str(trace), "fdp", "none", [])
    r = Replay(cfg)
    r.prepare = (lambda orig: lambda: (orig(), setattr(r, "policy", _OldAssign(r.n_classes))))(r.prepare)
    job = r.run()["result"]["jobs"][0]
    assert sum(c["writes"] for c in job["per_class"]) == job["per_class"][0]["writes"] > 1000


def test_check_online_catches_look_ahead_out_of_range_and_the_oracle(trace):
    with pytest.raises(OnlineCheckFailed, match="batch boundaries|not causal"):
        check_online(_LooksAhead, trace)
    with pytest.raises(OnlineCheckFailed, match=r"returned a class outside \[0, 4\): 4"):
        check_online(_OutOfRange, trace)
    with pytest.raises(OnlineCheckFailed, match="needs_future"):
        check_online(HINTS.get("oracle"), trace)
    for name in ("none", "predicted", "hotness", "type"):
        assert check_online(HINTS.get(name), trace).writes > 1000


def test_the_docs_study_spec_with_a_plugin_validates(plugin_dir, tmp_path):
    text = DOC.read_text()
    m = re.search(r"```toml\n(\[study\]\nname = \"size-classes\".*?)```", text, re.S)
    assert m, "extending.md lost its study example"
    spec = tmp_path / "s.toml"
    spec.write_text(m.group(1).replace("/home/me/policies/my_hints.py", str(plugin_dir / "my_hints.py")))
    res = ok(kvbed("study", "validate", spec))
    assert "4 points" in res.output, res.output
