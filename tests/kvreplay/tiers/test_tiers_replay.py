"""Multi-tier replay (kvbed replay --tiers) and its request-level model (KV-ready, TTFT, on-hit plans)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.cli import kvbed, ok, one_line_error
from kvreplay import schema as S
from kvreplay.costmodel import CostParams
from kvreplay.replay.ttft import SOURCES, _plans, fcfs_starts

from tests.support.paths import MOONCAKE
PCT = ("50.000000", "99.000000")


def _src(name: str) -> int:
    return SOURCES.index(name)


def test_fcfs_starts_by_hand():
    # two instances; arrivals 0, 0, 1, 10; services 5, 3, 4, 1
    start = fcfs_starts(np.array([0, 0, 1, 10]), np.array([5, 3, 4, 1]), 2)
    # r0 on A at 0 (free 5), r1 on B at 0 (free 3), r2 waits for B: 3 (free 7), r3 at 10
    assert start.tolist() == [0, 0, 3, 10]
    assert fcfs_starts(np.array([0, 0, 0]), np.array([2, 2, 2]), 1).tolist() == [0, 2, 4]


def test_plans_by_hand():
    cost = CostParams(prefill_tokens_per_s=1e6, decode_step_ns=1000)  # 1 us per token
    # request 0: a GPU hit (100 tokens, free), a cpu load ready at 50 us, an ssd load ready at 300 us, a
    # computed chunk of 100 tokens; request 1: one computed chunk of 50 tokens
    ev = {"request": np.array([0, 0, 0, 0, 1]),
          "source": np.array([_src("gpu"), _src("cpu"), _src("ssd"), _src("recompute"), _src("recompute")]),
          "tokens": np.array([100, 100, 100, 100, 50])}
    ready = np.array([-1, 50_000, 300_000, -1, -1])
    p = _plans(ev, ready, 2, np.array([0, 0, 0, 0, 1]), cost)
    # load: both loads (ready 300 us) + 100 computed tokens; recompute: 300 tokens
    assert p["load"]["kv_ready"].tolist() == [400_000, 50_000]
    assert p["recompute"]["kv_ready"].tolist() == [300_000, 50_000]
    # best: load the cpu chunk only (50 us) and recompute 200 tokens = 250 us
    assert p["best"]["kv_ready"].tolist() == [250_000, 50_000]
    assert p["best"]["loaded_tokens"].tolist() == [100, 0]
    assert p["load"]["loaded_tokens"].tolist() == [200, 0]


def test_plans_best_is_never_worse_random():
    rng = np.random.default_rng(7)
    cost = CostParams(prefill_tokens_per_s=15_000.0, decode_step_ns=20_000_000)
    n, nreq = 4000, 300
    ridx = np.sort(rng.integers(0, nreq, n))
    src = rng.choice([_src("gpu"), _src("cpu"), _src("cxl"), _src("ssd"), _src("recompute")], n)
    loaded = np.isin(src, [_src("cpu"), _src("cxl"), _src("ssd")])
    ready = np.where(loaded, rng.integers(0, 200_000_000, n), -1)
    ev = {"request": ridx, "source": src, "tokens": rng.integers(1, 257, n)}
    p = _plans(ev, ready, nreq, ridx, cost)
    assert np.all(p["best"]["kv_ready"] <= p["load"]["kv_ready"])
    assert np.all(p["best"]["kv_ready"] <= p["recompute"]["kv_ready"])
    # brute force on small requests: the threshold plan is the optimum over every subset of loads
    for r in range(nreq):
        idx = np.flatnonzero((ridx == r) & loaded)
        if not 0 < len(idx) <= 8:
            continue
        must = int(ev["tokens"][(ridx == r) & (src == _src("recompute"))].sum())
        best = None
        for mask in range(1 << len(idx)):
            take = [idx[k] for k in range(len(idx)) if mask >> k & 1]
            rest = int(ev["tokens"][idx].sum() - ev["tokens"][take].sum())
            c = (max(ready[take]) if take else 0) + cost.recompute_ns(must + rest)
            best = c if best is None else min(best, c)
        assert p["best"]["kv_ready"][r] == best


@pytest.fixture(scope="module")
def mc3(tmp_path_factory):
    """The Mooncake conversation trace through a tier simulator with a CXL tier."""
    if not MOONCAKE.exists():
        pytest.skip(f"{MOONCAKE} not present")
    d = tmp_path_factory.mktemp("mc3")
    ok(kvbed("trace", "import", "mooncake", str(MOONCAKE), "-o", str(d / "mc3.parquet"), "--cpu-bytes", "256GiB",
             "--cxl-bytes", "512GiB", "--ssd-bytes", "4TiB"))
    return d


@pytest.fixture(scope="module")
def mc3_run(mc3):
    ok(kvbed("replay", str(mc3 / "mc3.parquet"), "--tiers", "cpu,cxl,ssd", "--tier-device", "cxl=cxl-ssd",
             "--on-hit", "best", "-q", "-o", str(mc3 / "run")))
    return mc3 / "run"


def test_mooncake_three_tiers(mc3, mc3_run):
    res = json.loads((mc3_run / "result.json").read_text())
    meta = S.TraceReader(mc3 / "mc3.parquet").meta
    assert [j["tier"] for j in res["jobs"]] == ["cpu", "cxl", "ssd"]
    assert [j["device"] for j in res["jobs"]] == ["dram", "cxl-ssd", "fdp"]
    req = res["requests"]
    # the replay's per-tier hits and lookups are the tier simulator's (no copy was lost on a device)
    for t in ("gpu", "cpu", "cxl", "ssd"):
        assert req["tiers"][t]["lookups"] == meta.tier_stats[t]["lookups"], t
        assert req["tiers"][t]["hits"] == meta.tier_stats[t]["hits"], t
        for k in ("chunk_references", "ref_hit_ratio", "lookup_hit_ratio"):
            assert req["tiers"][t][k] == pytest.approx(meta.tier_stats[t][k]), (t, k)
        # named for their denominators: every chunk of every request, the lookups that reached the tier
        assert req["tiers"][t]["chunk_references"] == sum(v["chunks"] for v in req["chunks_by_source"].values())
        assert 0 < req["tiers"][t]["ref_hit_ratio"] < req["tiers"][t]["lookup_hit_ratio"] < 1, t
        assert not {"hit_ratio", "chunk_share"} & set(req["tiers"][t]), t
    assert req["chunks_by_source"]["unserved"]["chunks"] == 0
    for t in ("cpu", "cxl", "ssd"):
        r = req["tiers"][t]["ready_ns"]
        assert r["percentile"][PCT[0]] > 0 and r["percentile"][PCT[1]] >= r["percentile"][PCT[0]]
    # every request is counted once, and its TTFT is at least its first decode step
    assert req["requests"] == meta.source_facts["requests"]
    for mode in ("load", "recompute", "best"):
        assert req["modes"][mode]["ttft_ns"]["min"] >= req["decode_step_ns"]
    best, load, rec = (req["modes"][m]["ttft_ns"] for m in ("best", "load", "recompute"))
    for other in (load, rec):
        assert best["mean"] <= other["mean"]
        assert best["percentile"][PCT[1]] <= other["percentile"][PCT[1]]
    assert req["ttft_ns"] == best  # --on-hit best is the headline
    # recompute loads nothing; load loads every chunk a tier held
    assert req["modes"]["recompute"]["loaded_tokens"] == 0
    loaded = sum(req["chunks_by_source"][t]["tokens"] for t in ("cpu", "cxl", "ssd"))
    assert req["modes"]["load"]["loaded_tokens"] == loaded
    lat = __import__("pyarrow.parquet", fromlist=["x"]).read_table(mc3_run / "latency.parquet")
    series = set(lat.column("series").to_pylist())
    assert {"ttft.best", "ttft.load", "ttft.recompute", "cpu.object_read", "ssd.object_write"} <= series
    assert (mc3_run / "ttft_cdf.png").stat().st_size > 0


def test_multitier_rerun_from_config_is_identical(mc3, mc3_run, tmp_path):
    ok(kvbed("replay", "--config", str(mc3_run / "config.json"), "-q", "--no-plots", "-o", str(tmp_path / "again")))
    a = json.loads((mc3_run / "result.json").read_text())
    b = json.loads((tmp_path / "again" / "result.json").read_text())
    assert a == b


def test_tier_job_writes_match_single_tier_replay(mc3, mc3_run, tmp_path):
    """The ssd tier's device sees the same writes as a single-tier replay of that tier: same WAF and bytes."""
    ok(kvbed("replay", str(mc3 / "mc3.parquet"), "--device", "fdp", "-q", "--no-plots", "-o", str(tmp_path / "ssd")))
    single = json.loads((tmp_path / "ssd" / "result.json").read_text())["jobs"][0]
    multi = json.loads((mc3_run / "result.json").read_text())["jobs"][2]
    for k in ("user_bytes_written", "host_bytes_written", "media_bytes_written", "waf", "erases"):
        assert multi[k] == single[k], k
    assert multi["object_read"]["total_ios"] == single["object_read"]["total_ios"]


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth")
    ok(kvbed("trace", "synth", "-o", str(d / "s.parquet"), "--duration-s", "300"))
    return d / "s.parquet"


