#!/usr/bin/env python3
"""Benchmark `kvbed replay` end to end: lifecycle events per second and peak memory on ~50M-event traces.

What is measured: ``Replay.run()`` in a fresh process per run - both passes over the trace (the sizing /
oracle scan and the replay: Parquet read, action selection, hint policy, layout, device model, latency
recording, time series) and the result assembly; not plotting, not interpreter start-up (reported apart).
Peak RSS is the child's ``VmHWM``. Numba kernels come from the on-disk cache (a warm-up run fills it).

Traces (built once, cached under ``--cache``):

- ``synth-50M``: ``kvbed trace synth``'s workload (4 tenants: chat, RAG, agents, batch) stretched to
  ~50M events by a longer ``duration_s`` with the same arrival rate and tier sizes (128 GiB SSD), so the
  live data stays the same while the trace grows - the memory test;
- ``mooncake-x15``: the Mooncake conversation trace repeated 15 times back to back (new block ids
  each time), tier-simulated with the defaults (2 TiB SSD): an SSD-write-heavy mix (12% of events are
  32 MiB SSD writes).

Memory boundedness: the synth trace is also replayed on its first 5M and 20M rows; peak RSS should not
grow with the trace (only the oracle keeps one class per tier write, 2 bytes).

Run: ``python scripts/bench_replay.py`` (about 15 minutes on 2 cores), ``--quick`` for a small check.
``--compare OLD_TREE`` (a checkout of another commit) replays every configuration with the old and this
tree's code in alternating fresh processes (``--runs`` each, same traces, same machine load) and prints
both medians and their ratio, and ``cpu n/o``: the ratio of events per CPU second of the child (all its
threads), which other work on a shared machine disturbs less than the wall clock (though it hides what a
second thread overlaps); the memory section is skipped.
The ``load`` column is the 1-minute load average around each configuration (other work on the machine);
the stage times are per thread and overlap (production runs beside submission), so they do not add up.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = Path(os.environ.get("KVBED_BENCH_TREE") or ROOT)  # whose code a child runs (--compare)
sys.path.insert(0, str(TREE))

MOONCAKE = (ROOT / "../shared/data/traces/mooncake/conversation_trace.jsonl").resolve()


# ------------------------------------------------------------------------------------------ traces


def _write(path: Path, reqs, tier_params, meta_extra: dict) -> int:
    from kvreplay import schema as S
    from kvreplay.tiers import simulate

    meta = S.TraceMeta(source={"importer": "bench_replay", **meta_extra},
                       generator={"tier_sim": dataclasses.asdict(tier_params)})
    with S.TraceWriter(path, meta, tenants=reqs.tenants, scopes=reqs.scopes) as w:
        res = simulate(reqs, tier_params, w.write)
    return res.events


def build_synth(path: Path, target_events: int) -> None:
    from kvreplay.synth import SYNTH_TIER_DEFAULTS, SynthParams, synthesize

    # the default 1200 s gives ~620K events; scale the duration, keep every rate and size
    duration = 1200.0 * target_events / 620_000
    reqs = synthesize(SynthParams(duration_s=duration))
    n = _write(path, reqs, SYNTH_TIER_DEFAULTS, {"synth_duration_s": duration})
    print(f"  built {path.name}: {n:,} events", flush=True)


def build_mooncake(path: Path, copies: int) -> None:
    import numpy as np

    from kvreplay.importers import IMPORTERS
    from kvreplay.requests import RequestTrace
    from kvreplay.tiers import TierSimParams

    r = IMPORTERS.get("mooncake")().read_requests(MOONCAKE)
    span = int(r.arrival_ns[-1] - r.arrival_ns[0]) + 1_000_000_000
    id_step = int(r.block_ids.max()) + 1
    n_ids = len(r.block_ids)
    reqs = RequestTrace(
        arrival_ns=np.concatenate([r.arrival_ns + k * span for k in range(copies)]),
        input_tokens=np.tile(r.input_tokens, copies),
        output_tokens=np.tile(r.output_tokens, copies),
        block_offsets=np.concatenate([[0]] + [r.block_offsets[1:] + k * n_ids for k in range(copies)]),
        block_ids=np.concatenate([r.block_ids + k * id_step for k in range(copies)]),
        block_tokens=r.block_tokens,
        session_id=np.concatenate([np.where(r.session_id >= 0, r.session_id + k * (1 << 32), -1)
                                   for k in range(copies)]),
    )
    n = _write(path, reqs, TierSimParams(), {"mooncake_copies": copies})
    print(f"  built {path.name}: {n:,} events", flush=True)


def prefix(src: Path, dst: Path, rows: int) -> None:
    from kvreplay import schema as S

    r = S.TraceReader(src)
    with S.TraceWriter(dst, r.meta, tenants=None) as w:
        done = 0
        for b in r.iter_batches():
            take = min(b.n, rows - done)
            w.set_string_tables(r.tenants, r.scopes)
            w.write(b.take(slice(0, take)))
            done += take
            if done >= rows:
                break
    print(f"  built {dst.name}: {rows:,} events", flush=True)


# ------------------------------------------------------------------------------------------ runs


def peak_rss_bytes() -> int:
    """This process's peak RSS (VmHWM: per address space, so not inherited from the parent like ru_maxrss)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def child(trace: str, device: str, hints: str, params: list[str]) -> None:
    """One measured replay in this (fresh) process; prints a JSON line."""
    t_import = time.perf_counter()
    from kvreplay.replay.engine import Replay, build_config

    imported = time.perf_counter() - t_import
    cfg = build_config(trace, device, hints, params)
    t0, c0 = time.perf_counter(), time.process_time()
    parts = Replay(cfg).run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    warm = {}
    if os.environ.get("KVBED_BENCH_WARM") == "1":  # a second replay in this process, as a study's worker's next
        t1, c1 = time.perf_counter(), time.process_time()
        Replay(build_config(trace, device, hints, params)).run()
        warm = {"warm": {"wall_s": time.perf_counter() - t1, "cpu_s": time.process_time() - c1}}
    rows = parts["result"]["jobs"][0]["events"]["rows_replayed"]
    job = parts["result"]["jobs"][0]
    print(json.dumps({
        "rows": rows, "wall_s": wall, "events_per_s": rows / wall, "import_s": imported,
        "cpu_s": cpu, "events_per_cpu_s": rows / cpu,
        "scan_s": parts["runtime"]["scan_s"], "stages": parts["runtime"]["replay_stage_s"],
        "peak_rss_bytes": peak_rss_bytes(),
        "waf": job["waf"], "device_pages": job["host_bytes_written"] // parts["result"]["sizing"]["page_bytes"],
        "logical_bytes": parts["result"]["sizing"]["logical_bytes"], **warm,
    }))


