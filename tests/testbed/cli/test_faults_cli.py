"""``kvbed replay --fault/--contract/--fault-file``: bad specs are one line naming the field (exit 2), runs are
reproducible from config.json, contracts cost real device bytes, and the VM path says it is not there yet."""

from __future__ import annotations

import json

import pytest

from tests.support import fault_traces as T
from tests.support.cli import kvbed, ok, one_line_error


@pytest.fixture(scope="module")
def power(tmp_path_factory):
    return T.write(tmp_path_factory.mktemp("fc") / "power.parquet", T.POWER, nbytes=T.POWER_BYTES)


@pytest.mark.parametrize("args,fragments", [
    (["--fault", "meteor@1s"], ["--fault 'meteor@1s'", "unknown fault kind 'meteor'", "power-loss"]),
    (["--fault", "power-loss@2s"], ["--fault 'power-loss@2s'", "at_ns=2000000000", "outside the trace",
                                    "503000000"]),
    (["--fault", "media-error@1ms,rate_per_bit=1.5"], ["rate_per_bit must be in [0, 1], got 1.5"]),
    (["--fault", "media-error@1ms,rate_per_bit=-0.1"], ["rate_per_bit must be in [0, 1]"]),
    (["--fault", "tier-loss@1ms,tier=cxl"], ["tier=cxl", "the trace has no cxl events", "gpu (6 events)"]),
    (["--fault", "partial-offload@1ms,tier=remote"], ["tier=remote", "no remote events"]),
    (["--fault", "power-loss@1ms,index=maybe"], ["index: expected one of kept, lost, stale"]),
    (["--fault", "power-loss@1ms,colour=red"], ["unknown parameter 'colour'"]),
    (["--fault", "power-loss"], ["expected KIND@TIME"]),
    (["--fault", "stale-index@1ms,age_ns=-1s"], ["age_ns must be >= 0"]),
    (["--fault", "version-drift@1ms,scope=m9"], ["scope=m9", "no such scope"]),
    (["--contract", "crc64"], ["contract: expected one of checksum, full, lease, none, version"]),
    (["--fault", "power-loss@1ms", "--as-fast-as-possible"], ["--as-fast-as-possible"]),
    (["--fault", "power-loss@1ms", "--device", "zns"], ["zns", "not yet"]),
    (["--fault", "media-error@1ms", "--target", "vm"], ["--target vm: the guest takes one power-loss fault",
                                                        "media-error", "--target embedded"]),
    (["--fault", "power-loss@1ms", "--fault", "power-loss@2ms", "--target", "vm"], ["one power-loss fault (got 2"]),
    (["--contract", "checksum", "--target", "vm"], ["got 0: none", "a contract alone"]),
    (["--fault", "power-loss@1ms", "--target", "vm", "--param", "backing=null"], ["needs backing=file"]),
    (["--fault", "power-loss@1ms", "--target", "vm", "--device", "cxl"], ["device cxl is not a conv or fdp"]),
    (["--fault", "power-loss@1ms", "--vm", "nosuchvm"], ["nosuchvm"]),
])
def test_bad_fault_specs(power, tmp_path, args, fragments):
    out = tmp_path / "run"
    one_line_error(kvbed("replay", power, "--device", "conv", *args, "-o", out, "-q"), *fragments)
    assert not out.exists()  # never a half-written output


