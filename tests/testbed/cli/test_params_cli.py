"""``kvbed params``: a KEY of any set, a finished RUN_DIR's values beside the defaults, the sets the replay
sizes itself; unknown parameter keys named with their owner; default run directory names."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from kvbed.core.errors import KvbedError
from kvbed.core.params import describe, split_overrides, with_overrides
from kvreplay.replay.config import build_config
from kvreplay.replay.sizing import AUTO_SIZED, REPLAY_DEFAULTS, sized_by_replay
from testbed.paramdocs import parameter_sets
from testbed.runname import run_name
from tests.support import fault_traces as T
from tests.support.cli import kvbed, ok, one_line_error


# --- kvbed params KEY ------------------------------------------------------------------------------------------

def test_error_rate_is_explained():
    res = ok(kvbed("params", "error_rate"))
    assert res.output.splitlines() == [
        "error_rate  (set hints.noisy-oracle: kvbed replay --hints noisy-oracle; --param KEY, hint.KEY or hints.KEY)",
        "  default: 0.1",
        "  unit:    -",
        "  meaning: share of writes given a wrong class (seeded)",
    ]


@pytest.mark.parametrize("set_name", list(parameter_sets()))
def test_a_key_of_every_set(set_name):
    """The last key of each set (sets read from the code: a new set is covered by itself)."""
    cls, where = parameter_sets()[set_name]
    row = describe(cls)[-1]
    name = f"{set_name}.{row['name']}" if row["name"] in parameter_sets() else row["name"]  # fault.tier-loss.tier
    out = ok(kvbed("params", name)).output
    block = out.split(f"{row['name']}  (set {set_name}: {where})\n", 1)[1].split("\n" + row["name"] + "  (set ")[0] + "\n"
    default = row["default"] if row["default"] != "" else '""'
    assert f"  default: {default}\n" in block
    assert f"  meaning: {row['help']}\n" in block
    assert f"  unit:    {row['unit'] or '-'}\n" in block
    if row["choices"]:
        assert f"  choices: {', '.join(row['choices'])}\n" in block


def test_a_key_of_several_sets_shows_each_and_a_prefix_picks_one():
    out = ok(kvbed("params", "seed")).output
    assert [ln.split("(set ")[1].split(":")[0] for ln in out.splitlines() if ln.startswith("seed  (set ")] == \
        ["replay", "flash", "synth"]
    one = ok(kvbed("params", "fdp.ru_bytes")).output
    assert one.splitlines()[:4] == ["ru_bytes  (set fdp: device fdp)", "  default: 16MiB", "  unit:    bytes",
                                    "  meaning: reclaim unit (whole blocks)"]
    assert "kvbed replay sizes it unless given: full stripe of the reclaim group" in one
    assert "choices: clock, fifo, lru, s3fifo" in ok(kvbed("params", "gpu_policy")).output


def test_an_unknown_key_is_one_line_with_near_matches():
    one_line_error(kvbed("params", "erorr_rate"), "unknown parameter set or key 'erorr_rate'",
                   "(did you mean error_rate or learning_rate?)")  # the closest first
    one_line_error(kvbed("params", "zzzz"), "unknown parameter set or key 'zzzz'")
    assert "did you mean" not in kvbed("params", "zzzz").stderr


def test_a_set_named_like_a_key_says_where_the_key_is():
    out = ok(kvbed("params", "tier")).output
    assert "tier: kvbed trace import / synth" in out
    assert out.rstrip().endswith("tier is also a key of replay, fault.partial-offload, fault.tier-loss: `kvbed params replay.tier` shows it")
    assert ok(kvbed("params", "fault.tier-loss.tier")).output.startswith("tier  (set fault.tier-loss: ")


def test_a_set_still_prints_its_table_and_auto_sized_defaults_say_so():
    out = ok(kvbed("params", "fdp")).output
    assert "fdp: device fdp" in out and "16MiB (replay: auto)" in out
    assert "full stripe of the reclaim group" in out  # the caption says how
    flash = ok(kvbed("params", "flash")).output
    assert "4KiB (replay: auto)" in flash and "1MiB mapping unit" in flash
    assert "(replay: auto)" not in ok(kvbed("params", "replay")).output


def test_auto_sized_lists_what_the_replay_sets():
    for g, vals in REPLAY_DEFAULTS.items():
        assert set(vals) <= set(AUTO_SIZED[g]), g
    sizing = {"mode": "auto", "parallelism": {"mode": "given"}, "ru_bytes": 1 << 29}
    assert sized_by_replay(sizing, {"page_bytes"}, ["flash", "fdp"]) == {
        "flash.pages_per_block", "flash.logical_bytes", "fdp.ru_bytes"}


# --- kvbed params RUN_DIR and default run names ------------------------------------------------------------------

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A real replay written under its default name (cwd = a fresh directory)."""
    import os

    trace = T.write(tmp_path_factory.mktemp("pt") / "power.parquet", T.POWER, nbytes=T.POWER_BYTES)
    cwd = tmp_path_factory.mktemp("cwd")
    old = os.getcwd()
    os.chdir(cwd)
    try:
        ok(kvbed("replay", trace, "--device", "fdp", "--contract", "checksum", "--fault", "partial-offload@360ms",
                 "--param", "channels=1", "--param", "dies_per_channel=1", "--param", "nruh=4", "-q", "--no-plots"))
    finally:
        os.chdir(old)
    return cwd / "results" / "power-fdp-none-partial-offload-360ms-contract-checksum-s0"


