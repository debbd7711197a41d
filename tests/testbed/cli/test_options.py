"""Every CLI option that is a parameter takes the same path as ``--param`` (issue 9): for each such option
of replay, device run, trace import and trace synth, the option and the ``--param`` pair give the same
parameters, and giving both is refused. The option lists come from the dataclasses, so a new option is
tested by being declared."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.support.cli import kvbed, ok, one_line_error
from tests.support.replay_fixtures import two_lifetimes
from kvbed.core.params import choices_of, describe, format_value, with_options


def _other_value(cls, name):
    """A valid value of field ``name`` other than its default, as a user would type it."""
    f = {x.name: x for x in dataclasses.fields(cls)}[name]
    d = f.default
    choices = choices_of(f)
    if choices:
        return next(c for c in choices if c != d)
    if isinstance(d, bool):
        return str(not d).lower()
    special = {"profile_weights": "chat=1,rag=1", "ssd_kind_tenants": "batch=quantized", "ttl_tenants": "chat=60",
               "fill_ratio": "0.5", "precondition": "0.25", "quantized_ratio": "0.25", "compressed_ratio": "0.2",
               "rag_followup_prob": "0.5", "tier": "cpu", "cxl_bytes": "64GiB"}
    if name in special:
        return special[name]
    if isinstance(d, int):
        return format_value(name, d * 2 if d else 1)
    if isinstance(d, float):
        return str(d * 2 if d else 1.5)
    raise AssertionError(f"no test value for {cls.__name__}.{name}")


# ---------------------------------------------------------------------------------------------- replay
REPLAY_OPTIONS = [r["name"] for r in describe(__import__("kvreplay.replay.params", fromlist=["x"]).ReplayParams)
                  if r["cli"]]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return two_lifetimes(tmp_path_factory.mktemp("opt") / "t.parquet", n_objects=300)


@pytest.mark.parametrize("name", REPLAY_OPTIONS)
def test_replay_option_equals_param(trace, name):
    from kvreplay.replay.config import build_config
    from kvreplay.replay.params import ReplayParams

    v = _other_value(ReplayParams, name)
    if name == "time_scale":
        v = "2.0"
    by_param = build_config(trace, "fdp", "none", [f"{name}={v}"]).to_dict()
    by_option = build_config(trace, "fdp", "none", [], {name: True if v == "true" else v}).to_dict()
    assert by_option == by_param
    assert by_param["replay"][name] != dataclasses.asdict(ReplayParams())[name]


@pytest.mark.parametrize("name", REPLAY_OPTIONS)
def test_replay_option_and_param_together_are_refused(trace, tmp_path, name):
    from kvreplay.replay.params import ReplayParams

    v = _other_value(ReplayParams, name)
    flag = ["--" + name.replace("_", "-")] + ([] if v == "true" else [v])
    one_line_error(kvbed("replay", trace, *flag, "--param", f"{name}={v}", "-o", tmp_path / "r"),
                   f"{name} is given twice")
    assert not (tmp_path / "r").exists()


def test_replay_options_reach_the_run(trace, tmp_path):
    """The CLI's options arrive in config.json as the --param pairs do."""
    ok(kvbed("replay", trace, "--fill-ratio", "0.5", "--seed", "3", "--time-scale", "2", "-q", "--no-plots",
             "-o", tmp_path / "a"))
    ok(kvbed("replay", trace, "--param", "fill_ratio=0.5", "--param", "seed=3", "--param", "time_scale=2", "-q",
             "--no-plots", "-o", tmp_path / "b"))
    a, b = (json.loads((tmp_path / d / "config.json").read_text()) for d in "ab")
    assert a == b and a["replay"]["fill_ratio"] == 0.5 and a["device_params"]["flash"]["seed"] == 3


# ---------------------------------------------------------------------------------------------- device run
def _device_params(*args):
    res = ok(kvbed("device", "run", "--writes-x", "0.2", "--warmup-x", "0", "--json", *args))
    return json.loads(res.output)["config"]["params"]