def test_fault_file(power, tmp_path):
    good = tmp_path / "f.toml"
    good.write_text('[[fault]]\nkind = "partial-offload"\nat = "360ms"\n\n'
                    '[[fault]]\nkind = "media-error"\nat = "450ms"\nobjects = "1"\n')
    ok(kvbed("replay", power, "--device", "conv", "--fault-file", good, "--contract", "checksum",
             *sum((["--param", p] for p in T.ONE_DIE), []), "-o", tmp_path / "r", "-q", "--no-plots"))
    res = json.loads((tmp_path / "r" / "result.json").read_text())["faults"]
    assert [f["kind"] for f in res["injected"]] == ["partial-offload", "media-error"]
    # loads count under the latest fault before them: all four come after the media error
    assert res["injected"][0]["state"]["torn_objects"] == 1 and res["injected"][0]["loads"] == 0
    assert res["injected"][1]["loads"] == 4
    assert res["injected"][1]["outcomes"]["detected"]["objects"] == 2  # 4 (torn) and 1 (media error)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[fault]]\nkind = "media-error"\nat = "1ms"\nrate_per_bit = 7\n')
    one_line_error(kvbed("replay", power, "--fault-file", bad, "-o", tmp_path / "x", "-q"),
                   "bad.toml", "fault[0]", "rate_per_bit must be in [0, 1]")


def test_rerun_from_config_is_identical(power, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ok(kvbed("replay", power, "--device", "conv", "--fault", "power-loss@360ms,flush_ns=100ms",
             "--fault", "version-drift@400ms", "--contract", "full", "--param", "channels=1",
             "--param", "dies_per_channel=1", "-o", a, "-q", "--no-plots"))
    cfg = json.loads((a / "config.json").read_text())
    assert cfg["faults"] == {"fault": "power-loss@360ms,flush_ns=100ms;version-drift@400ms", "contract": "full"}
    ok(kvbed("replay", "--config", a / "config.json", "-o", b, "-q", "--no-plots"))
    assert (a / "result.json").read_text() == (b / "result.json").read_text()
    one_line_error(kvbed("replay", "--config", a / "config.json", "--fault", "power-loss@1ms", "-o", tmp_path / "c"),
                   "--config reruns a saved run")


def test_contract_header_costs_device_bytes(tmp_path):
    # objects of exactly one 1 MiB unit: a header pushes each into a second unit, which the device writes
    full = T.write(tmp_path / "full.parquet", T.POWER, nbytes={o: T.MiB for o in range(1, 5)} | {4: 2 * T.MiB})
    jobs = {}
    for c in ("none", "checksum", "full"):
        ok(kvbed("replay", full, "--device", "conv", "--contract", c, "-o", tmp_path / c, "-q", "--no-plots"))
        jobs[c] = json.loads((tmp_path / c / "result.json").read_text())
    assert "faults" not in jobs["none"]  # contract none and no fault: the run is the plain replay
    assert jobs["none"]["jobs"][0]["user_bytes_written"] == 5 * T.MiB
    for c, hdr in (("checksum", 16), ("full", 48)):
        f = jobs[c]["faults"]["contract"]
        assert f["header_bytes_per_object"] == hdr and f["header_bytes_written"] == 4 * hdr
        assert f["extra_bytes_written"] == 4 * T.MiB and f["extra_bytes_read"] == 3 * T.MiB  # 3 ssd loads
        assert jobs[c]["jobs"][0]["user_bytes_written"] == 9 * T.MiB
        assert jobs[c]["faults"]["total"]["outcomes"]["reused"]["objects"] == 4
    assert jobs["full"]["faults"]["contract"]["index_entry_bytes"] == 24


def test_outcome_plots_from_saved_results(power, tmp_path):
    runs = []
    for c in ("none", "full"):
        out = tmp_path / c
        res = ok(kvbed("replay", power, "--device", "conv", "--fault", "media-error@360ms,objects=1/3",
                       "--contract", c, "-o", out))
        assert "after media-error@360ms,objects=1/3" in res.output
        assert (out / "faults.png").stat().st_size > 0
        runs.append(out)
    ok(kvbed("report", *runs, "-o", tmp_path / "cmp"))
    assert (tmp_path / "cmp" / "outcomes.png").stat().st_size > 0
    res = json.loads((runs[0] / "result.json").read_text())["faults"]["injected"][0]
    assert res["outcomes"]["wrong"]["objects"] == 2 and res["state"]["objects_corrupted"] == 2
