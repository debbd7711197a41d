"""`kvbed replay --target vm` without QEMU: the real agent server loop on loopback, a fake guest device.

The guest side is kvreplay.agent's own request loop (threads, real ZMQ sockets) serving an executor that
keeps no data but answers like a device: a latency of 1000 + 10 x pages ns per op, byte counters, and on
request a refused op, a stall or a lying byte counter. A VM state directory points `--vm fake0` at it,
so the CLI, testbed.vm.replay and the engine run exactly as against a QEMU guest. The real-VM version
of these tests (fdp, zns, cxl under TCG) is tests/testbed/vm/test_vm_qemu.py.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from devicemodels.base import OP_WRITE
from devicemodels.params import CxlParams, FlashParams, ZnsParams
from kvreplay.agent.executor import BaseExecutor, OpRefused
from kvreplay.agent.server import Agent
from tests.support.replay_fixtures import two_lifetimes
from kvbed.core.errors import KvbedError
from kvbed.core.params import to_dict
from testbed.vm import qemu, state
from testbed.vm.replay import VmReplay
from testbed.vm.replay_config import build_vm_config, split_vm_params
from tests.support.cli import kvbed, one_line_error

MiB = 1 << 20
PAGE = 1 * MiB
FLASH = FlashParams(logical_bytes=256 * MiB, page_bytes=PAGE, pages_per_block=1, blocks_per_line=4)


class FakeGuest(BaseExecutor):
    """A namespace of ``pages`` 1 MiB pages that stores nothing; op i (counting from 0) can be refused
    (``fail_at``), stall for ``stall_s`` (``stall_at``), and writes can be under-counted (``lie_bytes``)."""

    kind = "nvme"

    def __init__(self, pages: int, *, fail_at: int = -1, stall_at: int = -1, stall_s: float = 0.0,
                 lie_bytes: int = 0):
        super().__init__()
        self.capacity_pages = pages
        self.fail_at, self.stall_at, self.stall_s, self.lie_bytes = fail_at, stall_at, stall_s, lie_bytes
        self.n = 0

    def info(self):
        return {"kind": "nvme", "page_bytes": 4096, "capacity_pages": self.capacity_pages, "lba_bytes": 4096,
                "nlb": self.capacity_pages * (PAGE // 4096), "fdp": False, "zoned": False, "max_cmd_lbas": 128}

    def log_names(self):
        return []

    def one(self, op, lba, npages, pid, tag, stamp, crc):
        i, self.n = self.n, self.n + 1
        self._check_range(lba, npages)
        if i == self.fail_at:
            raise OpRefused(-5, "injected failure")
        if i == self.stall_at:
            time.sleep(self.stall_s)
        if op == OP_WRITE:
            self.counters.bytes_written += npages * PAGE - self.lie_bytes
        return 1000 + 10 * npages, 1, -1, 0


@pytest.fixture
def fake_vm(tmp_path, monkeypatch):
    """``start(executor, flash=FLASH)`` -> VM name: a state directory whose 'QEMU' is this process."""
    monkeypatch.setenv("KVBED_STATE_DIR", str(tmp_path / "vms"))
    started = []

    def start(ex, flash: FlashParams = FLASH, name: str = "fake0") -> str:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ag = Agent(ex, token="tok", device="conv")
        t = threading.Thread(target=ag.serve, args=(port,), kwargs={"host": "127.0.0.1"}, daemon=True)
        t.start()
        started.append((ag, t))
        d = tmp_path / "vms" / name
        d.mkdir(parents=True)
        state.VmState(name=name, device="conv", dir=str(d), pid=os.getpid(),
                      pid_start=state.proc_start_ticks(os.getpid()), port=port, token="tok", accel="tcg",
                      params={"flash": to_dict(flash), "vm": to_dict(qemu.VmParams())}).save()
        return name

    yield start
    for ag, t in started:
        ag.stop()
        t.join(timeout=10)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    # 300 objects of 1 MiB, one a millisecond; 60% die within ~50 ms, the rest within ~200 ms; half are
    # read back once. Peak live data is a few tens of MiB: it fits FLASH's 256 MiB.
    return two_lifetimes(tmp_path_factory.mktemp("vmreplay") / "t.parquet", n_objects=300, obj_bytes=PAGE,
                         long_life_ns=200_000_000, row_group_rows=500)




def result(run_dir) -> dict:
    return json.loads((Path(run_dir) / "result.json").read_text())


def test_results_say_where_each_figure_comes_from(fake_vm, trace, tmp_path):
    ex = FakeGuest(256)
    name = fake_vm(ex)
    res = kvbed("replay", trace, "--vm", name, "--hints", "oracle", "-o", tmp_path / "r", "-q", "--no-plots")
    assert res.exit_code == 0, res.output
    r = result(tmp_path / "r")
    job = r["jobs"][0]
    assert r["incomplete"] is False and "error" not in r
    assert r["sources"] == job["sources"]
    assert r["sources"]["lat_ns"] == "guest" and r["sources"]["waf"] == "model"
    assert r["sources"]["host_bytes_written"] == "guest"  # no FDP statistics log on this device
    # guest latency: every write here is one 1 MiB page, which the fake guest times at 1000 + 10 ns
    assert job["write"]["lat_ns"]["min"] == job["write"]["lat_ns"]["max"] == 1010
    assert r["vm"]["guest"]["latency"]["write"]["n"] == job["write"]["total_ios"] == 300
    # bytes: agent, model and layout agree on the 300 writes of 1 MiB
    assert job["host_bytes_written"] == r["vm"]["guest"]["bytes_written"] == 300 * PAGE
    assert r["vm"]["model"]["host_bytes_written"] == job["user_bytes_written"] == 300 * PAGE
    checks = {c["check"]: c for c in r["vm"]["cross_checks"]}
    assert set(checks) == {"agent_bytes_written", "model_host_bytes_written"} and r["vm"]["cross_checks_ok"]
    # the model has the VM's recorded geometry, not one sized from the trace
    dp = r["global options"]["device_params"]["flash"]
    assert (dp["logical_bytes"], dp["page_bytes"], dp["blocks_per_line"]) == (256 * MiB, PAGE, 4)
    assert r["target"]["vm"] == name and r["target"]["ephemeral"] is False
    vmj = json.loads((tmp_path / "r" / "vm.json").read_text())
    assert vmj["counters"]["bytes_written"] == 300 * PAGE and vmj["latency"]["write"]["buckets"]
    assert json.loads((tmp_path / "r" / "runtime.json").read_text())["vm"]["ops"] == ex.n == sum(r["vm"]["guest"]["ops"].values())
    # config.json reruns it on the same VM, with the same result (the fake guest's latencies are exact)
    res = kvbed("replay", "--config", tmp_path / "r" / "config.json", "-o", tmp_path / "again", "-q", "--no-plots")
    assert res.exit_code == 0, res.output
    assert result(tmp_path / "again") == r


def test_refused_op_keeps_the_completed_part(fake_vm, trace, tmp_path):
    ex = FakeGuest(256, fail_at=100)
    name = fake_vm(ex)
    res = kvbed("replay", trace, "--vm", name, "-o", tmp_path / "r", "-q", "--no-plots")
    one_line_error(res, "VM fake0: op ", "injected failure", "partial result", str(tmp_path / "r"))
    r = result(tmp_path / "r")
    assert r["incomplete"] is True and "injected failure" in r["error"]
    # ops 0..99 completed; the checks still run on that prefix (the agent answers) and hold
    assert r["vm"]["cross_checks_ok"] is True and r["vm"]["guest"]["errors"] == 1
    done = sum(r["vm"]["guest"]["ops"].values())
    assert done == 100
    assert r["jobs"][0]["user_bytes_written"] == r["vm"]["guest"]["bytes_written"] > 0


def test_stalled_agent_is_a_bounded_error(fake_vm, trace, tmp_path):
    name = fake_vm(FakeGuest(256, stall_at=50, stall_s=6.0))
    t0 = time.monotonic()
    res = kvbed("replay", trace, "--vm", name, "-o", tmp_path / "r", "-q", "--no-plots", "--param",
                "reply_timeout_s=1")
    took = time.monotonic() - t0
    one_line_error(res, "did not answer", "within 1 s", "partial result")
    assert took < 6.0, took  # the 1 s timeout ended it, not the 6 s stall
    r = result(tmp_path / "r")
    assert r["incomplete"] is True and r["vm"]["cross_checks"] == []
    assert "could not be asked" in r["vm"]["cross_checks_skipped"]


def test_failed_cross_check_exits_1_with_a_flagged_line(fake_vm, trace, tmp_path):
    name = fake_vm(FakeGuest(256, lie_bytes=4096))  # the guest under-counts every write by one LBA
    res = kvbed("replay", trace, "--vm", name, "-o", tmp_path / "r", "-q", "--no-plots")
    assert res.exit_code == 1, res.output
    lines = res.stderr.strip().splitlines()
    assert lines == [f"kvbed: cross-check FAILED: agent_bytes_written: expected {300 * PAGE}, observed "
                     f"{300 * (PAGE - 4096)} ({tmp_path / 'r' / 'result.json'})"]
    r = result(tmp_path / "r")
    assert r["vm"]["cross_checks_ok"] is False and r["incomplete"] is False


def test_vm_geometry_is_fixed_and_must_hold_the_trace(fake_vm, trace, tmp_path):
    ex = FakeGuest(256)
    name = fake_vm(ex)
    one_line_error(kvbed("replay", trace, "--vm", name, "--param", "logical_bytes=1GiB", "-o", tmp_path / "a"),
                   "logical_bytes is fixed at `kvbed up`", "logical_bytes=256MiB")
    one_line_error(kvbed("replay", trace, "--vm", name, "--param", "backing=file", "-o", tmp_path / "a"),
                   "are fixed at `kvbed up`")
    one_line_error(kvbed("replay", trace, "--vm", name, "--device", "fdp", "-o", tmp_path / "a"), "is a conv VM")
    one_line_error(kvbed("replay", trace, "--vm", name, "--target", "embedded", "-o", tmp_path / "a"), "--target vm")
    one_line_error(kvbed("replay", trace, "--vm", "nosuch", "-o", tmp_path / "a"), "no VM named 'nosuch'")
    # a power loss kills and restarts QEMU: only on an ephemeral VM of this run
    one_line_error(kvbed("replay", trace, "--vm", name, "--fault", "power-loss@10ms", "-o", tmp_path / "a"),
                   f"kills and restarts QEMU: not on VM {name}", "leave --vm out")
    # a VM whose namespace (16 MiB) cannot hold the trace's live data: refused before any op is sent
    small = fake_vm(FakeGuest(16), flash=FlashParams(logical_bytes=16 * MiB, page_bytes=PAGE, pages_per_block=1,
                                                     blocks_per_line=1, op_ratio=0.5), name="small0")
    one_line_error(kvbed("replay", trace, "--vm", small, "-o", tmp_path / "b"),
                   "VM small0's namespace (fixed at `kvbed up`) is too small for the live data",
                   "logical_bytes of at least", "strict_capacity=false")
    assert ex.n == 0 and not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    # model-only fields are the user's: the model gets them, the VM keeps its geometry
    res = kvbed("replay", trace, "--vm", name, "--param", "op_ratio=25%", "--param", "page_program_ns=100us",
                "-o", tmp_path / "c", "-q", "--no-plots")
    assert res.exit_code == 0, res.output
    fl = result(tmp_path / "c")["global options"]["device_params"]["flash"]
    assert (fl["op_ratio"], fl["page_program_ns"], fl["logical_bytes"]) == (0.25, 100_000, 256 * MiB)


def test_ephemeral_config_and_param_routing(trace):
    rest, vm, link = split_vm_params(["mem_bytes=2GiB", "vm.cpus=1", "batch_ops=64", "link.inflight=4",
                                      "ru_bytes=4MiB", "backing=file", "fill_ratio=0.5"])
    assert (rest, vm, link) == (["ru_bytes=4MiB", "fill_ratio=0.5"], ["mem_bytes=2GiB", "cpus=1", "backing=file"],
                                ["batch_ops=64", "inflight=4"])
    cfg = build_vm_config(str(trace), "fdp", "oracle", ["batch_ops=64", "ru_bytes=4MiB"])
    t = cfg.target
    assert t["ephemeral"] and t["vm"] is None and t["link"]["batch_ops"] == 64
    assert t["vm_params"]["backing"] == "null"  # an ephemeral VM's namespace costs no host disk by default
    assert build_vm_config(str(trace), "zns", "none", ["backing=file"]).target["vm_params"]["backing"] == "file"
    with pytest.raises(KvbedError, match="no VM device 'cxl-ssd'"):
        build_vm_config(str(trace), "cxl-ssd", "none")
    with pytest.raises(KvbedError, match="backing: expected one of file, null, got"):
        build_vm_config(str(trace), "fdp", "none", ["backing=tmpfs"])
    with pytest.raises(KvbedError, match="precondition"):
        VmReplay(build_vm_config(str(trace), "fdp", "none", ["precondition=0.5"]))


def test_ephemeral_geometry_is_fitted_to_what_qemu_emulates(trace):
    """CXL memory comes in 256 MiB granules: the model gets the VM's rounded size, and the sizing record
    says so; a sized geometry QEMU cannot emulate is a one-line error naming the field."""
    rep = VmReplay(build_vm_config(str(trace), "cxl", "none"))
    fitted = rep._fit({"cxl": CxlParams(cxl_bytes=40 * MiB, page_bytes=PAGE)})
    assert fitted["cxl"].cxl_bytes == 256 * MiB and fitted["cxl"].page_bytes == PAGE
    with pytest.raises(KvbedError, match="power of two >= 64"):
        rep._fit({"cxl": CxlParams(cxl_bytes=256 * MiB, page_bytes=3 * MiB)})
    rep = VmReplay(build_vm_config(str(trace), "zns", "none"))
    bad = {"flash": FlashParams(logical_bytes=96 * MiB, page_bytes=PAGE, pages_per_block=1),
           "zns": ZnsParams(zone_bytes=24 * MiB, zone_cap_bytes=12 * MiB)}
    with pytest.raises(KvbedError, match="cannot be emulated by QEMU: zone_bytes must be a power of two"):
        rep._fit(bad)


def test_a_small_vm_evicts_when_strict_capacity_is_off(fake_vm, trace, tmp_path):
    """strict_capacity=false: the layout evicts by the tier's policy to fit the VM's 16 MiB namespace, and the
    guest, the model and the layout still agree on every byte written."""
    small = fake_vm(FakeGuest(16), flash=FlashParams(logical_bytes=16 * MiB, page_bytes=PAGE, pages_per_block=1,
                                                     blocks_per_line=1, op_ratio=0.5), name="small0")
    res = kvbed("replay", trace, "--vm", small, "--param", "strict_capacity=false", "-o", tmp_path / "r", "-q",
                "--no-plots")
    assert res.exit_code == 0, res.output
    r = result(tmp_path / "r")
    lay = r["jobs"][0]["layout"]
    assert lay["forced_evictions"] > 0 and r["vm"]["cross_checks_ok"] is True
    assert r["vm"]["guest"]["bytes_written"] == r["jobs"][0]["user_bytes_written"] == 300 * PAGE
