"""`kvbed replay`: results shaped like fio's, reproducible to the byte, partial on Ctrl-C, sized from the
trace, and a one-line error for every bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.support.cli import kvbed, ok, one_line_error
from devicemodels.histogram import FIO_PERCENTILES, percentile_key
from kvreplay import schema as S
from kvreplay.replay.engine import Replay, build_config, pids_of_classes
from tests.support.replay_fixtures import two_lifetimes
from testbed.results import load_run, write_run

from tests.support.paths import ROOT
FIO_KEYS = [percentile_key(p) for p in FIO_PERCENTILES]
RUN_FILES = ("config.json", "result.json", "timeseries.parquet", "latency.parquet")


@pytest.fixture(scope="module")
def trace(lifetimes_trace):
    return lifetimes_trace(3000)


def replay_cli(trace, out, *extra):
    return ok(kvbed("replay", trace, "-o", out, "-q", "--no-plots", *extra))


def result(run_dir):
    return json.loads((Path(run_dir) / "result.json").read_text())


# --------------------------------------------------------------------------------------------- results


def test_result_is_fio_shaped_and_consistent(trace, tmp_path):
    replay_cli(trace, tmp_path / "r", "--device", "fdp", "--hints", "oracle")
    r = result(tmp_path / "r")
    assert r["kvbed version"].startswith("kvbed-") and r["incomplete"] is False
    assert r["global options"]["hints"] == "oracle" and r["global options"]["device"] == "fdp"
    job = r["jobs"][0]
    for d in ("read", "write", "object_read", "object_write"):
        e = job[d]
        assert {"io_bytes", "bw_bytes", "bw", "iops", "runtime_ns", "runtime", "total_ios", "lat_ns"} <= set(e)
        lat = e["lat_ns"]
        assert {"min", "max", "mean", "stddev", "N", "percentile"} <= set(lat)
        assert list(lat["percentile"]) == FIO_KEYS
        vals = list(lat["percentile"].values())
        assert vals == sorted(vals) and lat["min"] <= vals[0] and vals[-1] <= lat["max"]
    scan = r["scan"]
    # every persist of the tier was placed: 3000 objects of 4 MiB = 4 units each
    assert sum(c["writes"] for c in job["per_class"]) == scan["writes"] == 3000
    assert job["user_bytes_written"] == 3000 * 4 << 20 == job["write"]["io_bytes"]
    assert job["object_write"]["total_ios"] == 3000
    assert job["object_read"]["total_ios"] == job["layout"]["objects_read"] == scan["reads"]
    assert job["host_bytes_written"] == job["user_bytes_written"]  # fdp: no host GC
    assert job["waf"] == job["media_bytes_written"] / job["host_bytes_written"]
    assert len(job["per_ruh"]) == 8 + 1  # 8 RUHs and the shared GC destination
    assert sum(x["host_bytes_written"] for x in job["per_ruh"][:8]) == job["host_bytes_written"]
    assert job["hint_policy"]["offline"] is True and "future" in job["hint_policy"]["knows"]
    # fio's trim entry carries its bytes too: every deallocation the layout sent, as the device counted them
    assert job["trim"]["total_ios"] == job["layout"]["ops_trim"] > 0
    assert job["trim"]["io_bytes"] == r["device"]["counters"]["host_pages_trimmed"] << 20 > 0
    for d in ("read", "write", "trim", "object_read", "object_write"):  # one runtime: IOPS and bandwidth agree
        e = job[d]
        secs = e["runtime_ns"] / 1e9
        assert e["runtime_ns"] == job["runtime_ns"] > 0
        assert e["iops"] == e["total_ios"] / secs and e["bw_bytes"] == int(e["io_bytes"] / secs)
        # fio's own units beside ours: runtime in whole ms, bw in whole KiB/s
        assert e["runtime"] == e["runtime_ns"] // 10**6 and isinstance(e["runtime"], int)
        assert e["bw"] == int(e["io_bytes"] / 1024 / secs) and abs(e["bw"] - e["bw_bytes"] / 1024) < 1
    ts = pq.read_table(tmp_path / "r" / "timeseries.parquet").to_pydict()
    assert sum(ts["user_bytes_written"]) == job["user_bytes_written"]
    assert sum(ts["write_ops"]) == job["write"]["total_ios"]
    assert ts["t_start_ns"] == sorted(ts["t_start_ns"]) and len(ts["window"]) >= 100
    lat = pq.read_table(tmp_path / "r" / "latency.parquet").to_pydict()
    per = {}
    for s, c in zip(lat["series"], lat["count"]):
        per[s] = per.get(s, 0) + c
    assert per["write"] == job["write"]["total_ios"] and per["object_read"] == job["object_read"]["total_ios"]
    rt = json.loads((tmp_path / "r" / "runtime.json").read_text())
    # the run's own speed is kept apart from numba compiling or loading kernels (part of wall_s)
    assert 0 <= rt["jit_s"] < rt["wall_s"]
    assert rt["events_per_s"] == pytest.approx(job["events"]["rows_replayed"] / (rt["wall_s"] - rt["jit_s"]))


def test_compile_time_is_reported_apart(trace, tmp_path):
    """In a fresh process with an empty kernel cache the replay compiles; the summary says how long, apart
    from the events/s of the replay itself."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200")
    cmd = [sys.executable, "-c", "from testbed.cli import main; main()", "replay", str(trace), "--device", "cxl",
           "--no-plots", "-o", str(tmp_path / "r")]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    rt = json.loads((tmp_path / "r" / "runtime.json").read_text())
    assert rt["jit_s"] > 1.0 and rt["jit_s"] < rt["wall_s"]
    line = next(ln for ln in res.stdout.splitlines() if "events/s" in ln)
    assert "compiling kernels" in line and f"{rt['jit_s']:.1f} s compiling" in line


