"""Real VMs under QEMU (TCG here: this host's KVM is para-virtual and cannot run a standard guest).

Boots fdp, zns, cxl and conv guests from the cached image (built here if the
cache is cold). `kvbed replay --target vm` replays small lifecycle traces
through the guest agent on each of fdp, zns and cxl (ephemeral VMs sized from
the trace, and a named VM from `kvbed up`) and the run's cross-checks against
the device's own log pages must hold: FDP statistics vs bytes written, RUH
status per placement id, zone write pointers vs the layout, SMART. Hand-built
op streams check what a replay does not reach (RUH update, data round trips on
a file-backed namespace, ZNS limits). Then VMs are broken on purpose (QEMU
killed, guest panic, agent stalled, VM frozen, port taken), below VmTarget and
through `kvbed replay`, and each must give a one-line error within a bounded
time, keep the completed part and leave no QEMU behind. Needs
qemu-system-x86_64 10 and root for the image build (scripts/setup_host.sh);
skipped without QEMU unless CI=true or KVBED_REQUIRE_VM=1, where a missing QEMU
fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from devicemodels.base import (OP_READ, OP_RUH_UPDATE, OP_TRIM, OP_WRITE, OP_ZONE_APPEND, OP_ZONE_FINISH,
                               OP_ZONE_RESET, op_batch)
from tests.support import fault_traces as FT
from tests.support.replay_fixtures import two_lifetimes
from testbed.cli import cli
from kvbed.core.errors import KvbedError
from testbed.vm import checks, image, state
from testbed.vm import vm as vm_mod
from testbed.vm.client import AgentClient, AgentTimeout, VmDied
from testbed.vm.target import VmCompletion, VmOpError, VmTarget
from testbed.vm.vm import Vm

pytestmark = pytest.mark.vm
MiB = 1 << 20


def _require_qemu() -> None:
    must = os.environ.get("CI") == "true" or os.environ.get("KVBED_REQUIRE_VM") == "1"
    missing = [t for t in ("qemu-system-x86_64", "qemu-img", "mmdebstrap") if shutil.which(t) is None]
    if missing:
        msg = f"VM suite needs {', '.join(missing)} (run scripts/setup_host.sh)"
        if must:
            pytest.fail(msg)
        pytest.skip(msg)
    if image.find() is None and os.geteuid() != 0:
        if must:
            pytest.fail("the guest image is not built and building it needs root")
        pytest.skip("the guest image is not built and building it needs root")


@pytest.fixture(scope="module")
def vmenv(tmp_path_factory):
    """A private VM state dir; the image from the user's cache (built now if cold)."""
    _require_qemu()
    mp = pytest.MonkeyPatch()
    mp.setenv("KVBED_STATE_DIR", str(tmp_path_factory.mktemp("vmstate")))
    t0 = time.monotonic()
    cold = image.find() is None
    img = image.ensure(log=print)
    print(f"guest image {img.hash}: {'built' if cold else 'cached'} in {time.monotonic() - t0:.1f} s")
    yield img
    leftover = state.list_states()
    for st in leftover:
        Vm(st).down()
    mp.undo()
    assert not leftover, f"tests left VMs behind: {[s.name for s in leftover]}"