def test_default_run_name_of_a_real_run(run_dir):
    assert run_dir.is_dir() and (run_dir / "result.json").is_file()


def test_params_run_dir_shows_used_values_beside_defaults(run_dir):
    out = ok(kvbed("params", run_dir)).output
    cfg = json.loads((run_dir / "config.json").read_text())
    rows = {ln.split("│")[1].strip(): [c.strip() for c in ln.split("│")[2:5]]
            for ln in out.splitlines() if ln.count("│") == 5}
    assert rows["page_bytes"] == ["1MiB", "4KiB", "auto-sized: 1MiB mapping unit"]
    assert rows["ru_bytes"][1:] == ["16MiB", "auto-sized: full stripe of the reclaim group, halved on small devices"]
    assert rows["ru_bytes"][0] == f"{cfg['device_params']['fdp']['ru_bytes'] >> 20}MiB"
    assert rows["logical_bytes"][2] == "auto-sized: peak live data / fill_ratio"
    assert rows["channels"] == ["1", "8", "given"] and rows["nruh"] == ["4", "8", "given"]
    assert rows["contract"] == ["checksum", "none", "given"]
    assert rows["op_ratio"] == ["0.07", "0.07", "default"]


def test_params_of_a_directory_that_is_not_a_run(tmp_path):
    (tmp_path / "config.json").write_text('{"x": 1}')
    one_line_error(kvbed("params", tmp_path), "not a replay's config.json")


def _cfg(device="fdp", hints="none", params=()):
    return build_config("/data/mc.trace.parquet", device, hints, list(params))


@pytest.mark.parametrize("cfg, vm, name", [
    (lambda: _cfg(), False, "mc-fdp-none-s0"),
    (lambda: _cfg("zns", "oracle", ["seed=7"]), False, "mc-zns-oracle-s7"),
    (lambda: _cfg(), True, "mc-fdp-vm-none-s0"),
    (lambda: _cfg("conv", params=["fault=power-loss@2s,index=stale;media-error@1.5s"]), False,
     "mc-conv-none-power-loss-2s-media-error-1.5s-s0"),
    (lambda: _cfg(params=["contract=checksum"]), False, "mc-fdp-none-contract-checksum-s0"),
    (lambda: SimpleNamespace(trace="/data/mc.parquet", tiers={"cpu": _cfg("dram"), "cxl": _cfg("cxl-ssd"),
                                                              "ssd": _cfg("fdp", "oracle")}), False,
     "mc-cpu.dram-cxl.cxl-ssd-ssd.fdp.oracle-s0"),
])
def test_default_run_names_say_what_the_run_is(cfg, vm, name):
    assert run_name(cfg(), on_vm=vm) == name


# --- unknown parameter keys name their owner --------------------------------------------------------------------