def _summary_row(output: str, name: str) -> str:
    """The value cell of the summary table's row ``name`` (a wide terminal: one line per row)."""
    cells = (ln.split("│") for ln in output.splitlines())
    return next(c[2].strip() for c in cells if len(c) == 4 and c[1].strip() == name)


def test_the_summary_gives_the_seconds_its_events_per_second_divide_by_and_the_hint_labs_apart(trace, tmp_path):
    """With --hint-lab the run's wall time holds the lab's two extra replays; the events line divides by the
    replay's own time (events_per_s) and says so by printing that time, the lab's after it."""
    res = ok(kvbed("replay", trace, "--hints", "oracle", "--hint-lab", "--no-plots", "-o", tmp_path / "r",
                   env={"COLUMNS": "250"}))
    rt = json.loads((tmp_path / "r" / "runtime.json").read_text())
    rows = result(tmp_path / "r")["jobs"][0]["events"]["rows_replayed"]
    own_s = rt["wall_s"] - rt["jit_s"] - rt["hint_lab_s"]
    assert rt["hint_lab_s"] > 0 and rt["events_per_s"] == pytest.approx(rows / own_s)
    row = _summary_row(res.stdout, "events")
    assert row.startswith(f"{rows:,} in {own_s:.1f} s ({rt['events_per_s']:,.0f} events/s)")
    assert f"+ {rt['hint_lab_s']:.1f} s hint lab" in row
    lab = result(tmp_path / "r")["jobs"][0]["hint_policy"]["lab"]
    assert (f"accuracy {100 * lab['accuracy']:.1f}% of writes (every write in the oracle's largest class: "
            f"{100 * lab['accuracy_one_class']:.1f}%)") in _summary_row(res.stdout, "hint lab (vs oracle)")


def test_a_zoned_drives_fill_is_of_what_its_zones_can_hold(trace, tmp_path):
    """ZNS zones hold less than their size (zone capacity), and some zones are kept for GC and open streams: the
    summary's fill is peak live data over the space left for data, which it names beside the logical size."""
    res = ok(kvbed("replay", trace, "--device", "zns", "--no-plots", "-o", tmp_path / "z", env={"COLUMNS": "250"}))
    sz = result(tmp_path / "z")["sizing"]
    from testbed.report import fmt_bytes

    writable = sz["usable_pages"] * sz["page_bytes"]
    assert sz["zone_cap_bytes"] < sz["zone_bytes"] and writable < sz["logical_bytes"]
    assert sz["fill_ratio_effective"] == pytest.approx(sz["peak_live_bytes_paged"] / writable)
    row = _summary_row(res.stdout, "device")
    assert f"{fmt_bytes(writable)} usable for data" in row and f"fill {sz['fill_ratio_effective']:.3f} of that" in row


def test_oracle_lowers_waf_on_fdp(trace, tmp_path):
    wafs = {}
    # type's own classes (unguarded) and with an abstain guard that may decide on this short trace's deaths
    runs = {"none": (), "oracle": (), "type": ("--param", "abstain=false"),
            "type-guarded": ("--param", "min_deaths=128", "--param", "confirm=1")}
    for name, extra in runs.items():
        replay_cli(trace, tmp_path / name, "--hints", name.split("-")[0], "--fill-ratio", "1.0", *extra)
        wafs[name] = result(tmp_path / name)["jobs"][0]["waf"]
    assert wafs["none"] > 1.05  # mixed lifetimes in one RUH cost GC copies
    assert wafs["oracle"] < wafs["none"] and wafs["type"] < wafs["none"]  # kind follows lifetime in this trace
    guard = result(tmp_path / "type-guarded")["jobs"][0]["hint_policy"]
    assert guard["abstained_bytes_share"] < 1 and guard["separation_at_end"] >= 0.5  # it follows, and it pays
    assert wafs["type-guarded"] < wafs["none"]


