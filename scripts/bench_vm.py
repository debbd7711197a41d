#!/usr/bin/env python3
"""Benchmark the VM testbed under the accelerator kvbed picks (TCG on this machine class).

Figures (medians of ``--runs`` repetitions; the machine's 2 cores are shared, so single runs are noisy):
  - boot: QEMU start to the agent's first answer (``boot_s``), and the whole ``Vm.up`` (overlay,
    backing file, QEMU, readiness) per device kind (conv, fdp, zns, cxl);
  - round trip: one host -> agent -> host request (``ping``);
  - guest replay throughput on an FDP namespace, driven through VmTarget exactly as a replay would:
    512 KiB sequential writes, 4 KiB random writes, 4 KiB random reads (MB/s, commands/s), and a
    KV-lifecycle-like mixed stream (writes with placement ids, deallocates, reads);
  - CXL devdax object stores/loads (64 KiB objects: every access is emulated MMIO);
  - ``kvbed replay --target vm`` end to end on a ``kvbed trace synth`` lifecycle trace (FDP, oracle
    hints, an ephemeral VM sized from the trace): trace events/s, and the guest's MB/s, commands/s and
    ops/s while the replay's ops go through it (``runtime.json``'s ``vm`` figures), beside the same
    trace replayed on the embedded model;
  - a power loss through the guest (``--fault power-loss@T``, T at half the trace, a 10 ms volatile
    buffer) on that trace, beside the same run without the fault on a file-backed namespace: wall time,
    QEMU's restart, the scan of every write issued before T (MB/s, with the kernel's CRC32C) and whether
    every write agrees with the fault model, under contracts none and checksum.

Host-side wall time is measured around ``VmTarget.submit`` (wire, agent, ioctl, device); the
guest's own per-op latency sum is reported beside it as ``device_s``.

    python scripts/bench_vm.py              # 3 runs, all figures (~3-4 min warm; + image build if cold)
    python scripts/bench_vm.py --runs 5
    python scripts/bench_vm.py --quick      # 1 run, fewer devices
    python scripts/bench_vm.py --only replay
    python scripts/bench_vm.py --only powerloss
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devicemodels.base import OP_READ, OP_TRIM, OP_WRITE, op_batch  # noqa: E402
from kvbed.core.atomicio import write_json  # noqa: E402
from testbed.vm import image  # noqa: E402
from testbed.vm.target import VmTarget  # noqa: E402
from testbed.vm.vm import Vm  # noqa: E402

MiB = 1 << 20
DEVICES = {
    "conv": ["logical_bytes=1GiB"],
    "fdp": ["logical_bytes=2GiB", "ru_bytes=16MiB", "nruh=8"],
    "zns": ["logical_bytes=1GiB", "zone_bytes=64MiB", "zone_cap_bytes=48MiB"],
    "cxl": ["cxl_bytes=256MiB"],
}


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def bench_boot(devices, runs) -> dict:
    out = {}
    for dev in devices:
        boots, ups = [], []
        for _ in range(runs):
            t0 = time.monotonic()
            vm = Vm.up(dev, overrides=DEVICES[dev])
            ups.append(time.monotonic() - t0)
            boots.append(vm.state.boot_s)
            vm.down()
        out[dev] = {"boot_to_agent_s": round(med(boots), 2), "up_s": round(med(ups), 2),
                    "runs_boot_s": [round(b, 2) for b in boots], "accel": vm.state.accel}
        print(f"  boot {dev:4s}: agent ready {med(boots):.2f} s after QEMU start, `up` {med(ups):.2f} s "
              f"(runs {[round(b, 2) for b in boots]})", flush=True)
    return out


def timed_submit(tg: VmTarget, ops) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    c = tg.submit(ops)
    wall = time.perf_counter() - t0
    assert np.all(c.status == 0)
    return wall, float(c.lat_ns.sum()) / 1e9, int(c.ncmds.sum())


def lifecycle_stream(n_objects: int, logical_pages: int, nruh: int, seed: int = 0) -> dict:
    """Objects of 16-512 KiB with a placement id each, written in a circular log; the oldest are
    deallocated when the log wraps; a fifth of the objects are read back once."""
    rng = np.random.default_rng(seed)
    k = rng.integers(4, 129, n_objects)
    start = np.cumsum(np.r_[0, k[:-1]]) % (logical_pages - 128)
    op, lba, npg, pid = [], [], [], []
    for i in range(n_objects):
        op.append(OP_WRITE), lba.append(start[i]), npg.append(k[i]), pid.append(int(rng.integers(0, nruh)))
        if i % 5 == 4:
            j = i - int(rng.integers(0, 4))
            op.append(OP_READ), lba.append(start[j]), npg.append(k[j]), pid.append(0)
        if i % 7 == 6:
            op.append(OP_TRIM), lba.append(start[i - 6]), npg.append(k[i - 6]), pid.append(0)
    return op_batch(op, lba, npg, pid)


def bench_io(runs: int, quick: bool) -> dict:
    vm = Vm.up("fdp", overrides=DEVICES["fdp"])
    res: dict = {"accel": vm.state.accel}
    try:
        with VmTarget(vm, batch_ops=256, inflight=2) as tg:
            # round trip
            rtts = []
            for _ in range(50):
                t0 = time.perf_counter()
                tg.client.request("ping", timeout_s=10)
                rtts.append(time.perf_counter() - t0)
            res["round_trip_ms"] = round(med(rtts) * 1e3, 3)
            print(f"  host->agent round trip: {res['round_trip_ms']:.2f} ms (median of 50)", flush=True)
            cap = tg.logical_pages
            rng = np.random.default_rng(1)
            n_seq = 1024 if quick else 2048  # x 512 KiB
            n_rand = 5000 if quick else 20000
            cases = {
                "seq_write_512k": lambda r: op_batch(np.full(n_seq, OP_WRITE), (np.arange(n_seq) * 128 + r * 7) % (cap - 128),
                                                     np.full(n_seq, 128), np.arange(n_seq) % 8),
                "rand_write_4k": lambda r: op_batch(np.full(n_rand, OP_WRITE), rng.integers(0, cap, n_rand),
                                                    np.ones(n_rand), rng.integers(0, 8, n_rand)),
                "rand_read_4k": lambda r: op_batch(np.full(n_rand, OP_READ), rng.integers(0, cap, n_rand), np.ones(n_rand)),
                "kv_lifecycle_mix": lambda r: lifecycle_stream(3000 if quick else 6000, cap, 8, seed=r),
            }
            for name, make in cases.items():
                walls, devs, mbs, cps = [], [], [], []
                for r in range(runs):
                    ops = make(r)
                    nbytes = int(ops["npages"][ops["op"] != OP_TRIM].sum()) * tg.page_bytes
                    wall, dev_s, ncmd = timed_submit(tg, ops)
                    walls.append(wall)
                    devs.append(dev_s)
                    mbs.append(nbytes / wall / 1e6)
                    cps.append(ncmd / wall)
                res[name] = {"ops": len(ops["op"]), "bytes": nbytes, "wall_s": round(med(walls), 3),
                             "device_s": round(med(devs), 3), "MB_per_s": round(med(mbs), 1),
                             "commands_per_s": round(med(cps)), "runs_MB_per_s": [round(x, 1) for x in mbs]}
                print(f"  {name:17s}: {med(mbs):8.1f} MB/s  {med(cps):8.0f} commands/s  "
                      f"(wall {med(walls):.2f} s, in the device {med(devs):.2f} s; runs {[round(x) for x in mbs]})",
                      flush=True)
    finally:
        vm.down()
    return res


def bench_cxl(runs: int) -> dict:
    vm = Vm.up("cxl", overrides=DEVICES["cxl"])
    try:
        with VmTarget(vm, page_bytes=4096) as tg:
            n, k = 256, 16  # 256 objects of 64 KiB
            out = {}
            for name, opc in (("store_64k", OP_WRITE), ("load_64k", OP_READ)):
                mbs, cps = [], []
                for r in range(runs):
                    ops = op_batch(np.full(n, opc), np.arange(n) * k, np.full(n, k))
                    wall, _, ncmd = timed_submit(tg, ops)
                    mbs.append(n * k * 4096 / wall / 1e6)
                    cps.append(n / wall)
                out[name] = {"MB_per_s": round(med(mbs), 1), "objects_per_s": round(med(cps)),
                             "runs_MB_per_s": [round(x, 1) for x in mbs]}
                print(f"  cxl {name}: {med(mbs):.1f} MB/s, {med(cps):.0f} objects/s (runs {[round(x, 1) for x in mbs]})",
                      flush=True)
            return out
    finally:
        vm.down()


def synth_trace(path: Path, quick: bool) -> Path:
    """A small but realistic lifecycle trace: two tenants, 32 MiB objects (256 tokens of llama-3-8b),
    tiers small enough that the SSD tier writes, reads and evicts within a minute of sessions."""
    from testbed.cli import main as kvbed

    if not path.exists():
        try:
            kvbed(["trace", "synth", "-o", str(path), "--duration-s", "30" if quick else "90", "--sessions-per-s",
                   "0.5", "--tenants", "2", "--gpu-bytes", "512MiB", "--cpu-bytes", "1GiB", "--ssd-bytes", "3GiB"])
        except SystemExit as exc:
            if exc.code:
                raise
    return path


def bench_replay(runs: int, quick: bool, workdir: Path) -> dict:
    from kvreplay.replay.engine import Replay, build_config
    from testbed.vm.replay import replay_vm
    from testbed.vm.replay_config import build_vm_config

    trace = synth_trace(workdir / "synth.parquet", quick)
    params = ["ru_bytes=64MiB"]
    emb = Replay(build_config(str(trace), "fdp", "oracle", params)).run()
    rows = emb["result"]["jobs"][0]["events"]["rows_replayed"]
    print(f"  trace: {rows:,} events, {emb['result']['jobs'][0]['user_bytes_written'] / 2**30:.2f} GiB written to "
          f"the SSD tier; embedded replay {emb['runtime']['replay_s']:.2f} s", flush=True)
    out: dict = {"trace_rows": rows, "user_bytes_written": emb["result"]["jobs"][0]["user_bytes_written"],
                 "embedded_replay_s": round(emb["runtime"]["replay_s"], 3)}
    per: dict[str, list] = {k: [] for k in ("events_per_s", "mb_per_s", "commands_per_s", "ops_per_s", "up_s",
                                            "replay_s", "wall_s")}
    for _ in range(runs):
        parts = replay_vm(build_vm_config(str(trace), "fdp", "oracle", params))
        rt, rv = parts["runtime"], parts["runtime"]["vm"]
        assert parts["result"]["vm"]["cross_checks_ok"], parts["result"]["vm"]["cross_checks"]
        per["events_per_s"].append(rows / rt["replay_s"])
        per["replay_s"].append(rt["replay_s"])
        per["wall_s"].append(rt["wall_s"])
        per["up_s"].append(rv["up_s"])
        for k in ("mb_per_s", "commands_per_s", "ops_per_s"):
            per[k].append(rv[k])
        print(f"  run: replay {rt['replay_s']:.2f} s ({rows / rt['replay_s']:,.0f} events/s), VM up {rv['up_s']:.1f} s, "
              f"guest {rv['mb_per_s']:.0f} MB/s, {rv['commands_per_s']:.0f} commands/s, {rv['ops_per_s']:.0f} ops/s",
              flush=True)
    out.update({k: round(med(v), 2) for k, v in per.items()})
    out["runs_events_per_s"] = [round(x) for x in per["events_per_s"]]
    print(f"  replay through the VM: {out['events_per_s']:,.0f} events/s; guest {out['mb_per_s']:.0f} MB/s, "
          f"{out['commands_per_s']:.0f} commands/s (median of {runs}); wall {out['wall_s']:.1f} s incl. boot", flush=True)
    return out


def bench_powerloss(runs: int, quick: bool, workdir: Path) -> dict:
    from kvreplay import schema as S
    from testbed.vm.replay import replay_vm
    from testbed.vm.replay_config import build_vm_config

    trace = synth_trace(workdir / "synth.parquet", quick)
    ts = S.read_trace(trace, columns=["ts_ns"])[0]["ts_ns"]
    at = int((ts[-1] - ts[0]) // 2)
    base = ["ru_bytes=64MiB", "backing=file"]
    variants = {"file, no fault": (base, {}),
                "power-loss, none": (base, {"fault": f"power-loss@{at},flush_ns=10ms"}),
                "power-loss, checksum": (base, {"fault": f"power-loss@{at},flush_ns=10ms", "contract": "checksum"})}
    out: dict = {"at_ns": at}
    for name, (params, opts) in variants.items():
        per: dict[str, list] = {k: [] for k in ("wall_s", "replay_s", "reboot_s", "scan_s", "scan_MB_per_s")}
        last = None
        for _ in range(runs):
            parts = replay_vm(build_vm_config(str(trace), "fdp", "oracle", params, opts))
            rt, vm = parts["runtime"], parts["result"]["vm"]
            assert vm["cross_checks_ok"], [c for c in vm["cross_checks"] if not c["ok"]]
            per["wall_s"].append(rt["wall_s"])
            per["replay_s"].append(rt["replay_s"])
            pl = vm.get("power_loss")
            if pl:
                sc = pl["scan"]
                per["reboot_s"].append(pl["power_cycle"]["reboot_s"])
                per["scan_s"].append(sc["scan_s"])
                per["scan_MB_per_s"].append(sc["bytes_read"] / sc["scan_s"] / 1e6 if sc["scan_s"] else 0.0)
                last = pl
        row = {k: round(med(v), 3) for k, v in per.items() if v}
        if last:
            row.update(writes_scanned=last["writes_scanned"], guest=last["guest"], agree=last["agree"],
                       disagree=last["disagree"], bytes_scanned=last["scan"]["bytes_read"],
                       crc32c=last["scan"]["crc32c"], pages_not_issued=last["issued_before_kill"]["pages_not_issued"])
        out[name] = row
        extra = (f"; restart {row['reboot_s']:.1f} s, scan of {row['writes_scanned']} writes "
                 f"({row['bytes_scanned'] / 2**20:,.0f} MiB) in {row['scan_s']:.2f} s ({row['scan_MB_per_s']:.0f} MB/s, "
                 f"CRC32C {row['crc32c']}): {row['guest']}, model agrees on {row['agree']}/{row['writes_scanned']}"
                 if last else "")
        print(f"  {name:22s} wall {row['wall_s']:.1f} s, replay {row['replay_s']:.1f} s{extra} (median of {runs})",
              flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one run, conv/fdp boots only, smaller streams")
    ap.add_argument("--only", choices=["boot", "io", "cxl", "replay", "powerloss"], default=None, help="one part only")
    ap.add_argument("--out", default="results/bench_vm.json")
    a = ap.parse_args()
    runs = 1 if a.quick else a.runs
    import os

    with tempfile.TemporaryDirectory(prefix="kvbed-bench-vms-") as d:
        if "KVBED_STATE_DIR" not in os.environ:
            os.environ["KVBED_STATE_DIR"] = d  # the bench's VMs stay apart from the user's
        run(a, runs, Path(d))


def run(a, runs: int, workdir: Path) -> None:
    t0 = time.monotonic()
    cold = image.find() is None
    img = image.ensure(log=lambda s: print(f"  {s}", flush=True))
    build_s = time.monotonic() - t0
    print(f"guest image {img.hash}: {'built in %.1f s' % build_s if cold else 'cached'}", flush=True)
    import os

    # other work on the machine slows TCG a lot: keep the load next to the figures
    result = {"runs": runs, "image": img.hash, "image_build_s": round(build_s, 1) if cold else None,
              "loadavg_1m_start": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
    print(f"host load average {result['loadavg_1m_start']} on {os.cpu_count()} cores", flush=True)
    want = lambda part: a.only in (None, part)  # noqa: E731
    if want("boot"):
        print("boot (QEMU start -> agent answers):", flush=True)
        result["boot"] = bench_boot(["conv", "fdp"] if a.quick else list(DEVICES), runs)
    if want("io"):
        print("guest replay throughput (FDP namespace, via VmTarget):", flush=True)
        result["io"] = bench_io(runs, a.quick)
    if want("cxl") and not a.quick:
        print("CXL devdax objects:", flush=True)
        result["cxl"] = bench_cxl(runs)
    if want("replay"):
        print("kvbed replay --target vm (FDP, oracle hints, ephemeral VM):", flush=True)
        result["replay"] = bench_replay(runs, a.quick, workdir)
    if want("powerloss"):
        print("power loss through the guest (FDP, oracle hints, file-backed ephemeral VM):", flush=True)
        result["powerloss"] = bench_powerloss(runs, a.quick, workdir)
    result["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
    write_json(a.out, result)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