def _gone(pid: int, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if state.proc_start_ticks(pid) is None:
            return True
        time.sleep(0.05)
    return False


def _one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert "\n" not in msg, msg
    return msg


# --- op streams ---------------------------------------------------------------------------------------------------
def _lifecycle_stream(nruh: int, logical_pages: int, ru_pages: int, n_objects: int = 800, seed: int = 5):
    """A KV-object-like stream without the trace tools: objects of 1..ru_pages/2 pages, each with a
    lifetime class = placement id, written in a circular log; when the log wraps, the oldest objects
    are deallocated first; some live objects are read back; now and then a handle gets a RUH update."""
    rng = np.random.default_rng(seed)
    ops, live, head = [], [], 0
    for i in range(n_objects):
        k = int(rng.integers(1, max(2, ru_pages // 2)))
        if head + k > logical_pages:
            head = 0
        while live and any(head < a + n and a < head + k for a, n in live[:1]):
            a, n = live.pop(0)
            ops.append((OP_TRIM, a, n, 0))
        ops.append((OP_WRITE, head, k, int(rng.integers(0, nruh))))
        live.append((head, k))
        head += k
        if rng.random() < 0.2 and live:
            a, n = live[int(rng.integers(0, len(live)))]
            ops.append((OP_READ, a, n, 0))
        if rng.random() < 0.01:
            ops.append((OP_RUH_UPDATE, 0, 1, int(rng.integers(0, nruh))))
    a = np.array(ops, np.int64)
    return op_batch(a[:, 0], a[:, 1], a[:, 2], a[:, 3], np.arange(len(a), dtype=np.int64) * 1000)


def _fdp_tail(nruh: int, ru_pages: int, logical_pages: int, t0: int) -> dict[str, np.ndarray]:
    """Hand-built ops every FDP run ends with: placement id p writes p+1 pages (distinct RUAMW per
    handle), pid 1 writes past its RU boundary (an RU swap), pid 2 gets a RUH update, a range is
    deallocated and the per-pid writes are read back."""
    ops = [(OP_WRITE, 8 * p, p + 1, p) for p in range(nruh)]
    half, step = logical_pages // 2, max(1, ru_pages // 3)
    ops += [(OP_WRITE, half + i * step, step, 1) for i in range(ru_pages // step + 1)]
    ops.append((OP_RUH_UPDATE, 0, 1, 2 % nruh))
    ops.append((OP_TRIM, half, step, 0))
    ops += [(OP_READ, 8 * p, p + 1, 0) for p in range(nruh)]
    a = np.array(ops, np.int64)
    return op_batch(a[:, 0], a[:, 1], a[:, 2], a[:, 3], t0 + np.arange(len(a)) * 1000)


def _concat(a: dict, b: dict) -> dict:
    return {k: np.concatenate([a[k], b[k]]) for k in ("op", "lba", "npages", "pid", "arrival_ns")}


# --- devices ------------------------------------------------------------------------------------------------------
def test_fdp_stream_cross_checks_and_round_trip(vmenv, tmp_path):
    """Below the replay: a hand-built lifecycle stream with RUH updates on a file-backed namespace, written
    with stamped data that every read must return (the replay does neither)."""
    nruh = 4
    vm = Vm.up("fdp", overrides=["logical_bytes=256MiB", "ru_bytes=1MiB", f"nruh={nruh}", "backing=file"], log=print)
    try:
        with VmTarget(vm, stamp=True, crc=True, batch_ops=256, inflight=2) as tg:
            lba_bytes = int(tg.info["lba_bytes"])
            ru_bytes = int(tg.logs(["fdp_configs"])["fdp_configs"]["configs"][0]["ru_bytes"])
            ru_pages = ru_bytes // tg.page_bytes
            ops = _lifecycle_stream(nruh, tg.logical_pages // 2, ru_pages)
            tail = _fdp_tail(nruh, ru_pages, tg.logical_pages, int(ops["arrival_ns"][-1]) + 1)
            stream = _concat(ops, tail)
            tags = np.arange(len(stream["op"]), dtype=np.int64) + 1
            stream["tag"] = tags
            before = tg.logs()
            t0 = time.monotonic()
            c = tg.submit(stream)
            dt = time.monotonic() - t0
            after = tg.logs()
            wrote = int(stream["npages"][stream["op"] == OP_WRITE].sum()) * tg.page_bytes
            print(f"{len(c)} ops, {wrote / MiB:.1f} MiB written in {dt:.2f} s; {int(c.ncmds.sum())} NVMe commands")
            assert np.all(c.status == 0) and len(c) == len(stream["op"])
            res = {r["check"]: r for r in checks.check_fdp(before, after, stream, c, tg.info)}
            for r in res.values():
                print(r["check"], r["ok"], r["expected"], r["observed"])
                assert r["ok"], r
            # placement ids reached the device: the handles' RUAMW differ as the ids said, and the same
            # stream with every write sent to one handle would have left them otherwise
            observed = res["ruh_available_media_writes"]["observed"]
            assert len(set(observed)) >= 3, observed
            ok = np.ones(len(c), bool)
            one = np.array([r["ruamw_lbas"] for r in before["ruh_status"]], np.int64)
            checks.fdp_predict(stream["op"], stream["npages"].astype(np.int64), np.zeros(len(c), np.int64), ok, one,
                               ru_bytes // lba_bytes, int(tg.info["max_cmd_lbas"]), tg.page_bytes // lba_bytes)
            assert list(one) != observed
            assert res["ruh_available_media_writes"]["single_handle_would_give"] == list(one)
            assert res["ruh_available_media_writes"]["distinguishes_placement_ids"]
            assert res["fdp_media_bytes_written"]["expected"] > res["fdp_host_bytes_written"]["expected"]  # RU swaps
            rt = checks.check_roundtrip(stream, tags, c, tg.page_bytes, lba_bytes)
            assert rt["ok"], rt
            smart_d = after["smart"]["host_write_commands"] - before["smart"]["host_write_commands"]
            assert smart_d == int(c.ncmds[stream["op"] == OP_WRITE].sum())
            # collectors: guest histograms and log pages land in the run directory
            out = tg.collect(tmp_path / "run")
            saved = json.loads((tmp_path / "run" / "vm.json").read_text())
            assert saved["logs"]["fdp_stats"] == out["logs"]["fdp_stats"]
            assert saved["latency"]["write"]["n"] == int((stream["op"] == OP_WRITE).sum())
            assert set(saved["latency"]["write"]["percentiles_ns"]) >= {"50", "99", "99.9"}
    finally:
        vm.down()


def test_zns_write_pointers_and_limits(vmenv):
    vm = Vm.up("zns", overrides=["logical_bytes=256MiB", "zone_bytes=16MiB", "zone_cap_bytes=12MiB",
                                 "max_open_zones=3", "max_active_zones=3", "zasl_bytes=256KiB"], log=print)
    try:
        with VmTarget(vm) as tg:
            Z = tg.zone_pages
            cap = 12 * MiB // tg.page_bytes
            assert (Z, tg.info["nr_zones"], tg.info["max_active_zones"], tg.info["zasl_lbas"]) == (4096, 16, 3, 64)
            before = tg.logs(["zone_report"])["zone_report"]
            ops = [(OP_WRITE, 0, 100), (OP_WRITE, 100, 28),  # zone 0: sequential writes
                   (OP_ZONE_APPEND, Z + 9, 200), (OP_ZONE_APPEND, Z, 10),  # zone 1: appends (200 = 64+64+64+8)
                   *[(OP_WRITE, 2 * Z + i * 1024, 1024) for i in range(cap // 1024)],  # zone 2 written full
                   (OP_ZONE_FINISH, 1, 1),  # zone 0 finished early
                   (OP_ZONE_RESET, 2 * Z + 5, 1), (OP_WRITE, 2 * Z, 7)]  # zone 2 reset and reused
            a = np.array(ops, np.int64)
            b = op_batch(a[:, 0], a[:, 1], a[:, 2])
            c = tg.submit(b)
            assert np.all(c.status == 0)
            assert list(c.lba[2:4]) == [Z, Z + 200]  # appends land at the write pointer, in order
            assert c.ncmds[2] == 4
            after = tg.logs(["zone_report"])["zone_report"]
            for r in checks.check_zns(before, after, b, c, tg.info):
                assert r["ok"], r
            states = {z["zslba"] // Z: z["state"] for z in after[:4]}
            assert states == {0: "full", 1: "implicitly_open", 2: "implicitly_open", 3: "empty"}
            # the device enforces what a model must too: writes off the write pointer, too many active zones
            with pytest.raises(VmOpError) as ei:
                tg.submit(op_batch([OP_WRITE], [3 * Z + 5], [1]))
            assert "0x1bc (Zone Invalid Write)" in _one_line(ei.value) and len(ei.value.partial) == 1
            with pytest.raises(VmOpError) as ei:
                tg.submit(op_batch([OP_WRITE, OP_WRITE], [3 * Z, 4 * Z], [1, 1]))  # zones 1, 2 active already
            assert "0x1bd (Too Many Active Zones)" in _one_line(ei.value)
            assert list(ei.value.partial.status[:1]) == [0] and len(ei.value.partial) == 2
    finally:
        vm.down()


def test_cxl_objects_round_trip(vmenv):
    vm = Vm.up("cxl", overrides=["cxl_bytes=256MiB"], log=print)
    try:
        with VmTarget(vm, stamp=True, crc=True) as tg:
            assert tg.info["dax_bytes"] == 256 * MiB and tg.logical_pages == 65536
            rng = np.random.default_rng(7)
            n = 48
            npg = rng.integers(1, 9, n)
            lba = np.arange(n) * 16 + rng.integers(0, 8, n)
            w = op_batch(np.full(n, OP_WRITE), lba, npg, rng.integers(0, 4, n))
            w["tag"] = np.arange(n, dtype=np.int64) + 1000
            r = op_batch(np.full(n, OP_READ), lba[::-1], npg[::-1])
            r["tag"] = np.zeros(n, np.int64)
            cw, cr = tg.submit(w), tg.submit(r)
            stream = {k: np.concatenate([w[k], r[k]]) for k in w}
            rt = checks.check_roundtrip(stream, stream["tag"], VmCompletion.concat([cw, cr]), tg.page_bytes)
            assert rt["ok"] and rt["expected"] == n, rt
            assert tg.counters()["bytes_written"] == int(npg.sum()) * 4096
            with pytest.raises(VmOpError, match="outside the device"):
                tg.submit(op_batch([OP_WRITE], [65535], [2]))
            with pytest.raises(VmOpError, match="only read, write and trim"):
                tg.submit(op_batch([OP_ZONE_APPEND], [0], [1]))
    finally:
        vm.down()


def test_cli_two_vms_at_once(vmenv):
    r = CliRunner()
    try:
        for name in ("c0", "c1"):
            res = r.invoke(cli, ["up", "--device", "conv", "--name", name, "--json", "--param", "logical_bytes=256MiB"])
            assert res.exit_code == 0, res.output
        rows = {s["name"]: s for s in json.loads(r.invoke(cli, ["status", "--json"]).output)}
        assert {k: v["state"] for k, v in rows.items()} == {"c0": "running", "c1": "running"}
        assert rows["c0"]["port"] != rows["c1"]["port"]
        res = r.invoke(cli, ["up", "--device", "conv", "--name", "c0"])
        assert res.exit_code == 2 and "already running" in res.output
        for name in ("c0", "c1"):
            with VmTarget(name) as tg:
                ops = op_batch([OP_WRITE, OP_WRITE, OP_TRIM, OP_READ], [0, 512, 0, 512], [256, 256, 128, 256])
                before = tg.logs(["smart"])["smart"]
                c = tg.submit(ops)
                after = tg.logs(["smart"])["smart"]
                assert list(c.status) == [0, 0, 0, 0] and list(c.ncmds) == [2, 2, 1, 2]
                # SMART counts data units of 1000 x 512-byte sectors, rounded up: 2 MiB = 4096 sectors -> 5 units
                assert (before["data_units_written"], after["data_units_written"]) == (0, 5)
                assert after["host_write_commands"] - before["host_write_commands"] == 4
        pids = [rows[n]["pid"] for n in ("c0", "c1")]
        res = r.invoke(cli, ["down", "--all"])
        assert res.exit_code == 0 and "c0" in res.output and "c1" in res.output
        assert all(_gone(p) for p in pids)
        assert json.loads(r.invoke(cli, ["status", "--json"]).output) == []
    finally:
        r.invoke(cli, ["down", "--all"])


# --- kvbed replay --target vm ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Lifecycle traces (create/commit in GPU, persist to the SSD tier, loads, evictions; see replay_fixtures):
    small: 400 objects of 3 MiB, one a millisecond, 60% dying within ~50 ms, the rest within ~400 ms
      (1.2 GiB written, peak live ~0.9 GiB);
    tiny: 120 objects of 256 KiB for CXL, whose every access is emulated MMIO (~40 MB/s under TCG);
    long: 3000 objects of 4 MiB (12 GiB written, ~20 s through a TCG guest): faults land mid-run."""
    d = tmp_path_factory.mktemp("vmtraces")
    return {
        "small": two_lifetimes(d / "small.parquet", n_objects=400, obj_bytes=3 * MiB, long_life_ns=400_000_000),
        "tiny": two_lifetimes(d / "tiny.parquet", n_objects=120, obj_bytes=256 << 10, short_life_ns=20_000_000,
                              long_life_ns=100_000_000),
        "long": two_lifetimes(d / "long.parquet", n_objects=3000, obj_bytes=4 * MiB, row_group_rows=256),
    }


def _replay(*args) -> tuple:
    t0 = time.monotonic()
    res = CliRunner().invoke(cli, ["replay", *[str(a) for a in args], "-q", "--no-plots"])
    return res, time.monotonic() - t0


def _result(run_dir: Path) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def _checks_hold(r: dict) -> dict:
    cc = {c["check"]: c for c in r["vm"]["cross_checks"]}
    for c in cc.values():
        print(f"  {c['check']}: {c['ok']} (expected {c['expected']}, observed {c['observed']})")
    assert cc and all(c["ok"] for c in cc.values()) and r["vm"]["cross_checks_ok"] is True, cc
    return cc


def test_replay_fdp_through_an_ephemeral_vm(vmenv, traces, tmp_path):
    """`kvbed replay --target vm --device fdp --hints oracle`: a VM sized from the trace (null-co namespace),
    the hints' placement ids on the device's handles, and every figure's source in result.json."""
    out = tmp_path / "fdp"
    # RUs of 16 MiB (16 mapping units): large enough that the handles' RUAMW tell the placement ids apart
    res, took = _replay(traces["small"], "--target", "vm", "--device", "fdp", "--hints", "oracle", "-o", out,
                        "--param", "ru_bytes=16MiB")
    assert res.exit_code == 0, res.output
    r = _result(out)
    rt = json.loads((out / "runtime.json").read_text())["vm"]
    print(f"fdp replay: {took:.1f} s in all, VM up {rt['up_s']:.1f} s, {rt['ops']} ops / {rt['commands']} commands "
          f"in {rt['submit_s']:.2f} s ({rt['mb_per_s']:.0f} MB/s, {rt['commands_per_s']:.0f} commands/s)")
    cc = _checks_hold(r)
    assert {"fdp_host_bytes_written", "fdp_media_bytes_written", "ruh_available_media_writes", "bytes_by_placement_id",
            "smart_host_write_commands", "smart_data_units_written", "agent_bytes_written",
            "model_host_bytes_written"} <= set(cc)
    job, vm = r["jobs"][0], r["vm"]
    assert r["incomplete"] is False and r["target"]["ephemeral"] and r["target"]["backing"] == "null"
    # placement ids reached the device: the oracle's 8 classes wrote through 8 handles, the device's RUH
    # status moved per handle exactly as predicted from those ids, and one handle would have left another
    ruh = vm["device_log"]["ruh_status"]
    assert len(ruh) == 8 and sum(h["bytes_written"] > 0 for h in ruh) >= 6, ruh
    assert cc["ruh_available_media_writes"]["distinguishes_placement_ids"]
    assert [h["ruamw_lbas_after"] for h in ruh] == cc["ruh_available_media_writes"]["observed"]
    # where figures come from: host bytes from the FDP statistics log, WAF/GC/erases from the model
    assert r["sources"]["host_bytes_written"] == "device log" and r["sources"]["waf"] == "model"
    assert job["host_bytes_written"] == vm["device_log"]["fdp_stats"]["host_bytes_written"] == 400 * 3 * MiB
    assert vm["model"]["host_bytes_written"] == job["user_bytes_written"] == 400 * 3 * MiB
    assert job["waf"] == vm["model"]["waf"] and job["waf"] >= 1.0
    assert job["write"]["total_ios"] == vm["guest"]["latency"]["write"]["n"] == 400
    assert vm["device_log"]["fdp_stats"]["media_bytes_erased"] == 0  # QEMU does not model flash
    vmj = json.loads((out / "vm.json").read_text())
    assert {"fdp_stats", "ruh_status", "smart", "fdp_configs"} <= set(vmj["logs_after"])
    assert vmj["latency"]["write"]["buckets"]
    # the ephemeral VM is gone with its QEMU
    assert state.list_states() == [] and _gone(vmj["qemu_pid"])


def test_replay_zns_on_a_named_vm(vmenv, traces, tmp_path):
    """`kvbed up` fixes the geometry; `kvbed replay --vm` adopts it, refuses what cannot fit, and on a second
    run resets the zones the first one left written."""
    r = CliRunner()
    up = r.invoke(cli, ["up", "--device", "zns", "--name", "z0", "--json", "-p", "logical_bytes=2GiB", "-p", "zone_bytes=16MiB",
                        "-p", "zone_cap_bytes=12MiB", "-p", "page_bytes=1MiB"])
    assert up.exit_code == 0, up.output
    try:
        res, _ = _replay(traces["small"], "--vm", "z0", "--hints", "oracle", "-o", tmp_path / "a")
        assert res.exit_code == 0, res.output
        a = _result(tmp_path / "a")
        cc = _checks_hold(a)
        assert {"zone_write_pointers", "zone_write_pointers_vs_layout", "zone_append_lbas"} <= set(cc)
        assert cc["zone_write_pointers_vs_layout"]["expected"] == 128  # 2 GiB / 16 MiB zones, all as laid out
        zs = a["vm"]["device_log"]["zones"]["by_state"]
        assert zs.get("full", 0) > 0 and a["jobs"][0]["zone_resets"] > 0
        assert a["global options"]["device_params"]["zns"]["zone_bytes"] == 16 * MiB  # the VM's, not sized
        # 12 GiB of writes peaking at ~3.7 GiB live: refused after the scan, before any op reaches the guest
        res, took = _replay(traces["long"], "--vm", "z0", "-o", tmp_path / "x")
        assert res.exit_code == 2 and "z0's namespace (fixed at `kvbed up`) is too small" in res.stderr, res.output
        assert "\n" not in res.stderr.strip() and not (tmp_path / "x").exists() and took < 30
        res, _ = _replay(traces["small"], "--vm", "z0", "--param", "zone_cap_bytes=8MiB", "-o", tmp_path / "x")
        assert res.exit_code == 2 and "zone_cap_bytes is fixed at `kvbed up`" in res.stderr
        # the first run left zones full and open: the second one resets them and still checks out
        res, _ = _replay(traces["small"], "--vm", "z0", "--hints", "none", "-o", tmp_path / "b")
        assert res.exit_code == 0, res.output
        _checks_hold(_result(tmp_path / "b"))
    finally:
        assert r.invoke(cli, ["down", "z0"]).exit_code == 0


def test_replay_cxl_through_an_ephemeral_vm(vmenv, traces, tmp_path):
    """CXL memory in 256 MiB granules: the model is fitted to the VM's size; objects go to the devdax mapping."""
    out = tmp_path / "cxl"
    res, took = _replay(traces["tiny"], "--target", "vm", "--device", "cxl", "--hints", "oracle", "-o", out,
                        "--param", "page_bytes=256KiB")
    assert res.exit_code == 0, res.output
    r = _result(out)
    cc = _checks_hold(r)
    assert set(cc) == {"agent_bytes_written", "model_host_bytes_written"}
    assert r["target"]["qemu_params"]["cxl"]["cxl_bytes"] == 256 * MiB
    assert r["global options"]["device_params"]["cxl"]["cxl_bytes"] == 256 * MiB
    assert r["sizing"]["logical_bytes"] == 256 * MiB  # the sizing record follows the fitted geometry
    assert any("logical_bytes" in n and f"-> {256 * MiB}" in n for n in r["sizing"]["notes"]), r["sizing"]["notes"]
    assert r["vm"]["guest"]["bytes_written"] == 120 * (256 << 10) and r["sources"]["lat_ns"] == "guest"
    assert r["vm"]["guest"]["latency"]["write"]["n"] == 120 and r["jobs"][0]["write"]["lat_ns"]["min"] > 0
    assert state.list_states() == []


# --- failures -------------------------------------------------------------------------------------------------------
def _long_stream(n: int, capacity_pages: int, pages: int = 128) -> dict[str, np.ndarray]:
    """Far more 512 KiB writes than the few seconds before the fault can finish."""
    return op_batch(np.full(n, OP_WRITE), (np.arange(n) * pages) % (capacity_pages - pages), np.full(n, pages),
                    np.arange(n) % 4)


def _qemu_of(token: str) -> str:
    out = subprocess.run(["pgrep", "-f", f"kvbed-{token}"], capture_output=True, text=True)
    return out.stdout.strip()


def test_power_loss_through_a_guest_agrees_with_a_hand_count(vmenv, tmp_path):
    """`--fault power-loss@73ms,flush_ns=1ms` on conv (one die, 4 KiB units): objects 1..8 and 9 of 10 units
    each, 2 evicted (trimmed) at 25 ms, 8 persisted at 70 ms and 10, 11 at 71 ms. QEMU is SIGKILLed at the
    fault, started again on the same backing file, and the guest's scan of the 11 writes issued before it must
    be the hand count: 1, 3..7 and 9 intact (7), 8, 10 and 11 torn (written at 70-71 ms, still being
    programmed at 72 ms: 13 of their 30 units on the media), 2 missing (its extent trimmed: zeros)."""
    trace = FT.write(tmp_path / "power.parquet", FT.POWER_VM, nbytes=FT.POWER_VM_BYTES)
    out = tmp_path / "run"
    args = [a for p in FT.POWER_VM_PARAMS for a in ("--param", p)]
    res, took = _replay(trace, "--target", "vm", "--device", "conv", *args, "--fault", "power-loss@73ms,flush_ns=1ms",
                        "-o", out)
    assert res.exit_code == 0, res.output
    r = _result(out)
    pl = r["vm"]["power_loss"]
    print(f"power loss: {took:.1f} s, restart {pl['power_cycle']['reboot_s']} s, scan {pl['scan']}")
    assert r["target"]["backing"] == "file" and r["sources"]["lat_ns"] == "model"
    assert pl["guest"] == pl["model"] == {"intact": 7, "torn": 3, "missing": 1, "corrupt": 0}
    assert pl["ok"] and pl["agree"] == pl["writes_scanned"] == pl["writes_predicted"] == 11
    assert pl["pages_present_guest"] == pl["pages_on_media_model"] == 110 - 10 - 17
    state_ = r["faults"]["injected"][0]["state"]
    assert pl["issued_before_kill"]["pages_not_issued"] == state_["pages_lost"] == 17
    assert pl["issued_before_kill"]["write_ops_cut"] == state_["torn_objects"] == 3
    # the guest kernel's CRC32C (algif_hash), the faster of crc32c-generic and crc32c-intel under this accelerator
    assert pl["scan"]["crc32c"] in ("kernel (crc32c-generic)", "kernel (crc32c-intel)")
    cc = _checks_hold(r)
    assert {"before_power_loss.agent_bytes_written", "after_restart.smart_host_write_commands",
            "model_host_bytes_written", "power_loss_scan_vs_model"} <= set(cc)
    # the killed QEMU, the restarted one and the VM's state are all gone
    cyc = pl["power_cycle"]
    assert cyc["qemu_exit_status"] == -9 and cyc["killed_pid"] != cyc["restarted_pid"]
    assert _gone(cyc["killed_pid"]) and _gone(cyc["restarted_pid"])
    assert state.list_states() == [] and _qemu_of(r["target"]["vm"]) == ""


def test_power_loss_mid_run_on_fdp_then_the_replay_goes_on(vmenv, traces, tmp_path):
    """400 writes of 3 MiB on FDP with the oracle's placement ids and the checksum contract, power lost at
    200 ms with a 2 ms volatile buffer: every write issued before it is scanned and agrees with the fault
    model, and the rest of the trace runs on the restarted VM, whose FDP statistics, RUH status and SMART are
    checked on their own (a restarted QEMU starts its counters afresh)."""
    out = tmp_path / "fdp"
    res, took = _replay(traces["small"], "--target", "vm", "--device", "fdp", "--hints", "oracle",
                        "--param", "ru_bytes=16MiB", "--fault", "power-loss@200ms,flush_ns=2ms", "--contract",
                        "checksum", "-o", out)
    assert res.exit_code == 0, res.output
    r = _result(out)
    pl, job = r["vm"]["power_loss"], r["jobs"][0]
    print(f"fdp power loss: {took:.1f} s; guest {pl['guest']}, scan {pl['scan']}")
    assert pl["ok"] and pl["writes_scanned"] == 200 and pl["guest"] == pl["model"]
    assert min(pl["guest"]["intact"], pl["guest"]["torn"], pl["guest"]["missing"]) > 0
    cc = _checks_hold(r)
    for leg in ("before_power_loss", "after_restart"):
        assert {f"{leg}.fdp_host_bytes_written", f"{leg}.ruh_available_media_writes",
                f"{leg}.bytes_by_placement_id"} <= set(cc)
    # the model wrote every unit; the guest all but those the power loss kept from the media
    held = pl["issued_before_kill"]["pages_not_issued"] * r["global options"]["device_params"]["flash"]["page_bytes"]
    assert r["vm"]["model"]["host_bytes_written"] == r["vm"]["guest"]["bytes_written"] + held
    assert job["host_bytes_written"] == r["vm"]["guest"]["bytes_written"]
    assert r["faults"]["contract"]["name"] == "checksum" and r["incomplete"] is False
    vmj = json.loads((out / "vm.json").read_text())
    assert [leg["leg"] for leg in vmj["legs"]] == ["before_power_loss", "after_restart"]
    assert sum(leg["bytes_written"] for leg in vmj["legs"]) == r["vm"]["guest"]["bytes_written"]
    assert state.list_states() == [] and _gone(pl["power_cycle"]["restarted_pid"])


def test_killed_qemu_mid_stream(vmenv):
    vm = Vm.up("fdp", overrides=["logical_bytes=1GiB", "nruh=4", "ru_bytes=16MiB"], log=print)
    pid = vm.pid
    try:
        tg = VmTarget(vm, batch_ops=64, inflight=2, reply_timeout_s=60)
        killer = threading.Timer(2.0, lambda: os.kill(pid, signal.SIGKILL))
        t0 = time.monotonic()
        killer.start()
        with pytest.raises(VmDied) as ei:
            tg.submit(_long_stream(100_000, tg.logical_pages))
        waited = time.monotonic() - t0 - 2.0
        msg = _one_line(ei.value)
        print(f"killed QEMU reported after {waited:.2f} s: {msg}")
        assert "QEMU exited" in msg and waited < 5
        part = ei.value.partial
        assert 0 < len(part) < 100_000 and np.all(part.status == 0)  # the completed part is kept
        assert len(part) % 64 == 0  # whole chunks: each reply arrived complete or not at all
        assert _gone(pid)
    finally:
        vm.down()
    assert not Path(vm.state.dir).exists()


def test_guest_panic_mid_stream(vmenv):
    vm = Vm.up("conv", overrides=["logical_bytes=512MiB"], log=print)
    pid = vm.pid
    try:
        tg = VmTarget(vm, batch_ops=64, inflight=2, reply_timeout_s=60)
        side = AgentClient(vm.port)  # a second connection: the agent serves it between two chunks
        threading.Timer(2.0, lambda: side.send("crash")).start()
        t0 = time.monotonic()
        with pytest.raises(VmDied) as ei:
            tg.submit(_long_stream(100_000, tg.logical_pages))
        msg = _one_line(ei.value)
        print(f"guest panic reported after {time.monotonic() - t0:.2f} s: {msg}")
        assert "Kernel panic" in msg and time.monotonic() - t0 < 15
        assert 0 < len(ei.value.partial) < 100_000
        assert _gone(pid)  # panic=-1 and -no-reboot: QEMU exits by itself
        side.close()
    finally:
        vm.down()


def test_agent_that_stops_answering(vmenv):
    vm = Vm.up("conv", overrides=["logical_bytes=256MiB"], log=print)
    pid = vm.pid
    try:
        tg = VmTarget(vm, reply_timeout_s=3.0)
        tg.submit(op_batch([OP_WRITE], [0], [8]))
        # 1) the guest is up but the agent is stuck
        tg.inject("stall", seconds=20)
        t0 = time.monotonic()
        with pytest.raises(AgentTimeout) as ei:
            tg.submit(op_batch([OP_WRITE] * 4, [8, 16, 24, 32], [8] * 4))
        assert "did not answer" in _one_line(ei.value) and time.monotonic() - t0 < 5
        # 2) the whole VM is frozen (SIGSTOP): same bounded error, and `down` still removes it
        os.kill(pid, signal.SIGSTOP)
        end = time.monotonic() + 5
        while not state.is_stopped(pid) and time.monotonic() < end:  # delivery is asynchronous
            time.sleep(0.01)
        assert state.is_stopped(pid)
        tg2 = None
        t0 = time.monotonic()
        with pytest.raises(AgentTimeout):
            tg2 = VmTarget(vm, reply_timeout_s=3.0)
        assert time.monotonic() - t0 < 5 and tg2 is None
        t0 = time.monotonic()
        vm.down()
        assert _gone(pid) and time.monotonic() - t0 < 10
    finally:
        if state.proc_start_ticks(pid) is not None:
            os.kill(pid, signal.SIGCONT)
        vm.down()


def test_port_taken_between_check_and_start(vmenv, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        monkeypatch.setattr(vm_mod, "port_free", lambda p: True)  # lose the race on purpose
        t0 = time.monotonic()
        with pytest.raises(KvbedError) as ei:
            Vm.up("conv", name="race", port=port, overrides=["logical_bytes=256MiB"])
        msg = _one_line(ei.value)
        assert f"port 127.0.0.1:{port} is already in use" in msg and time.monotonic() - t0 < 15
    assert state.list_states() == []
    out = subprocess.run(["pgrep", "-f", f"hostfwd=tcp:127.0.0.1:{port}-"], capture_output=True, text=True)
    assert out.stdout.strip() == ""  # no QEMU left holding (or trying) the port


def _replay_with_fault(traces, tmp_path, fault: str, *extra) -> tuple:
    """`kvbed replay --target vm` in its own process on the long trace; once the guest has written data,
    ``fault`` strikes (kill QEMU, panic the guest, stall the agent). Returns (process, seconds from the fault
    to the exit, run dir, the VM's state as it ran)."""
    out = tmp_path / fault
    argv = [sys.executable, "-c", "from testbed.cli import main; main()", "replay", str(traces["long"]), "--target",
            "vm", "--device", "fdp", "--hints", "oracle", "-o", str(out), "-q", "--no-plots", *extra]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 120
        st = None
        while st is None and time.monotonic() < end and p.poll() is None:
            st = next((s for s in state.list_states() if s.ready_unix), None)
            time.sleep(0.1)
        assert st is not None, p.communicate()
        side = AgentClient(st.port)  # the agent answers it between two op batches
        while time.monotonic() < end:
            h, _ = side.request("hello", timeout_s=30)
            if (h.get("counters") or {}).get("bytes_written", 0) >= 256 * MiB:
                break
            time.sleep(0.2)
        t0 = time.monotonic()
        if fault == "kill":
            os.kill(st.pid, signal.SIGKILL)
        elif fault in ("sigterm", "sigkill"):  # kvbed itself is stopped
            p.send_signal(signal.SIGTERM if fault == "sigterm" else signal.SIGKILL)
        else:
            side.send(fault, {"seconds": 30} if fault == "stall" else {})
        p.wait(timeout=60)
        took = time.monotonic() - t0
        side.close()
    finally:
        if p.poll() is None:
            p.kill()
    return p, took, out, st


@pytest.mark.parametrize("fault,bound_s,needle", [
    ("kill", 10, "QEMU exited (exit status -9)"),
    ("crash", 15, "Kernel panic"),
    ("stall", 15, "the agent did not answer ops"),  # reply_timeout_s=4 below, then the VM is torn down
])
def test_replay_keeps_the_completed_part_when_the_vm_fails(vmenv, traces, tmp_path, fault, bound_s, needle):
    p, took, out, st = _replay_with_fault(traces, tmp_path, fault, "--param", "reply_timeout_s=4")
    err = p.stderr.read().strip()
    print(f"{fault}: exit {p.returncode} {took:.2f} s after the fault: {err}")
    assert p.returncode == 2 and "\n" not in err and err.startswith("kvbed: error: VM replay-fdp-"), err
    assert needle in err and "partial result" in err and took < bound_s
    r = _result(out)
    assert r["incomplete"] is True and needle in r["error"]
    assert 0 < r["stopped_at_row"] < r["scan"]["rows"]  # events fully replayed before the fault
    written = r["jobs"][0]["user_bytes_written"]
    assert 0 < written < 3000 * 4 * MiB  # what completed before the fault, not the whole trace
    assert r["vm"]["cross_checks"] == [] and "could not be asked" in r["vm"]["cross_checks_skipped"]
    assert state.list_states() == [] and _gone(st.pid)  # no VM, no QEMU left behind
    left = subprocess.run(["pgrep", "-f", f"kvbed-{st.token}"], capture_output=True, text=True).stdout.strip()
    assert left == ""


@pytest.mark.parametrize("fault", ["sigterm", "sigkill"])
def test_a_stopped_replay_takes_its_vm_along(vmenv, traces, tmp_path, fault):
    """SIGTERM (a CI timeout) tears the ephemeral VM down on the way out; SIGKILL cannot run any code, but
    QEMU was started with PR_SET_PDEATHSIG and dies with kvbed (its state directory stays, as `dead`)."""
    p, took, out, st = _replay_with_fault(traces, tmp_path, fault)
    assert p.returncode == (143 if fault == "sigterm" else -9), p.stderr.read()
    assert _gone(st.pid, timeout_s=10), f"QEMU {st.pid} outlived kvbed ({fault})"
    assert not out.exists()  # no result: the run was stopped from outside, not by its VM
    left = state.list_states()
    if fault == "sigterm":
        assert left == []
    else:
        assert [s.name for s in left] == [st.name] and vm_mod.status()[0]["state"] == "dead"
        vm_mod.down([st.name])


def test_replay_port_taken_is_a_clean_error(vmenv, traces, tmp_path, monkeypatch):
    """Every port the ephemeral VM tries is taken (a race lost three times): one line, no VM, no run dir."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        monkeypatch.setattr(vm_mod, "pick_port", lambda: port)
        res, took = _replay(traces["small"], "--target", "vm", "--device", "zns", "-o", tmp_path / "r")
    print(f"port taken: {took:.1f} s: {res.stderr.strip()}")
    assert res.exit_code == 2 and f"port 127.0.0.1:{port} is already in use" in res.stderr and took < 60
    assert res.stderr.strip().count("\n") == 0 and not (tmp_path / "r").exists()
    assert state.list_states() == []
    out = subprocess.run(["pgrep", "-f", f"hostfwd=tcp:127.0.0.1:{port}-"], capture_output=True, text=True)
    assert out.stdout.strip() == ""


@pytest.mark.slow
def test_kvm_verdict_that_fails_at_boot_falls_back_to_tcg(vmenv):
    """If the cached verdict says KVM but a guest cannot boot under it (this machine's para-virtual KVM
    dies with an emulation failure), `up` falls back to TCG within the KVM grace period and records it."""
    from testbed.vm import accel, paths

    cache = paths.cache_dir() / "accel.json"
    saved = cache.read_bytes() if cache.exists() else None
    key = accel.host_key()
    accel.remember(key, "kvm", "test: pretend the probe passed")
    try:
        t0 = time.monotonic()
        vm = Vm.up("conv", overrides=["logical_bytes=256MiB"], log=print)
        took = time.monotonic() - t0
        try:
            print(f"up with a KVM verdict: {vm.state.accel} after {took:.1f} s ({vm.state.accel_reason})")
            if vm.state.accel == "tcg":  # KVM is broken here: the fallback happened and was remembered
                assert took < vm_mod.KVM_BOOT_GRACE_S + 60
                assert accel.choose("auto").accel == "tcg"
            with VmTarget(vm) as tg:
                assert list(tg.submit(op_batch([OP_WRITE], [0], [1])).status) == [0]
        finally:
            vm.down()
    finally:
        if saved is None:
            cache.unlink(missing_ok=True)
        else:
            cache.write_bytes(saved)