def run_child(trace: Path, device: str, hints: str, params: list[str], tree: Path = ROOT, *,
              warm: bool = False) -> dict:
    """One fresh process replaying ``trace``; ``warm``: it then replays it again, and the result's ``warm``
    holds that second replay's wall and CPU seconds (libraries imported and kernels loaded by the first)."""
    cmd = [sys.executable, __file__, "--child", str(trace), device, hints, *params]
    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(tree), KVBED_BENCH_TREE=str(tree), KVBED_BENCH_WARM=str(int(warm)))
    if tree != ROOT:  # another tree keeps its kernels apart (an older tree prunes cache directories it does not know)
        env["NUMBA_CACHE_DIR"] = str(ROOT / ".cache" / "bench" / "numba-other-tree")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"child failed: {' '.join(cmd)}\n{out.stderr}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_s"] = time.perf_counter() - t0
    return res


def compare(old: Path, traces: dict[str, Path], configs: list, runs: int) -> None:
    """Old and new code on the same configurations, alternating run by run (the order swapped every pair),
    so both see the same machine; events/s medians and new/old."""
    trees = {"old": old, "new": ROOT}
    print(f"warm-up of both trees (numba caches) ...  old = {old}", flush=True)
    for tree in trees.values():
        for dev, hints in (("fdp", "oracle"), ("zns", "none"), ("fdp", "predicted")):
            run_child(traces["synth"], dev, hints, [], tree)
    print(f"\n{'trace':10} {'device':6} {'hints':10} {'params':18} {'old Mev/s':>10} {'new Mev/s':>10} {'new/old':>8} "
          f"{'cpu n/o':>8} {'old RSS':>8} {'new RSS':>8} {'load':>5}   runs old | new (Mev/s)", flush=True)
    out = []
    for tname, dev, hints, params in configs:
        load0 = os.getloadavg()[0]
        rs: dict[str, list[dict]] = {"old": [], "new": []}
        for i in range(runs):
            for side in (("old", "new") if i % 2 == 0 else ("new", "old")):
                rs[side].append(run_child(traces[tname], dev, hints, params, trees[side]))
        load = (load0 + os.getloadavg()[0]) / 2
        ev = {k: [r["events_per_s"] / 1e6 for r in v] for k, v in rs.items()}
        med = {k: statistics.median(v) for k, v in ev.items()}
        # events per CPU second of the child (all its threads): less at the mercy of other work on the machine
        cpu = {k: statistics.median(r["events_per_cpu_s"] for r in v) for k, v in rs.items()}
        rss = {k: statistics.median(r["peak_rss_bytes"] for r in v) / 2**20 for k, v in rs.items()}
        wafs = {k: {r["waf"] for r in v} for k, v in rs.items()}
        same = "" if wafs["old"] == wafs["new"] else f"  WAF DIFFERS: {wafs}"
        print(f"{tname:10} {dev:6} {hints:10} {' '.join(params) or '-':18} {med['old']:10.2f} {med['new']:10.2f} "
              f"{med['new'] / med['old']:8.3f} {cpu['new'] / cpu['old']:8.3f} {rss['old']:8.0f} {rss['new']:8.0f} "
              f"{load:5.1f}   "
              f"{' '.join(f'{x:.2f}' for x in ev['old'])} | {' '.join(f'{x:.2f}' for x in ev['new'])}{same}",
              flush=True)
        out.append({"trace": tname, "device": dev, "hints": hints, "params": params, "runs": rs})
    (ROOT / ".cache" / "bench" / "bench_replay_compare.json").write_text(json.dumps(out, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=ROOT / ".cache" / "bench")
    ap.add_argument("--runs", type=int, default=3, help="runs per configuration (medians are reported)")
    ap.add_argument("--quick", action="store_true", help="2M-event traces, one run each")
    ap.add_argument("--compare", type=Path, default=None, metavar="OLD_TREE",
                    help="another checkout: run old and this tree alternately, print both medians")
    ap.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        trace, device, hints, *params = a.child
        child(trace, device, hints, params)
        return
    a.cache.mkdir(parents=True, exist_ok=True)
    target = 2_000_000 if a.quick else 50_000_000
    runs = 1 if a.quick else a.runs
    synth = a.cache / f"synth-{target // 1_000_000}M.parquet"
    print("traces:", flush=True)
    if not synth.exists():
        build_synth(synth, target)
    traces = {"synth": synth}
    if MOONCAKE.exists():
        copies = 1 if a.quick else 15
        mc = a.cache / f"mooncake-x{copies}.parquet"
        if not mc.exists():
            build_mooncake(mc, copies)
        traces["mooncake"] = mc
    from kvreplay import schema as S

    sizes = {k: S.TraceReader(p).num_rows for k, p in traces.items()}
    for k, p in traces.items():
        print(f"  {k}: {p} ({sizes[k]:,} events, {p.stat().st_size / 1e6:.0f} MB)")
    configs = [
        ("synth", "fdp", "none", []), ("synth", "fdp", "oracle", []), ("synth", "fdp", "predicted", []),
        ("synth", "zns", "oracle", []),
    ]
    if "mooncake" in traces:
        configs += [("mooncake", "fdp", "none", []), ("mooncake", "fdp", "oracle", []),
                    ("mooncake", "fdp", "oracle", ["page_bytes=4MiB"])]
    if a.compare:
        compare(a.compare.resolve(), traces, configs, runs)
        return
    print("warm-up (fills the numba cache) ...", flush=True)
    run_child(traces["synth"], "fdp", "oracle", [])
    run_child(traces["synth"], "zns", "none", [])
    print(f"\n{'trace':10} {'device':6} {'hints':10} {'params':18} {'events':>12} {'wall s':>8} {'Mev/s':>7} "
          f"{'(min-max)':>13} {'scan s':>7} {'RSS MiB':>8} {'WAF':>6} {'load':>5}   stages (median s)")
    results = []
    for tname, dev, hints, params in configs:
        load0 = os.getloadavg()[0]
        rs = [run_child(traces[tname], dev, hints, params) for _ in range(runs)]
        load = (load0 + os.getloadavg()[0]) / 2  # other work on this shared machine, for reading the figures
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        evs = [r["events_per_s"] / 1e6 for r in rs]
        stages = {k: round(statistics.median(r["stages"][k] for r in rs), 2) for k in rs[0]["stages"]}
        print(f"{tname:10} {dev:6} {hints:10} {' '.join(params) or '-':18} {rs[0]['rows']:>12,} {med('wall_s'):8.2f} "
              f"{statistics.median(evs):7.2f} {min(evs):6.2f}-{max(evs):<6.2f} {med('scan_s'):7.2f} "
              f"{med('peak_rss_bytes') / 2**20:8.0f} {rs[0]['waf']:6.3f} {load:5.1f}   {stages}", flush=True)
        results.append({"trace": tname, "device": dev, "hints": hints, "params": params, "runs": rs})
    print("\nmemory vs trace length (synth, fdp, peak RSS of the whole process):")
    steps = [1_000_000, target // 2] if a.quick else [5_000_000, 20_000_000]
    for rows in steps:
        p = a.cache / f"{synth.stem}-first{rows // 1_000_000}M.parquet"
        if not p.exists():
            prefix(synth, p, rows)
    for hints in ("none", "predicted", "oracle"):
        line = []
        for rows in steps + [sizes["synth"]]:
            p = synth if rows == sizes["synth"] else a.cache / f"{synth.stem}-first{rows // 1_000_000}M.parquet"
            r = run_child(p, "fdp", hints, [])
            line.append(f"{rows / 1e6:.0f}M events: {r['peak_rss_bytes'] / 2**20:.0f} MiB")
        print(f"  {hints:10} " + ", ".join(line), flush=True)
    (a.cache / "bench_replay.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