def test_the_summary_gives_hit_ratios_as_percentages_like_trace_stats(synth, tmp_path):
    res = ok(kvbed("replay", str(synth), "--tiers", "cpu,ssd", "--no-plots", "-o", str(tmp_path / "r")))
    tiers = json.loads((tmp_path / "r" / "result.json").read_text())["requests"]["tiers"]
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("│ ssd "))
    for key in ("ref_hit_ratio", "lookup_hit_ratio"):
        assert f"{100 * tiers['ssd'][key]:.1f}%" in row


def test_per_tier_hints_and_params(synth, tmp_path):
    ok(kvbed("replay", str(synth), "--tiers", "cpu,ssd", "--hints", "ssd=oracle", "--param", "ssd:op_ratio=20%",
             "--param", "on_hit=recompute", "-q", "--no-plots", "-o", str(tmp_path / "r")))
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())
    res = json.loads((tmp_path / "r" / "result.json").read_text())
    assert cfg["tiers"]["ssd"]["hints"] == "oracle" and cfg["tiers"]["cpu"]["hints"] == "none"
    assert cfg["tiers"]["ssd"]["device_params"]["flash"]["op_ratio"] == pytest.approx(0.2)
    assert cfg["requests"]["on_hit"] == "recompute"
    assert res["requests"]["ttft_ns"] == res["requests"]["modes"]["recompute"]["ttft_ns"]
    # the synthetic trace has no CXL tier: asking for it is a one-line error
    one_line_error(kvbed("replay", str(synth), "--tiers", "cxl,ssd", "-q", "-o", str(tmp_path / "x")),
                   "tier 'cxl' is absent from the trace")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("args, msg", [
    (["--tiers", "gpu,ssd"], "not a tier a device can hold"),
    (["--tiers", "cpu,ssd", "--tier-device", "ssd=floppy"], "floppy"),
    (["--tiers", "cpu,ssd", "--tier-device", "cxl=cxl"], "not replayed in this run"),
    (["--tiers", "cpu,ssd", "--param", "model=gpt-9"], "gpt-9"),
    (["--tiers", "cpu,ssd", "--param", "cpu:link_bytes_per_s=-1"], "link_bytes_per_s must be >= 0"),
    (["--tiers", "cpu,ssd", "--param", "cpu:bandwidth_bytes_per_s=1e9"], "unknown parameter 'bandwidth_bytes_per_s'"),
    (["--tiers", "cpu,ssd", "--tier-device", "cpu=cxl-ssd", "--param", "cpu:cache_bytes=100TiB"],
     "is larger than the device"),
    (["--tiers", "cpu,ssd", "--param", "prefill_tokens_per_s=-5"], "prefill_tokens_per_s"),
    (["--tiers", "ssd"], "leaves out"),
    (["--tiers", "cpu,ssd", "--device", "fdp"], "--tier-device"),
    (["--on-hit", "best"], "--on-hit needs --tiers"),
])
def test_multitier_bad_input(synth, tmp_path, args, msg):
    one_line_error(kvbed("replay", str(synth), *args, "-q", "-o", str(tmp_path / "bad")), msg)
    assert not (tmp_path / "bad").exists()