def test_more_classes_than_placement_ids_merge_lifetime_neighbours(tmp_path):
    """16 oracle classes on 8 RUHs: pairs of adjacent classes share a RUH, which is the 8-class oracle again (its
    classes are lifetime quantiles); the old round-robin fold put class 8 (long-lived) beside class 0 and gave
    1.0899 against 1.0027 on the synthetic sample. The sizing notes say the classes were merged."""
    assert pids_of_classes(16, 8).tolist() == [k // 2 for k in range(16)]
    assert pids_of_classes(3, 8).tolist() == [0, 1, 2] and pids_of_classes(5, 1).tolist() == [0] * 5
    assert pids_of_classes(8, 3).tolist() == [0, 0, 0, 1, 1, 1, 2, 2]
    sample = tmp_path / "s.parquet"
    ok(kvbed("trace", "synth", "-o", sample))
    runs = {}
    for c in (8, 16):
        replay_cli(sample, tmp_path / f"c{c}", "--hints", "oracle", "--param", f"classes={c}")
        runs[c] = result(tmp_path / f"c{c}")
    assert runs[16]["jobs"][0]["waf"] == runs[8]["jobs"][0]["waf"] < 1.01
    assert [c["pid"] for c in runs[16]["jobs"][0]["per_class"]] == [k // 2 for k in range(16)]
    notes = runs[16]["sizing"]["notes"]
    assert any("16 hint classes on 8 placement ids" in n for n in notes)
    assert not any("placement ids" in n for n in runs[8]["sizing"]["notes"])


def test_a_run_written_over_an_earlier_one_says_so(trace, tmp_path):
    first = replay_cli(trace, tmp_path / "r", "--hints", "none")
    assert "replaced" not in first.stderr
    again = replay_cli(trace, tmp_path / "r", "--hints", "oracle")
    assert f"kvbed: note: replaced the earlier run in {tmp_path / 'r'}" in again.stderr
    assert result(tmp_path / "r")["global options"]["hints"] == "oracle"


def test_an_op_ratio_of_one_or_more_is_noted_as_a_likely_slip(trace, tmp_path):
    replay_cli(trace, tmp_path / "op7", "--param", "op_ratio=7")
    notes = result(tmp_path / "op7")["sizing"]["notes"]
    assert any("op_ratio 7: the spare area is 7x the logical capacity" in n for n in notes)
    replay_cli(trace, tmp_path / "op07", "--param", "op_ratio=0.07")
    assert not any("op_ratio" in n for n in result(tmp_path / "op07")["sizing"]["notes"])


def test_same_seed_same_bytes_and_rerun_from_config(trace, tmp_path):
    args = ("--hints", "noisy-oracle", "--seed", "7", "--param", "error_rate=0.2")
    replay_cli(trace, tmp_path / "a", *args)
    replay_cli(trace, tmp_path / "b", *args)
    ok(kvbed("replay", "--config", tmp_path / "a" / "config.json", "-o", tmp_path / "c", "-q", "--no-plots"))
    for name in RUN_FILES:
        a = (tmp_path / "a" / name).read_bytes()
        assert a == (tmp_path / "b" / name).read_bytes(), name
        assert a == (tmp_path / "c" / name).read_bytes(), name
    replay_cli(trace, tmp_path / "d", "--hints", "noisy-oracle", "--seed", "8", "--param", "error_rate=0.2")
    assert result(tmp_path / "d")["jobs"][0]["per_class"] != result(tmp_path / "a")["jobs"][0]["per_class"]


class Phases:
    """A progress sink that remembers the engine's phase (scan, replay)."""

    name = None

    def phase(self, name, total):
        self.name = name

    def advance(self, n):
        pass


def test_stop_leaves_a_valid_partial_result(trace, tmp_path):
    calls = {"n": 0}
    prog = Phases()

    def stop():
        calls["n"] += prog.name == "replay"
        return calls["n"] >= 3

    cfg = build_config(trace, "fdp", "predicted", [])
    parts = Replay(cfg, progress=prog, should_stop=stop).run()
    run = load_run(write_run(tmp_path / "p", parts))
    r = run.result
    assert r["incomplete"] is True
    rows = r["jobs"][0]["events"]["rows_replayed"]
    assert 0 < rows < r["scan"]["rows"] and r["stopped_at_row"] == rows
    assert 0 < r["jobs"][0]["object_write"]["total_ios"] < 3000
    ok(kvbed("report", tmp_path / "p", "--no-plot"))


def test_partial_result_stopped_inside_a_row_group_agrees_with_itself(tmp_path):
    """One big row group: the layout stops part-way (its tables grow), so the first stop point is inside the
    row group. Per-class and per-action counts must then cover exactly the events replayed, not the whole group."""
    big = two_lifetimes(tmp_path / "one_group.parquet", n_objects=20000, row_group_rows=1 << 17)
    prog = Phases()
    parts = Replay(build_config(big, "fdp", "none", []), progress=prog, should_stop=lambda: prog.name == "replay").run()
    r = parts["result"]
    job = r["jobs"][0]
    rows = job["events"]["rows_replayed"]
    assert r["incomplete"] is True and 0 < rows < 1 << 17  # stopped inside the first row group
    written = job["layout"]["objects_written"]
    assert 0 < written < 20000
    assert sum(c["writes"] for c in job["per_class"]) == written == job["object_write"]["total_ios"]
    assert sum(c["bytes_written"] for c in job["per_class"]) == job["user_bytes_written"]
    assert job["events"]["tier_events_by_action"]["write"] == written


def test_a_stop_during_the_scan_keeps_nothing(trace):
    """Nothing is replayed before the scan ends: stopped there, the engine says so and returns no result."""
    from kvbed.core.errors import Interrupted

    with pytest.raises(Interrupted, match="during the scan"):
        Replay(build_config(trace, "fdp", "none", []), should_stop=lambda: True).run()


# --------------------------------------------------------------------------------------------- timing


class Recorder:
    """The real device model, with every submitted op's arrival and completion kept for inspection."""

    def __init__(self, dev):
        self.dev, self.arr, self.done = dev, [], []

    def __getattr__(self, name):
        return getattr(self.dev, name)

    def submit(self, ops):
        c = self.dev.submit(ops)
        self.arr.append(np.asarray(ops["arrival_ns"]).copy())
        self.done.append(c.done_ns.copy())
        return c


def _recorded(cfg):
    rep = Replay(cfg)
    prepare = rep.prepare

    def wrapped():
        prepare()
        rep.target = Recorder(rep.device)
        rep.rec = rep.target

    rep.prepare = wrapped
    parts = rep.run()
    return parts, np.concatenate(rep.rec.arr), np.concatenate(rep.rec.done)


@pytest.mark.parametrize("device, unit, field", [("fdp", "reclaim units", "fdp.ru_bytes"),
                                                  ("conv", "lines", "flash.blocks_per_line"),
                                                  ("zns", "zones", "zns.zone_bytes")])
def test_narrow_stripes_of_a_small_write_heavy_device_are_noted(trace, device, unit, field):
    """This trace writes 4 GB/s into ~5 GiB of live data: the dies are raised to 8 x 32 for the rate, the
    lines/RUs/zones halved to keep 256 of them, so each spans 16 of the 256 dies, and the result says so.
    Full-width units (given dies) leave no such note."""
    parts, _, _ = _recorded(build_config(trace, device, "none", []))
    sz = parts["result"]["sizing"]
    assert (sz["parallelism"]["channels"], sz["parallelism"]["dies_per_channel"]) == (8, 32)
    assert [n for n in sz["notes"] if "dies (to keep" in n] == [
        f"{unit} span 16 of 256 dies (to keep 256 of them on this capacity): one "
        f"{ {'fdp': 'RUH', 'conv': 'write frontier', 'zns': 'open zone'}[device]} gets 16/256 of the program "
        f"bandwidth, so write latencies include stripe width; set {field.split('.')[1]} or fewer dies "
        "(channels, dies_per_channel) to choose otherwise"]
    wide, _, _ = _recorded(build_config(trace, device, "none", ["channels=1", "dies_per_channel=4"]))
    assert not [n for n in wide["result"]["sizing"]["notes"] if "dies (to keep" in n]


def test_as_fast_as_possible_keeps_queue_depth_in_flight(trace):
    cfg = build_config(trace, "fdp", "none", ["queue_depth=4"], {"as_fast_as_possible": True})
    parts, arr, done = _recorded(cfg)
    assert (np.diff(arr) >= 0).all()
    # at every arrival, at most 4 ops have arrived and not completed
    inflight = np.searchsorted(np.sort(arr), arr, side="right") - np.searchsorted(np.sort(done), arr, side="right")
    assert inflight.max() <= 4 and inflight.max() >= 2
    assert parts["result"]["sizing"]["parallelism"]["mode"] == "given"  # no trace rate to size for


@pytest.mark.parametrize("hints, extra", [("none", {"as_fast_as_possible": True}), ("oracle", {}),
                                          ("learned", {"as_fast_as_possible": True})])
def test_results_do_not_depend_on_how_the_trace_file_is_cut(tmp_path, monkeypatch, hints, extra):
    """The same events in 4096-row and 1000-row row groups, replayed in 777-row batches too: the same result.
    Closed-loop (--as-fast-as-possible) groups of queue_depth ops used to restart at every segment, so the
    arrivals moved with the file's row groups."""
    from kvreplay.replay import engine, scan

    a = two_lifetimes(tmp_path / "a.parquet", n_objects=2000)
    b = two_lifetimes(tmp_path / "b.parquet", n_objects=2000, row_group_rows=1000)
    assert pq.ParquetFile(a).num_row_groups != pq.ParquetFile(b).num_row_groups

    def jobs(path):
        cfg = build_config(path, "fdp", hints, ["queue_depth=5", "retrain_writes=512"] if hints == "learned"
                           else ["queue_depth=5"], dict(extra))
        return Replay(cfg).run()["result"]["jobs"]

    want = jobs(a)
    assert jobs(b) == want
    monkeypatch.setattr(engine, "BATCH_ROWS", 777)
    monkeypatch.setattr(scan, "BATCH_ROWS", 777)
    assert jobs(a) == want


def test_time_scale_stretches_arrivals(trace):
    fixed = ["channels=8", "dies_per_channel=8"]
    p1, arr1, _ = _recorded(build_config(trace, "fdp", "none", fixed))
    p2, arr2, _ = _recorded(build_config(trace, "fdp", "none", fixed, {"time_scale": "0.1"}))
    assert len(arr1) == len(arr2) and arr1[-1] > 0
    assert np.array_equal(arr2, np.floor(arr1 / 0.1).astype(np.int64))  # trace time / scale
    lat = lambda p: p["result"]["jobs"][0]["object_write"]["lat_ns"]["percentile"]["99.000000"]  # noqa: E731
    assert lat(p2) < lat(p1)  # ten times slower arrivals: less queueing


# --------------------------------------------------------------------------------------------- sizing


def test_capacity_is_sized_from_peak_live_data(trace, tmp_path):
    replay_cli(trace, tmp_path / "s", "--fill-ratio", "0.8")
    r = result(tmp_path / "s")
    sz, scan = r["sizing"], r["scan"]
    assert sz["mode"] == "auto" and not any("capacity raised" in n for n in sz["notes"])
    assert sz["logical_bytes"] == math.ceil(scan["peak_live_pages"] / 0.8) * (1 << 20)
    assert sz["peak_live_pages"] == scan["peak_live_pages"] > 0
    assert r["device"]["geometry"]["logical_bytes"] == sz["logical_bytes"]
    assert r["jobs"][0]["layout"]["forced_evictions"] == 0  # it fits: nothing evicted by the layout


@pytest.mark.parametrize("gc_free_zones", [0, 1, 3])
def test_zns_sizing_holds_back_the_zones_the_layout_keeps_free(trace, gc_free_zones):
    """The capacity the sizing promises is what the zone layout can fill: every zone but the open streams
    and the free zones host GC keeps (at least 2: one for the GC stream, one for the next user zone)."""
    rep = Replay(build_config(trace, "zns", "none", ["fill_ratio=1.0", f"gc_free_zones={gc_free_zones}"]))
    rep.prepare()
    sz, lay = rep.cfg.sizing, rep.layout
    assert lay.gc_free_zones == max(2, gc_free_zones or lay.n_zones // 20)
    assert sz["zones"] == lay.n_zones
    assert sz["usable_pages"] == (lay.n_zones - lay.n_streams - lay.gc_free_zones) * lay.cap_pages
    assert sz["usable_pages"] >= sz["peak_live_pages"]  # fill 1.0: just enough


def test_undersized_device_evicts_by_policy_only_when_allowed(trace, tmp_path):
    small = ("--param", "logical_bytes=2GiB", "--param", "ru_bytes=4MiB")
    res = kvbed("replay", trace, "-o", tmp_path / "no", "-q", *small)
    one_line_error(res, "too small for the live data", "strict_capacity=false")
    assert not (tmp_path / "no").exists()
    replay_cli(trace, tmp_path / "yes", *small, "--param", "strict_capacity=false")
    job = result(tmp_path / "yes")["jobs"][0]
    lay = job["layout"]
    assert lay["forced_evictions"] > 0 and lay["objects_written"] == 3000  # evicted, never dropped
    assert lay["resident_pages"] <= 2048 and lay["evict_policy"] == "lru"  # the trace says ssd_policy=lru


# --------------------------------------------------------------------------------------------- devices


def test_zns_reports_resets_relocations_and_host_waf(trace, tmp_path):
    jobs = {}
    for h in ("none", "oracle"):
        replay_cli(trace, tmp_path / h, "--device", "zns", "--hints", h, "--fill-ratio", "1.0")
        jobs[h] = result(tmp_path / h)["jobs"][0]
    j = jobs["none"]
    lay = j["layout"]
    assert lay["zone_resets"] > 0 and lay["gc_relocated_pages"] > 0
    assert j["zone_resets"] == lay["zone_resets"] == j["host_gc"]["zone_resets"]
    assert j["host_waf"] == (lay["pages_written"] + lay["gc_relocated_pages"]) / lay["pages_written"]
    assert j["waf"] == 1.0 and j["end_to_end_waf"] == j["host_waf"]  # the drive itself never copies
    assert j["host_gc"]["relocated_bytes"] == lay["gc_relocated_pages"] << 20
    assert j["zones"]["gc_stream"] == "shared" and j["zones"]["streams"] == 9  # 8 classes + GC
    assert jobs["oracle"]["host_waf"] < j["host_waf"]


def test_zns_replay_hand_case(tmp_path):
    """The zone layout's hand case (tests/kvreplay/layout/test_layout_zone.py) as a trace through `kvbed replay`: six 4 MiB zones,
    one class, a shared GC stream, two free zones kept; 2 MiB objects 1-6 persisted, 1, 3, 5 evicted, 7-11
    persisted, 6 evicted. GC relocates objects 2 and 4 (4 MiB) and resets zones 0 and 1; evicting 6 empties zone 2.
    Host writes 22 user units + 4 relocated: host WAF 26/22, 3 zone resets, the drive itself copies nothing."""
    made = lambda o: [(S.OP_CREATE, o, S.TIER_GPU), (S.OP_COMMIT, o, S.TIER_GPU), (S.OP_PERSIST, o, S.TIER_SSD)]  # noqa: E731
    ev = [e for o in range(1, 7) for e in made(o)] + [(S.OP_EVICT, o, S.TIER_SSD) for o in (1, 3, 5)] + \
         [e for o in range(7, 12) for e in made(o)] + [(S.OP_EVICT, 6, S.TIER_SSD)]
    n = len(ev)
    S.write_trace(tmp_path / "z.parquet", S.make_batch(
        ts_ns=np.arange(1, n + 1) * 1000, op=np.array([e[0] for e in ev]), obj_id=np.array([e[1] for e in ev]),
        tier=np.array([e[2] for e in ev]), nbytes=np.full(n, 2 << 20)), S.TraceMeta())
    params = ["logical_bytes=24MiB", "zone_bytes=4MiB", "zone_cap_bytes=4MiB", "max_open_zones=3",
              "max_active_zones=3", "gc_free_zones=2", "classes=1", "strict_capacity=false"]
    replay_cli(tmp_path / "z.parquet", tmp_path / "r", "--device", "zns", *(a for p in params for a in ("--param", p)))
    r = result(tmp_path / "r")
    j = r["jobs"][0]
    assert j["user_bytes_written"] == 22 << 20 and j["host_bytes_written"] == 26 << 20
    assert j["host_waf"] == 26 / 22 == j["end_to_end_waf"] and j["waf"] == 1.0
    assert j["zone_resets"] == 3 == r["device"]["counters"]["ops_zone_reset"]
    assert j["host_gc"] == {"runs": 2, "relocated_bytes": 4 << 20, "zone_resets": 3}
    assert j["host_gc_write"]["io_bytes"] == 4 << 20 and j["host_gc_read"]["total_ios"] == 2
    assert j["layout"]["forced_evictions"] == 0 and j["zones"]["zones_by_state"] == {"empty": 2, "open": 1, "full": 3}
    assert j["zones"]["per_group"] == [  # the layout test's per-stream figures, in bytes
        {"stream": 0, "role": "user", "class": 0, "zones_open": 1, "zones_full": 2, "zones_opened": 6,
         "zone_resets": 3, "valid_bytes": 10 << 20, "relocated_bytes": 4 << 20},
        {"stream": 1, "role": "gc", "class": None, "zones_open": 0, "zones_full": 1, "zones_opened": 1,
         "zone_resets": 0, "valid_bytes": 4 << 20, "relocated_bytes": 0}]
    assert "per_stream" not in j["layout"]


def test_precondition_is_counted_apart(trace, tmp_path):
    replay_cli(trace, tmp_path / "pre", "--precondition", "0.9")
    r = result(tmp_path / "pre")
    pre = r["precondition"]
    assert pre["fill_ratio"] == 0.9 and pre["host_pages_written"] == round(0.9 * r["sizing"]["usable_pages"])
    # the replay's own counters start after it: host writes are exactly the trace's
    assert r["jobs"][0]["host_bytes_written"] == r["jobs"][0]["user_bytes_written"] == 3000 * 4 << 20
    res = kvbed("replay", trace, "--device", "zns", "--precondition", "0.5", "-o", tmp_path / "z", "-q")
    one_line_error(res, "--precondition", "zns")


def test_conv_and_cxl_replay(trace, tmp_path):
    replay_cli(trace, tmp_path / "conv", "--device", "conv", "--hints", "oracle")
    j = result(tmp_path / "conv")["jobs"][0]
    assert j["classes"] == 1 and j["per_class"][0]["writes"] == 3000  # conv separates nothing
    replay_cli(trace, tmp_path / "cxl", "--device", "cxl")
    j = result(tmp_path / "cxl")["jobs"][0]
    assert j["waf"] == 1.0 and j["object_read"]["total_ios"] > 0
    replay_cli(trace, tmp_path / "cs", "--device", "cxl-ssd")
    r = result(tmp_path / "cs")
    assert r["jobs"][0]["object_write"]["total_ios"] == 3000
    # the cache: 1/20 of the flash in whole sets of 8 units of 1 MiB; hit and miss reads apart
    cache, dev = r["device"]["cache"], r["device"]
    assert cache["cache_bytes"] == r["sizing"]["logical_bytes"] // 20 // (8 << 20) * (8 << 20)
    assert cache["read_hit_latency"]["ios"] + cache["read_miss_latency"]["ios"] == dev["latency"]["read"]["ios"]
    assert cache["writebacks"] == dev["counters"]["cache_writebacks"] and "waf" in dev["flash"]


def test_dram_replay_is_sized_like_cxl(trace, tmp_path):
    replay_cli(trace, tmp_path / "dram", "--device", "dram")
    replay_cli(trace, tmp_path / "cxl", "--device", "cxl")
    d, c = result(tmp_path / "dram"), result(tmp_path / "cxl")
    assert d["sizing"]["logical_bytes"] == c["sizing"]["logical_bytes"] == d["device"]["geometry"]["dram_bytes"]
    assert d["global options"]["device_params"]["dram"]["page_bytes"] == 1 << 20
    jd, jc = d["jobs"][0], c["jobs"][0]
    assert jd["waf"] == 1.0 and jd["object_write"]["total_ios"] == 3000
    # a 4 MiB object: over the GPU link at 64 GB/s (65.5 us) + 100 ns, not over one 32 GB/s CXL link + 250 ns
    assert jd["object_write"]["lat_ns"]["min"] == 4 * 16384 + 100
    assert jc["object_write"]["lat_ns"]["min"] == 4 * 32768 + 250


# --------------------------------------------------------------------------------------------- bad input


def _other_version(path: Path) -> Path:
    batch = S.make_batch(ts_ns=[1], op=["persist"], obj_id=[1], tier=["ssd"], nbytes=[1 << 20])
    S.write_trace(path, batch, S.TraceMeta())
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[S.META_KEY])
    meta["format_version"] = 99  # the writer writes the current version: set a future one afterwards
    pq.write_table(table.replace_schema_metadata({S.META_KEY: json.dumps(meta).encode()}), path)
    return path


@pytest.mark.parametrize("case", [
    "version", "tier", "too_small", "cache_too_big", "negative_bandwidth", "hint", "param", "value",
    "scale_and_afap", "missing", "not_parquet",
    "config_and_trace", "window", "scale_param_and_afap", "afap_param_and_scale",
])
def test_bad_input_is_one_line_exit_2_and_no_output(trace, tmp_path, case):
    out = tmp_path / "out"
    args = {
        "version": ([_other_version(tmp_path / "v99.parquet")], ["format version 99", "reads version 1 or 2"]),
        "tier": ([trace, "--tier", "cxl"], ["tier 'cxl' is absent from the trace", "ssd ("]),
        "too_small": ([trace, "--param", "logical_bytes=64MiB"], ["too small"]),
        "cache_too_big": ([trace, "--device", "cxl-ssd", "--param", "cache_bytes=1TiB"],
                          ["cache_bytes (1TiB) is larger than the device (logical_bytes"]),
        "negative_bandwidth": ([trace, "--device", "dram", "--param", "link_bytes_per_s=-1"],
                               ["link_bytes_per_s must be >= 0"]),
        "hint": ([trace, "--hints", "magic"], ["unknown hint policy 'magic'", "oracle"]),
        "param": ([trace, "--param", "bogus=1"], ["unknown parameter 'bogus'"]),
        "value": ([trace, "--param", "op_ratio=lots"], ["op_ratio", "expected a number"]),
        "scale_and_afap": ([trace, "--time-scale", "2", "--as-fast-as-possible"], ["exclude each other"]),
        "scale_param_and_afap": ([trace, "--param", "time_scale=2", "--as-fast-as-possible"], ["exclude each other"]),
        "afap_param_and_scale": ([trace, "--param", "as_fast_as_possible=true", "--time-scale", "2"],
                                 ["exclude each other"]),
        "missing": ([tmp_path / "nope.parquet"], ["no such file"]),
        "not_parquet": ([tmp_path / "x.parquet"], ["not a readable Parquet file"]),
        "config_and_trace": ([trace, "--config", tmp_path / "c.json"], ["--config reruns"]),
        # 1 ns windows over a 3 s trace would be 3e9 time-series rows: refused, not a hang
        "window": ([trace, "--param", "window_ns=1"], ["window_ns=1", "windows", "at most"]),
    }[case]
    (tmp_path / "x.parquet").write_text("not parquet")
    res = kvbed("replay", *args[0], "-o", out, "-q")
    one_line_error(res, *args[1])
    assert not out.exists()


def test_an_output_path_blocked_by_a_file_is_refused_before_the_run(trace, tmp_path):
    (tmp_path / "f").write_text("a file where a directory would go")
    res = kvbed("replay", trace, "-o", tmp_path / "f" / "out", "-q")
    one_line_error(res, "is not a directory")
    assert (tmp_path / "f").read_text() == "a file where a directory would go"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.parametrize("field,value", [("hints", 5), ("device", ["fdp"]), ("trace", None)])
def test_malformed_config_is_one_line_exit_2(trace, tmp_path, field, value):
    replay_cli(trace, tmp_path / "r", "--hints", "oracle")
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())
    cfg[field] = value
    (tmp_path / "bad.json").write_text(json.dumps(cfg))
    res = kvbed("replay", "--config", tmp_path / "bad.json", "-o", tmp_path / "out", "-q")
    one_line_error(res, "bad.json", "malformed config")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------- Mooncake e2e

MOONCAKE = (ROOT / "../shared/data/traces/mooncake/conversation_trace.jsonl").resolve()


@pytest.mark.slow
@pytest.mark.skipif(not MOONCAKE.exists(), reason="Mooncake trace not available")
def test_mooncake_end_to_end(tmp_path):
    """Mooncake conversation trace, tier-simulated with Llama-3-8B (32 MiB objects) and a 1 TiB S3-FIFO SSD
    tier (one-hit chunks die young, reused ones live long); the device holds exactly the peak live data
    (fill 1.0, 7% OP), so GC must copy. Oracle < noisy-oracle (5% misclassified) < none, byte-identical reruns."""
    lc = tmp_path / "mc.parquet"
    ok(kvbed("trace", "import", "mooncake", MOONCAKE, "-o", lc, "--model", "llama-3-8b", "--ssd-bytes", "1TiB",
             "--ssd-policy", "s3fifo"))
    common = ("--device", "fdp", "--fill-ratio", "1.0", "--seed", "3")
    waf = {}
    for h, extra in (("none", ()), ("oracle", ()), ("noisy-oracle", ("--param", "error_rate=0.05"))):
        replay_cli(lc, tmp_path / h, "--hints", h, *common, *extra)
        job = result(tmp_path / h)["jobs"][0]
        waf[h] = job["waf"]
        assert job["events"]["rows_replayed"] == result(tmp_path / h)["scan"]["rows"]
    none = result(tmp_path / "none")["jobs"][0]
    assert none["gc"]["pages_moved"] > 0 and none["gc_count"] > 0  # GC ran and copied
    assert waf["oracle"] < waf["noisy-oracle"] < waf["none"], waf
    replay_cli(lc, tmp_path / "oracle2", "--hints", "oracle", *common)
    for name in RUN_FILES:
        assert (tmp_path / "oracle" / name).read_bytes() == (tmp_path / "oracle2" / name).read_bytes(), name
