"""The guest agent and the host client without QEMU.

The NVMe executor runs against a fake device that records every command (so
the MDTS/ZASL/DSM splitting and the placement-id checks are tested exactly),
and the real server loop runs in a thread on loopback behind the real
AgentClient and VmTarget (so pipelining, stop-on-error, timeouts and liveness
are tested with real sockets).
"""

from __future__ import annotations

import os
import socket
import threading
import time

import numpy as np
import pytest

from devicemodels.base import (OP_READ, OP_RUH_UPDATE, OP_TRIM, OP_WRITE, OP_ZONE_APPEND, OP_ZONE_FINISH,
                               OP_ZONE_RESET, op_batch)
from kvreplay.agent import executor as ex_mod
from kvreplay.agent.executor import BaseExecutor, NvmeExecutor, OpRefused
from kvreplay.agent.nvme import DmaBuffer, NsInfo, NvmeError
from kvreplay.agent.server import Agent
from kvreplay.agent.wire import NOT_RUN
from testbed.vm import state
from testbed.vm.client import AgentClient, AgentTimeout, VmDied
from testbed.vm.target import VmOpError, VmTarget
from testbed.vm.vm import Vm


class FakeNvme:
    """Records commands; enforces zone write pointers like a ZNS namespace would."""

    def __init__(self, *, zoned=False, fdp=False, nlb=1 << 16, max_cmd=8, zasl=4, zone=64, max_trim=100):
        self.info = NsInfo(ctrl_path="/dev/fake0", ns_path="/dev/fake0n1", nsid=1, lba_bytes=4096, nlb=nlb,
                           max_cmd_lbas=max_cmd, max_trim_lbas=max_trim, zoned=zoned, zone_lbas=zone if zoned else 0,
                           nr_zones=nlb // zone if zoned else 0, zasl_lbas=zasl, fdp=fdp, nruh=4 if fdp else 0)
        self.buf = DmaBuffer(max_cmd * 4096)
        self.cmds: list[tuple] = []
        self.wp = {z: z for z in range(0, nlb, zone)} if zoned else {}

    def write(self, slba, nlb, addr, *, dspec=None):
        if self.info.zoned:
            z = slba - slba % self.info.zone_lbas
            if slba != self.wp[z]:
                raise NvmeError("opcode 0x01", 0x1BC)  # Zone Invalid Write
            self.wp[z] += nlb
        self.cmds.append(("write", slba, nlb, dspec))

    def read(self, slba, nlb, addr):
        self.cmds.append(("read", slba, nlb))

    def deallocate(self, ranges):
        self.cmds.append(("dsm", list(ranges)))

    def zone_append(self, zslba, nlb, addr):
        got = self.wp[zslba]
        self.wp[zslba] += nlb
        self.cmds.append(("append", zslba, nlb))
        return got

    def zone_action(self, zslba, zsa):
        self.cmds.append(("zone", zslba, zsa))
        if zsa == 4:
            self.wp[zslba] = zslba

    def ruh_update(self, pids):
        self.cmds.append(("ruhu", list(pids)))


def _cols(ops):
    return {k: list(ops[k]) for k in ("op", "lba", "npages", "pid")}


def test_writes_split_at_mdts_and_carry_the_placement_id():
    dev = FakeNvme(fdp=True, max_cmd=8)
    ex = NvmeExecutor(dev)
    out, ran, err = ex.run(_cols(op_batch([OP_WRITE, OP_READ], [10, 100], [20, 3], [2, 0])))
    assert err is None and ran == 2
    assert dev.cmds == [("write", 10, 8, 2), ("write", 18, 8, 2), ("write", 26, 4, 2), ("read", 100, 3)]
    assert list(out["ncmds"]) == [3, 1] and list(out["status"]) == [0, 0]
    assert ex.counters.bytes_written_by_pid == {2: 20 * 4096}
    assert all(v >= 0 for v in out["lat_ns"]) and out["done_ns"][1] >= out["done_ns"][0]


def test_trim_splits_ranges_and_ruh_update_is_one_command():
    dev = FakeNvme(fdp=True, max_trim=100)
    ex = NvmeExecutor(dev)
    out, ran, err = ex.run(_cols(op_batch([OP_TRIM, OP_RUH_UPDATE], [0, 0], [250, 1], [0, 3])))
    assert err is None
    assert dev.cmds == [("dsm", [(0, 100), (100, 100), (200, 50)]), ("ruhu", [3])]


def test_bad_placement_id_stops_the_batch():
    dev = FakeNvme(fdp=True)
    ex = NvmeExecutor(dev)
    out, ran, err = ex.run(_cols(op_batch([OP_WRITE, OP_WRITE, OP_WRITE], [0, 8, 16], [1, 1, 1], [0, 4, 1])),
                           first_index=100)
    assert ran == 2 and "op 101" in err and "placement id 4" in err
    assert list(out["status"]) == [0, -22, NOT_RUN]
    assert len(dev.cmds) == 1  # the refused op and everything after it never reached the device


def test_zns_append_split_at_zasl_and_zone_actions():
    dev = FakeNvme(zoned=True, zasl=4, zone=64)
    ex = NvmeExecutor(dev)
    ops = op_batch([OP_WRITE, OP_ZONE_APPEND, OP_ZONE_FINISH, OP_ZONE_RESET, OP_WRITE],
                   [0, 64 + 7, 128, 3, 1], [5, 10, 1, 1, 1])
    out, ran, err = ex.run(_cols(ops))
    # the last write is off the write pointer of zone 0 after its reset (wp = 0): the device refuses it
    assert ran == 5 and "0x1bc" in err
    assert list(out["lba_out"]) == [-1, 64, -1, -1, -1]
    assert ("append", 64, 4) in dev.cmds and ("append", 64, 2) in dev.cmds
    assert ("zone", 128, 2) in dev.cmds and ("zone", 0, 4) in dev.cmds
    assert list(out["status"][:4]) == [0, 0, 0, 0] and out["status"][4] == 0x1BC


def test_range_and_device_kind_checks():
    ex = NvmeExecutor(FakeNvme(nlb=100))
    out, ran, err = ex.run(_cols(op_batch([OP_WRITE], [95], [10])))
    assert "outside the device" in err
    out, ran, err = ex.run(_cols(op_batch([OP_ZONE_APPEND], [0], [1])))
    assert "not zoned" in err
    out, ran, err = ex.run(_cols(op_batch([OP_RUH_UPDATE], [0], [1])))
    assert "without FDP" in err


# --- the server loop behind the real client --------------------------------------------------------------------------
class MemExecutor(BaseExecutor):
    """In-memory pages; ``fail_at`` makes one page refuse writes; ``delay_s`` slows each op."""

    kind = "mem"

    def __init__(self, pages=1024, fail_at=-1, delay_s=0.0):
        super().__init__()
        self.capacity_pages = pages
        self.fail_at = fail_at
        self.delay_s = delay_s
        self.ran: list[int] = []

    def info(self):
        return {"kind": "nvme", "page_bytes": 4096, "capacity_pages": self.capacity_pages, "lba_bytes": 4096,
                "nlb": self.capacity_pages, "fdp": False}

    def log_names(self):
        return []

    def one(self, op, lba, npages, pid, tag, stamp, crc):
        self._check_range(lba, npages)
        if lba == self.fail_at:
            raise OpRefused(-5, "injected failure")
        if self.delay_s:
            time.sleep(self.delay_s)
        self.ran.append(lba)
        return 1000 + lba, 1, -1, 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def agent(tmp_path):
    """An agent serving a MemExecutor on loopback, and a Vm handle pointing at it."""
    started = []

    def start(executor, token="tok"):
        port = _free_port()
        ag = Agent(executor, token=token, device="mem")
        t = threading.Thread(target=ag.serve, args=(port,), kwargs={"host": "127.0.0.1"}, daemon=True)
        t.start()
        started.append((ag, t))
        st = state.VmState(name="fake", device="conv", dir=str(tmp_path), pid=os.getpid(),
                           pid_start=state.proc_start_ticks(os.getpid()), port=port, token=token)
        return ag, Vm(st)

    yield start
    for ag, t in started:
        ag.stop()
        t.join(timeout=5)


def test_target_pipelines_chunks_in_order(agent):
    ag, vm = agent(MemExecutor())
    tg = VmTarget(vm, batch_ops=3, inflight=2)
    n = 11
    ops = op_batch(np.full(n, OP_WRITE), np.arange(n) * 2, np.ones(n), arrival_ns=np.arange(n) * 10)
    c = tg.submit(ops)
    assert ag.ex.ran == list(range(0, 2 * n, 2))
    assert list(c.lat_ns) == [1000 + 2 * i for i in range(n)]
    assert list(c.done_ns) == [10 * i + 1000 + 2 * i for i in range(n)]  # arrival + guest latency
    assert tg.counters()["ops_write"] == n
    assert tg.logical_pages == 1024 and tg.page_bytes == 4096
    tg.close()


def test_refused_op_keeps_the_completed_part_and_skips_queued_chunks(agent):
    ag, vm = agent(MemExecutor(fail_at=14))
    tg = VmTarget(vm, batch_ops=4, inflight=3)
    n = 20
    ops = op_batch(np.full(n, OP_WRITE), np.arange(n) * 2, np.ones(n))
    with pytest.raises(VmOpError, match="op 7 .*injected failure") as ei:
        tg.submit(ops)
    part = ei.value.partial
    assert len(part) == 8 and list(part.status[:7]) == [0] * 7 and part.status[7] == -5
    assert ag.ex.ran == list(range(0, 14, 2))  # nothing after the refused op reached the device
    # the target stays usable for the next stream
    c = tg.submit(op_batch([OP_WRITE], [100], [1]))
    assert list(c.status) == [0]
    tg.close()


def test_agent_that_stops_answering_times_out_with_partial(agent):
    ag, vm = agent(MemExecutor(delay_s=0.0))
    tg = VmTarget(vm, batch_ops=2, inflight=1, reply_timeout_s=1.0)
    tg.submit(op_batch([OP_WRITE], [0], [1]))
    tg.inject("stall", seconds=3)
    t0 = time.monotonic()
    with pytest.raises(AgentTimeout, match="did not answer") as ei:
        tg.submit(op_batch(np.full(4, OP_WRITE), np.arange(4), np.ones(4)))
    assert time.monotonic() - t0 < 3
    assert len(ei.value.partial) == 0 and "\n" not in str(ei.value)
    tg.close()


def test_dead_vm_is_reported_before_the_timeout(agent):
    ag, vm = agent(MemExecutor(delay_s=0.2))
    deadline = time.monotonic() + 1.5
    vm.alive_reason = lambda: "VM fake: QEMU exited: Kernel panic - not syncing: test" if time.monotonic() > deadline else None
    tg = VmTarget(vm, batch_ops=5, inflight=1, reply_timeout_s=30.0)
    t0 = time.monotonic()
    with pytest.raises(VmDied, match="Kernel panic") as ei:
        tg.submit(op_batch(np.full(40, OP_WRITE), np.arange(40), np.ones(40)))
    assert time.monotonic() - t0 < 3
    assert 0 < len(ei.value.partial) < 40  # the chunks that completed before the VM died
    tg.close()


def test_client_ignores_stale_replies_and_checks_the_token(agent):
    ag, vm = agent(MemExecutor(), token="right")
    c = AgentClient(vm.port)
    rid1 = c.send("stall", {"seconds": 0.5})
    with pytest.raises(AgentTimeout):
        c.recv(rid1, timeout_s=0.1)
    h, _ = c.request("hello", timeout_s=5)  # the late stall reply arrives first and is dropped
    assert h["token"] == "right" and h["device"] == "mem"
    c.close()


def test_unknown_command_and_bad_batch_are_errors_not_crashes(agent):
    from testbed.vm.client import AgentError

    ag, vm = agent(MemExecutor())
    c = AgentClient(vm.port)
    with pytest.raises(AgentError, match="unknown command"):
        c.request("format-disk", timeout_s=5)
    with pytest.raises(AgentError, match="missing columns"):
        c.request("ops", {}, {"op": np.zeros(1, np.int8)}, (("op", "b"),), timeout_s=5)
    with pytest.raises(AgentError, match="only allowed in the guest"):
        c.request("crash", timeout_s=5)  # never panics the host the tests run on
    h, _ = c.request("hello", timeout_s=5)
    assert h["ok"]
    c.close()


def test_executor_module_has_no_host_dependencies():
    # the agent runs on the guest's stock python3: stdlib + pyzmq only
    import ast
    from pathlib import Path

    allowed = {"array", "errno", "time", "zlib", "ctypes", "fcntl", "mmap", "os", "struct", "dataclasses",
               "__future__", "collections", "platform", "sys", "traceback", "zmq", "glob", "subprocess", "json",
               "socket"}
    for f in Path(ex_mod.__file__).parent.glob("*.py"):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module.split(".")[0]]
            else:
                continue
            assert set(names) <= allowed, f"{f.name} imports {names}"