@pytest.mark.parametrize("option,param", [
    (["--op", "0.25"], ["--param", "op_ratio=0.25"]),
    (["--gc", "fifo"], ["--param", "gc_policy=fifo"]),
    (["--pages", "32768"], ["--param", "logical_bytes=128MiB"]),
])
def test_device_run_option_equals_param(option, param):
    base = ["--device", "fdp", "--param", "ru_bytes=1MiB", "--param", "nruh=2"]
    base += [] if option[0] == "--pages" else ["--param", "logical_bytes=64MiB"]
    base += [] if option[0] == "--op" else ["--param", "op_ratio=0.3"]
    assert _device_params(*base, *option) == _device_params(*base, *param)


def test_device_run_op_is_not_lost_beside_other_params():
    """Was: --pages built a probe device from --param alone, so --op 0.25 with ru_bytes=64MiB was refused
    with op_ratio=0.07; now the option goes the --param way and both forms give the same answer."""
    args = ["--device", "fdp", "--pages", "262144", "--param", "ru_bytes=64MiB", "--param", "nruh=2"]
    by_option = _device_params(*args, "--op", "0.4")
    assert by_option == _device_params(*args, "--param", "op_ratio=0.4")
    assert by_option["flash"]["op_ratio"] == 0.4 and by_option["flash"]["logical_bytes"] == 262144 * 4096


def test_device_run_option_and_param_together_are_refused():
    one_line_error(kvbed("device", "run", "--op", "0.2", "--param", "op_ratio=0.3"), "op_ratio is given twice")


# ---------------------------------------------------------------------------------------------- trace import/synth
TIER_FIELDS = [f.name for f in dataclasses.fields(__import__("kvreplay.tiers", fromlist=["x"]).TierSimParams)]


@pytest.mark.parametrize("name", TIER_FIELDS)
def test_tier_option_equals_param(name):
    from kvreplay.tiers import TierSimParams
    from testbed.cli.trace_cmd import build_tier_params

    v = _other_value(TierSimParams, name)
    base = TierSimParams()
    by_option = build_tier_params(base, {name: v}, [])
    assert by_option == build_tier_params(base, {}, [f"{name}={v}"])
    assert getattr(by_option, name) != getattr(base, name)
    with pytest.raises(Exception, match=f"{name} is given twice"):
        build_tier_params(base, {name: v}, [f"{name}={v}"])


def test_policy_option_is_a_base_the_others_refine(tmp_path):
    from kvreplay.tiers import TierSimParams
    from testbed.cli.trace_cmd import build_tier_params

    p = build_tier_params(TierSimParams(), {"policy": ("fifo",), "ssd_policy": "s3fifo"}, ["cpu_policy=clock"])
    assert (p.gpu_policy, p.cpu_policy, p.cxl_policy, p.ssd_policy) == ("fifo", "clock", "fifo", "s3fifo")


@pytest.mark.parametrize("option,param", [
    (["--seed", "3"], ["--param", "seed=3"]),
    (["--duration-s", "60"], ["--param", "duration_s=60"]),
    (["--sessions-per-s", "0.5"], ["--param", "sessions_per_s=0.5"]),
    (["--tenants", "2"], ["--param", "tenants=2"]),
    (["--ssd-policy", "fifo"], ["--param", "ssd_policy=fifo"]),
])
def test_synth_option_equals_param(tmp_path, option, param):
    from kvreplay import schema as S

    small = ["--param", "duration_s=60"] if option[0] != "--duration-s" else []
    ok(kvbed("trace", "synth", "-o", tmp_path / "a.parquet", *small, *option, "--json"))
    ok(kvbed("trace", "synth", "-o", tmp_path / "b.parquet", *small, *param, "--json"))
    a, b = (S.TraceReader(tmp_path / f"{x}.parquet").meta for x in "ab")
    assert a.generator == b.generator and a.source_facts == b.source_facts


def test_synth_option_and_param_together_are_refused(tmp_path):
    one_line_error(kvbed("trace", "synth", "-o", tmp_path / "a.parquet", "--seed", "1", "--param", "seed=2"),
                   "seed is given twice")
    assert not (tmp_path / "a.parquet").exists()


def test_with_options_keeps_pairs_and_adds_given_options():
    assert with_options(["a=1"], {"b": 2, "c": None}) == ["a=1", "b=2"]
    with pytest.raises(Exception, match="b is given twice"):
        with_options(["x.b=1"], {"b": 2})