def test_with_overrides_names_the_set_and_its_keys():
    from kvreplay.faults import FAULTS

    cls = FAULTS.get("power-loss").Params
    with pytest.raises(KvbedError) as e:
        with_overrides(cls(), {"idx": "stale"}, label="fault power-loss")
    keys = ", ".join(f.name for f in dataclasses.fields(cls))
    assert str(e.value) == f"--param: unknown parameter 'idx' of fault power-loss (did you mean index?); its keys: {keys}"
    with pytest.raises(KvbedError, match=r"unknown parameter 'idx' of PowerLoss\.Params"):  # no label: not "Params"
        with_overrides(cls(), {"idx": "stale"})


def test_split_overrides_lists_the_keys_by_owner():
    from devicemodels.params import FdpParams
    from kvreplay.replay.params import ReplayParams

    with pytest.raises(KvbedError) as e:
        split_overrides(["nruhs=4"], {"replay": ReplayParams, "fdp": FdpParams}, labels={"fdp": "device fdp"})
    msg = str(e.value)
    assert msg.startswith("--param: unknown parameter 'nruhs' for replay, device fdp (did you mean nruh?); keys of "
                          "replay: tier, classes,")
    assert "; device fdp: ru_bytes, nruh, nrg," in msg


@pytest.mark.parametrize("args, fragments", [
    (["replay", "{trace}", "--fault", "power-loss@1ms,idx=stale"],
     ["--fault 'power-loss@1ms,idx=stale': unknown parameter 'idx' of fault power-loss (did you mean index?); "
      "its keys: at_ns, index, stale_ns, flush_ns"]),
    (["replay", "{trace}", "--hints", "noisy-oracle", "--param", "eror_rate=0.2"],
     ["unknown parameter 'eror_rate' for replay, layout, faults, hints noisy-oracle, device fdp",
      "did you mean error_rate?", "hints noisy-oracle: clock, error_rate;"]),
    (["replay", "{trace}", "--device", "zns", "--param", "nruh=4"],
     ["unknown parameter 'nruh'", "device zns: logical_bytes,", "zone_bytes"]),
    (["device", "run", "--device", "cxl", "--param", "ru_bytes=1"],
     ["unknown parameter 'ru_bytes' for device cxl", "keys of device cxl: cxl_bytes,"]),
    (["crossover", "--tiers", "dram", "--param", "lod_ns=1"],
     ["unknown parameter 'lod_ns' for crossover, cost, device dram (did you mean load_ns?)"]),
    (["up", "--device", "fdp", "-p", "mem_byte=1GiB"],
     ["unknown parameter 'mem_byte' for device fdp, VM (did you mean mem_bytes, page_bytes or mdts_bytes?)", "VM: mem_bytes, cpus"]),
])
def test_unknown_keys_name_their_owner(tmp_path, args, fragments):
    trace = T.write(tmp_path / "p.parquet", T.POWER, nbytes=T.POWER_BYTES)
    one_line_error(kvbed(*[str(trace) if a == "{trace}" else a for a in args], "-o", tmp_path / "o")
                   if args[0] in ("replay", "crossover") else kvbed(*args), *fragments)


@pytest.mark.parametrize("pair, fragment", [
    ("horizon=0", "--param horizon: must be > 0, got 0.0"),
    ("test=survivl", "survivl"),
])
def test_a_bad_guard_parameter_is_one_line_and_leaves_no_run(tmp_path, pair, fragment):
    trace = T.write(tmp_path / "p.parquet", T.POWER, nbytes=T.POWER_BYTES)
    one_line_error(kvbed("replay", trace, "--hints", "readmission", "--param", pair, "-o", tmp_path / "o"), fragment)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value, fragment", [("0", "--param learning_rate=0.0: must be in (0, 1]"),
                                             ("1.5", "--param learning_rate=1.5: must be in (0, 1]"),
                                             ("nan", "learning_rate: expected a number, got 'nan'")])
def test_a_bad_learning_rate_is_one_line_and_leaves_no_run(tmp_path, value, fragment):
    pytest.importorskip("sklearn")
    trace = T.write(tmp_path / "p.parquet", T.POWER, nbytes=T.POWER_BYTES)
    one_line_error(kvbed("replay", trace, "--hints", "learned", "--param", f"learning_rate={value}", "-o",
                         tmp_path / "o"), fragment)
    assert not (tmp_path / "o").exists()