def test_ruh_status_asks_for_exactly_the_descriptors_there_are():
    """QEMU refuses an SGL longer than its transfer (status 0xf) and the 6.12 kernel maps passthrough buffers
    spanning two non-contiguous pages with an SGL of the whole data_len: so RUH status reads the 16-byte
    header, then exactly 16 + 32 x nruhsd bytes, never a generous buffer."""
    import struct

    from kvreplay.agent import nvme as nv

    dev = object.__new__(nv.NvmeDevice)
    dev.buf = DmaBuffer(8192)
    calls = []
    descs = [(0, 0, 0, 4096), (1, 1, 0, 2560), (2, 2, 0, 512)]

    def io(opcode, *, addr=0, data_len=0, cdw10=0, cdw11=0, **kw):
        calls.append((opcode, data_len, cdw10, cdw11))
        full = struct.pack("<14xH", len(descs)) + b"".join(struct.pack("<HHIQ16x", *d) for d in descs)
        dev.buf.mem[:data_len] = full[:data_len]  # the device transfers at most what it has
        return 0

    dev.io = io
    st = dev.ruh_status()
    assert [(c[1], c[3]) for c in calls] == [(16, 3), (16 + 32 * 3, (16 + 32 * 3) // 4 - 1)]
    assert all(c[0] == nv.NVME_CMD_IO_MGMT_RECV and c[2] == 1 for c in calls)
    assert [(s["pid"], s["ruamw_lbas"]) for s in st] == [(0, 4096), (1, 2560), (2, 512)]
