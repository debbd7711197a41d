"""VM testbed pieces that need no QEMU: command builder, params, probe, state, image hash, wire, checks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import devicemodels.base as base
from kvreplay.agent import hist, wire
from testbed.cli import cli
from kvbed.core.errors import KvbedError
from testbed.vm import accel, checks, cmdline, image, qemu, state
from testbed.vm.qemu import VmPaths
from tests.support.paths import ROOT

MiB, GiB = 1 << 20, 1 << 30


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("KVBED_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KVBED_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("KVBED_ACCEL", raising=False)


def _paths(tmp_path: Path, disk: bool = True) -> VmPaths:
    return VmPaths(kernel=tmp_path / "vmlinux", initrd=tmp_path / "initrd.img", overlay=tmp_path / "ov.qcow2",
                   disk=(tmp_path / "nvme.raw") if disk else None, console=tmp_path / "console.log",
                   qmp=tmp_path / "qmp.sock")


def _opt(argv: list[str], flag: str, prefix: str) -> str:
    """The value of the ``flag`` argument that starts with ``prefix``."""
    vals = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag and argv[i + 1].startswith(prefix)]
    assert len(vals) == 1, f"expected one {flag} {prefix}..., got {vals}"
    return vals[0]


def _kv(s: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in s.split(",")[1:] if "=" in p)


# --- contract agreement --------------------------------------------------------------------------------
def test_agent_op_codes_match_the_device_contract():
    assert wire.OP_NAMES == base.OP_NAMES
    for name in base.OP_NAMES:
        const = "OP_" + name.upper()
        assert getattr(wire, const) == getattr(base, const), const
    # the wire column types are exactly the contract's dtypes
    for name, code in wire.OP_COLUMNS:
        assert np.dtype(base.OP_DTYPES[name]).itemsize == np.array([], dtype=code).itemsize


# --- command builder -------------------------------------------------------------------------------------
def test_fdp_device_args_derive_from_params(tmp_path):
    p = qemu.resolve_params("fdp", ["ru_bytes=8MiB", "nruh=6", "logical_bytes=2GiB", "page_bytes=4096",
                                    "mdts_bytes=256KiB"])
    argv = cmdline.build_argv("fdp", p, _paths(tmp_path), accel="tcg", host_port=41234, token="t0k")
    subsys = _kv(_opt(argv, "-device", "nvme-subsys,"))
    assert subsys == {"id": "subsys0", "fdp": "on", "fdp.runs": str(8 * MiB), "fdp.nrg": "1", "fdp.nruh": "6"}
    ctrl = _kv(_opt(argv, "-device", "nvme,"))
    assert ctrl["mdts"] == "6"  # 256 KiB = 2^6 x 4 KiB pages
    ns = _kv(_opt(argv, "-device", "nvme-ns,"))
    assert ns["fdp.ruhs"] == "0-5" and ns["logical_block_size"] == "4096"
    assert "hostfwd=tcp:127.0.0.1:41234-10.0.2.15:5555" in _opt(argv, "-netdev", "user,")
    assert "kvbed.token=t0k" in _opt(argv, "-append", "console=")
    assert argv[argv.index("-accel") + 1] == "tcg" and argv[argv.index("-cpu") + 1] == "max"
    assert argv[argv.index("-bios") + 1] == qemu.QBOOT


def test_zns_device_args_derive_from_params(tmp_path):
    p = qemu.resolve_params("zns", ["zone_bytes=32MiB", "zone_cap_bytes=24MiB", "max_open_zones=3",
                                    "max_active_zones=5", "logical_bytes=1GiB", "zasl_bytes=128KiB"])
    argv = cmdline.build_argv("zns", p, _paths(tmp_path), accel="kvm", host_port=5000, token="x")
    ns = _kv(_opt(argv, "-device", "nvme-ns,"))
    assert ns["zoned"] == "true"
    assert ns["zoned.zone_size"] == str(32 * MiB) and ns["zoned.zone_capacity"] == str(24 * MiB)
    assert ns["zoned.max_open"] == "3" and ns["zoned.max_active"] == "5"
    assert _kv(_opt(argv, "-device", "nvme,"))["zoned.zasl"] == "5"  # 128 KiB = 2^5 x 4 KiB
    assert argv[argv.index("-cpu") + 1] == "host"


def test_cxl_device_args_use_seabios_and_no_hypervisor_bit(tmp_path):
    p = qemu.resolve_params("cxl", ["cxl_bytes=512MiB", "mem_bytes=2GiB"])
    argv = cmdline.build_argv("cxl", p, _paths(tmp_path, disk=False), accel="tcg", host_port=5001, token="c")
    assert "-bios" not in argv  # CXL needs SeaBIOS: qboot leaves the CXL windows unassigned
    assert argv[argv.index("-cpu") + 1] == "max,-hypervisor,-erms,-fsrm"
    assert argv[argv.index("-machine") + 1] == "q35,cxl=on"
    assert _opt(argv, "-object", "memory-backend-ram").endswith(f"size={512 * MiB}")
    assert argv[argv.index("-m") + 1] == f"2048M,maxmem={2048 + 4096}M,slots=8"
    assert "memhp_default_state=offline" in _opt(argv, "-append", "console=")
    # every PCI device sits on pcie.0 explicitly (required with the CXL host bridge)
    for a in (x for i, x in enumerate(argv[1:]) if argv[i] == "-device"):
        if a.split(",")[0] in ("virtio-blk-pci", "virtio-net-pci", "pxb-cxl"):
            assert "bus=pcie.0" in a


def test_conv_has_no_placement(tmp_path):
    p = qemu.resolve_params("conv", ["logical_bytes=256MiB"])
    argv = " ".join(cmdline.build_argv("conv", p, _paths(tmp_path), accel="tcg", host_port=5002, token="c"))
    assert "fdp" not in argv and "zoned" not in argv
    assert qemu.device("conv").disk_bytes(p) == 256 * MiB


@pytest.mark.parametrize("device", ["conv", "fdp", "zns"])
def test_null_backing_costs_no_host_disk(tmp_path, device):
    """backing=null: the namespace is QEMU's null-co driver of the namespace's size (reads return zeros),
    no backing file is made, and the rest of the command line is the same as with a file."""
    kv = ["logical_bytes=64GiB", "zone_bytes=64MiB", "zone_cap_bytes=48MiB"] if device == "zns" else ["logical_bytes=64GiB"]
    p = qemu.resolve_params(device, kv + ["backing=null"])
    assert qemu.device(device).disk_bytes(p) == 0
    argv = cmdline.build_argv(device, p, _paths(tmp_path, disk=False), accel="tcg", host_port=5003, token="n")
    drive = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-drive" and "nvm0" in argv[i + 1]]
    assert drive == [f"driver=null-co,size={64 * GiB},read-zeroes=on,if=none,id=nvm0"]
    filed = cmdline.build_argv(device, qemu.resolve_params(device, kv), _paths(tmp_path), accel="tcg", host_port=5003,
                            token="n")
    assert [a for a in argv if "nvm0" not in a] == [a for a in filed if "nvm0" not in a]
    with pytest.raises(KvbedError, match="backing: expected one of file, null, got"):
        qemu.resolve_params(device, kv + ["backing=ram"])


@pytest.mark.parametrize("device,kv,needle", [
    ("zns", ["logical_bytes=100MiB", "zone_bytes=64MiB"], "whole number of zones"),
    ("zns", ["zone_bytes=48MiB", "zone_cap_bytes=48MiB", "logical_bytes=480MiB"], "power of two"),
    ("zns", ["zone_cap_bytes=80MiB"], "exceeds zone_bytes"),
    ("fdp", ["nrg=2"], "nrg must be 1"),
    ("fdp", ["ru_bytes=10000"], "multiple of page_bytes"),
    ("fdp", ["nand_page_bytes=2048", "page_bytes=6144", "logical_bytes=6144000"], "page_bytes must be"),
    ("cxl", ["cxl_bytes=300MiB"], "multiple of 256 MiB"),
    ("conv", ["mem_bytes=64MiB"], "mem_bytes"),
    ("conv", ["mdts_bytes=3000"], "power of two"),
    ("fdp", ["zone_bytes=1GiB"], "unknown parameter"),  # zns key on an fdp device
])
def test_bad_params_are_one_line_errors(device, kv, needle):
    with pytest.raises(KvbedError, match=needle):
        qemu.resolve_params(device, kv)


def test_params_route_to_their_groups_and_round_trip():
    p = qemu.resolve_params("fdp", ["nruh=4", "mem_bytes=2GiB", "logical_bytes=1GiB"])
    assert p["fdp"].nruh == 4 and p["vm"].mem_bytes == 2 * GiB and p["flash"].logical_bytes == GiB
    again = qemu.resolve_params("fdp", base=qemu.params_to_dict(p))
    assert again == p


# --- accel probe --------------------------------------------------------------------------------------------
def _fake_qemu(tmp_path: Path, body: str) -> str:
    f = tmp_path / "fake-qemu"
    f.write_text(f"#!/bin/sh\n{body}\n")
    f.chmod(0o755)
    return str(f)


def test_kvm_probe_passes_when_the_firmware_exits(tmp_path):
    dev = tmp_path / "kvm"
    dev.write_bytes(b"")
    q = _fake_qemu(tmp_path, "exit 85")  # (0x2a << 1) | 1: what isa-debug-exit makes of the probe's byte
    ok, why = accel.probe_kvm(q, kvm_dev=str(dev), modules_dir=str(tmp_path))
    assert ok, why


def test_kvm_probe_never_hangs(tmp_path):
    dev = tmp_path / "kvm"
    dev.write_bytes(b"")
    q = _fake_qemu(tmp_path, "exec sleep 60")  # a KVM that wedges
    t0 = time.monotonic()
    ok, why = accel.probe_kvm(q, timeout_s=1.0, kvm_dev=str(dev), modules_dir=str(tmp_path))
    assert not ok and "did not finish" in why
    assert time.monotonic() - t0 < 5


def test_kvm_probe_refuses_pvm_and_missing_device(tmp_path):
    dev = tmp_path / "kvm"
    dev.write_bytes(b"")
    (tmp_path / "kvm_pvm").mkdir()
    ok, why = accel.probe_kvm("/bin/false", kvm_dev=str(dev), modules_dir=str(tmp_path))
    assert not ok and "kvm_pvm" in why
    ok, why = accel.probe_kvm("/bin/false", kvm_dev=str(tmp_path / "nope"))
    assert not ok and "no " in why


def test_probe_firmware_jumps_to_the_exit_port():
    rom = accel.probe_firmware()
    assert len(rom) == 65536
    assert rom[0xFFF0:0xFFF4] == bytes([0xB0, 0x2A, 0xE6, 0xF4])  # mov al,0x2a; out 0xf4,al


def test_accel_choice_is_cached_and_overridable(tmp_path, monkeypatch):
    q = _fake_qemu(tmp_path, 'echo "QEMU emulator version 10.0.2"')
    key = accel.host_key(q)
    accel.remember(key, "tcg", "unit test verdict")
    c = accel.choose("auto", q)
    assert (c.accel, c.cached, c.reason) == ("tcg", True, "unit test verdict")
    monkeypatch.setenv("KVBED_ACCEL", "kvm")
    assert accel.choose("auto", q).accel == "kvm"
    monkeypatch.setenv("KVBED_ACCEL", "xen")
    with pytest.raises(KvbedError, match="accel must be"):
        accel.choose("auto", q)


# --- state ----------------------------------------------------------------------------------------------------
def test_state_liveness_follows_the_real_process(tmp_path):
    p = subprocess.Popen(["sleep", "30"])
    try:
        d = tmp_path / "state" / "vm0"
        d.mkdir(parents=True)
        st = state.VmState(name="vm0", device="fdp", dir=str(d), pid=p.pid, pid_start=state.proc_start_ticks(p.pid))
        st.save()
        again = state.find("vm0")
        assert again.pid == p.pid and state.is_alive(again)
        assert not state.is_alive(state.VmState(name="x", device="fdp", dir=str(d), pid=p.pid,
                                                 pid_start=again.pid_start + 1))  # recycled pid
        os.kill(p.pid, signal.SIGSTOP)
        end = time.monotonic() + 5
        while not state.is_stopped(p.pid) and time.monotonic() < end:  # delivery is asynchronous
            time.sleep(0.01)
        assert state.is_stopped(p.pid)
        t0 = time.monotonic()
        assert state.kill_process(p.pid, again.pid_start, term_timeout_s=2.0)  # a stopped process too
        assert time.monotonic() - t0 < 3
        p.wait(timeout=5)
        assert not state.is_alive(again)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_zombie_counts_as_dead():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while state.proc_start_ticks(p.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.02)  # exited but not reaped: a zombie
    assert state.proc_start_ticks(p.pid) is None
    p.wait()


def test_status_and_down_of_a_vm_whose_qemu_is_gone(tmp_path):
    from testbed.vm import vm as vm_mod

    p = subprocess.Popen(["true"])
    p.wait()
    d = tmp_path / "state" / "old"
    d.mkdir(parents=True)
    (d / "overlay.qcow2").write_bytes(b"x")
    state.VmState(name="old", device="zns", dir=str(d), pid=p.pid, pid_start=1, port=1234).save()
    rows = vm_mod.status()
    assert [(r["name"], r["state"]) for r in rows] == [("old", "dead")]
    with pytest.raises(KvbedError, match="not running"):
        vm_mod.Vm.attach("old")
    res = CliRunner().invoke(cli, ["down", "old"])
    assert res.exit_code == 0 and "stopped: old" in res.output
    assert not d.exists() and vm_mod.status() == []


def test_bad_names_and_unknown_vm():
    for bad in ("", "Up", "a b", "-x", "x" * 40):
        with pytest.raises(KvbedError, match="VM name"):
            state.check_name(bad)
    with pytest.raises(KvbedError, match="no VM named 'ghost'"):
        state.find("ghost")


# --- image ------------------------------------------------------------------------------------------------------
def test_recipe_hash_covers_recipe_and_agent(tmp_path):
    import shutil

    from testbed.vm import paths

    r, a = tmp_path / "recipe", tmp_path / "agent"
    shutil.copytree(paths.RECIPE_DIR, r)
    shutil.copytree(paths.AGENT_DIR, a, ignore=shutil.ignore_patterns("__pycache__"))
    h0 = image.recipe_hash(r, a)
    assert h0 == image.recipe_hash(paths.RECIPE_DIR, paths.AGENT_DIR)
    (a / "server.py").write_text((a / "server.py").read_text() + "\n# changed\n")
    h1 = image.recipe_hash(r, a)
    (r / "packages.txt").write_text((r / "packages.txt").read_text() + "fio\n")
    h2 = image.recipe_hash(r, a)
    assert len({h0, h1, h2}) == 3


def test_image_list_and_rm(tmp_path):
    root = tmp_path / "cache" / "images"
    for h in ("aaaaaaaaaaaaaaaa", "aaaabbbbbbbbbbbb"):
        d = root / h
        d.mkdir(parents=True)
        for f in image.IMAGE_FILES + ("manifest.json",):
            (d / f).write_text("{}")
    (root / "aaaabbbbbbbbbbbb.build-xyz").mkdir()  # an interrupted build is not an image
    assert [i.hash for i in image.list_images()] == ["aaaaaaaaaaaaaaaa", "aaaabbbbbbbbbbbb"]
    with pytest.raises(KvbedError, match="matches 2 images"):
        image.remove("aaaa")
    assert image.remove("aaaab") == ["aaaabbbbbbbbbbbb"]
    assert image.remove(None, all_=True) == ["aaaaaaaaaaaaaaaa"]
    assert image.list_images() == []


# --- wire, histogram ------------------------------------------------------------------------------------------
def test_wire_round_trip_numpy_to_array():
    ops = base.op_batch(np.array([1, 0, 2], np.int8), np.array([0, 5, 2**40]), np.array([8, 1, 3]),
                        np.array([3, 0, 1]))
    frames = wire.encode({"cmd": "ops", "id": 7}, ops, wire.OP_COLUMNS)
    h, a = wire.decode(frames)
    assert h["cmd"] == "ops" and h["v"] == wire.WIRE_VERSION
    assert list(a["lba"]) == [0, 5, 2**40] and list(a["pid"]) == [3, 0, 1] and a["op"].typecode == "b"


def test_wire_rejects_version_and_shape_mismatch():
    frames = wire.encode({"cmd": "hello"})
    frames[0] = frames[0].replace(b'"v":1', b'"v":99')
    with pytest.raises(wire.WireError, match="wire version"):
        wire.decode(frames)
    good = wire.encode({"cmd": "ops"}, {"a": np.zeros(3, np.int64), "b": np.zeros(2, np.int64)},
                       (("a", "q"), ("b", "q")))
    with pytest.raises(wire.WireError, match="rows"):
        wire.decode(good)
    with pytest.raises(wire.WireError, match="data frames"):
        wire.decode(good[:2])


def test_expected_crc_matches_stamped_pages():
    import zlib

    buf = bytearray(3 * 512)
    for j in range(3):
        wire.stamp_page(buf, j * 512, 512, 40 + j, 9)
    assert wire.expected_crc(40, 3, 512, 9) == zlib.crc32(buf)
    assert wire.expected_crc(40, 3, 512, 8) != zlib.crc32(buf)


@given(st.integers(min_value=0, max_value=10**12))
@settings(max_examples=300, deadline=None)
def test_histogram_buckets_bound_their_values(v):
    lo, hi = hist.bucket_bounds(hist.bucket_index(v))
    assert lo <= v < hi
    if v >= hist.LINEAR:
        assert (hi - lo) / lo <= 1 / hist.SUB


def test_histogram_percentiles():
    h = hist.Histogram()
    for v in range(1, 1001):  # 1..1000 ns
        h.add(v * 1000)
    d = h.to_dict()
    pc = hist.percentiles(d["buckets"], [50, 99])
    # the true p50 is 500 us and p99 990 us; buckets are at most 12.5 % wide
    assert abs(pc["50"] - 500_000) <= 0.125 * 500_000
    assert abs(pc["99"] - 990_000) <= 0.125 * 990_000
    assert d["n"] == 1000 and d["min_ns"] == 1000 and d["max_ns"] == 1_000_000


# --- cross-check arithmetic ----------------------------------------------------------------------------------------
def test_fdp_prediction_by_hand():
    # RU of 10 LBAs, commands of at most 8 LBAs, one handle.
    # write 4: 4 < 10 -> ruamw 6.  write 6: 6 >= 6 -> swap (+6 media), ruamw 10.
    # write 13 = commands 8 + 5: 8 < 10 -> 2; 5 >= 2 -> swap (+2), 3 left -> ruamw 7.
    # RUH update: swap (+7), ruamw 10.  host 23 LBAs, extra media 6 + 2 + 7 = 15, 3 swaps.
    op = np.array([base.OP_WRITE, base.OP_WRITE, base.OP_WRITE, base.OP_RUH_UPDATE, base.OP_WRITE], np.int8)
    npg = np.array([4, 6, 13, 1, 99], np.int64)
    ok = np.array([True, True, True, True, False])  # the last one failed: not counted
    ruamw = np.array([10], np.int64)
    host, extra, swaps = checks.fdp_predict(op, npg, np.zeros(5, np.int64), ok, ruamw, 10, 8, 1)
    assert (host, extra, swaps, int(ruamw[0])) == (23, 15, 3, 10)


def test_fdp_tracker_over_batches_matches_the_device_rule():
    # Same stream as above, fed in two batches (the second partial: its last op was refused), with
    # 4 KiB LBAs and 8 KiB pages: host 23 pages = 46 LBAs; RU 20 LBAs, commands of 16 LBAs.
    info = {"lba_bytes": 4096, "page_bytes": 8192, "max_cmd_lbas": 16}
    before = {"fdp_configs": {"configs": [{"ru_bytes": 20 * 4096}]},
              "fdp_stats": {"host_bytes_written": 1000, "media_bytes_written": 2000},
              "ruh_status": [{"ruamw_lbas": 20}, {"ruamw_lbas": 20}]}
    t = checks.FdpTracker(before, info)

    class Done:
        def __init__(self, n, bad=-1):
            self.status = np.zeros(n, np.int32)
            if bad >= 0:
                self.status[bad] = 2

    t.feed(base.op_batch([base.OP_WRITE, base.OP_WRITE], [0, 9], [2, 3], [0, 0]), Done(2))
    t.feed(base.op_batch([base.OP_WRITE, base.OP_RUH_UPDATE, base.OP_WRITE, base.OP_WRITE], [0, 0, 5, 7],
                         [13, 1, 1, 1], [0, 0, 1, 1]), Done(3, bad=2))
    # pid 0 in LBAs (2 per page): 4 -> ruamw 16; 6 -> 10; 26 = commands 16 + 10: 16 >= 10 swap (+10),
    # 6 left -> 14; 10 -> 4; RUH update swap (+4) -> 20. Host 36 LBAs, extra 14; pid 1's write was refused.
    after = {"fdp_stats": {"host_bytes_written": 1000 + 36 * 4096, "media_bytes_written": 2000 + 50 * 4096},
             "ruh_status": [{"ruamw_lbas": 20}, {"ruamw_lbas": 20}]}
    res = {c["check"]: c for c in t.checks(after)}
    assert all(c["ok"] for c in res.values()), res
    assert res["ruh_available_media_writes"]["bytes_written_by_pid"] == {"0": 36 * 4096, "1": 0}
    after["ruh_status"][1]["ruamw_lbas"] = 18  # as if pid 1's write had reached the device
    assert not {c["check"]: c for c in t.checks(after)}["ruh_available_media_writes"]["ok"]


def test_zns_check_detects_a_wrong_write_pointer():
    info = {"zone_lbas": 100, "page_bytes": 4096, "lba_bytes": 4096}
    before = [{"zslba": z, "zcap_lbas": 80, "wp": z, "state": "empty"} for z in (0, 100, 200)]
    ops = base.op_batch(np.array([base.OP_WRITE, base.OP_ZONE_APPEND, base.OP_ZONE_FINISH], np.int8),
                        np.array([0, 100, 200]), np.array([10, 5, 1]))

    class C:
        status = np.zeros(3, np.int32)
        lba = np.array([-1, 100, -1])

    good = [{"zslba": 0, "zcap_lbas": 80, "wp": 10, "state": "implicitly_open"},
            {"zslba": 100, "zcap_lbas": 80, "wp": 105, "state": "implicitly_open"},
            {"zslba": 200, "zcap_lbas": 80, "wp": 2**64 - 1, "state": "full"}]
    res = {c["check"]: c for c in checks.check_zns(before, good, ops, C, info)}
    assert res["zone_write_pointers"]["ok"] and res["zone_append_lbas"]["ok"]
    bad = [dict(good[0], wp=11)] + good[1:]
    res = {c["check"]: c for c in checks.check_zns(before, bad, ops, C, info)}
    assert not res["zone_write_pointers"]["ok"]
    assert res["zone_write_pointers"]["mismatches"] == {"0": {"expected": 10, "observed": 11}}


# --- CLI (no QEMU needed) ----------------------------------------------------------------------------------------------
def test_cli_errors_are_one_line_exit_2():
    r = CliRunner()
    res = r.invoke(cli, ["down"])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "kvbed: error: down:" in res.output
    res = r.invoke(cli, ["up", "--device", "fdp", "--param", "nrg=2"])  # rejected before any image build or QEMU
    assert res.exit_code == 2 and "nrg must be 1" in res.output and res.output.count("\n") == 1
    res = r.invoke(cli, ["up", "--device", "zns", "-p", "bogus=1"])
    assert res.exit_code == 2 and "unknown parameter 'bogus'" in res.output
    res = r.invoke(cli, ["status"])
    assert res.exit_code == 0 and "no VMs" in res.output
    res = r.invoke(cli, ["image", "rm"])
    assert res.exit_code == 2 and "give an image hash" in res.output


def test_cli_up_refuses_a_port_in_use():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        res = CliRunner().invoke(cli, ["up", "--device", "conv", "--port", str(port)])
        assert res.exit_code == 2 and f"port 127.0.0.1:{port} is already in use" in res.output
        assert time.monotonic() - t0 < 5


def test_setup_script_is_valid_bash():
    script = ROOT / "scripts" / "setup_host.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
