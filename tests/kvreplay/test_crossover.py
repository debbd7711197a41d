"""``kvbed crossover``: the closed form for a zero-latency tier, hand calculations with latency and
queueing (remote and the cxl device), the device loaders, the search, the outputs and the errors."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from tests.support.cli import kvbed, ok, one_line_error
from kvreplay.costmodel import CostParams
from kvbed.core.errors import KvbedError
from kvbed.core.params import with_overrides
from kvreplay.crossover import (TIERS, CrossoverParams, DeviceLoader, TierSpec, find_crossover, route_overrides,
                               run_crossover, size_grid)

BPT = 131072  # llama-3-8b, bf16
TPS = 15_056.0  # llama-3-8b@a100


def sweep(tiers="remote", models="llama-3-8b", accelerators="a100", qd="1", lo=1, hi=4096, pairs=()):
    p = CrossoverParams(tiers=tiers, models=models, accelerators=accelerators, queue_depths=qd, min_tokens=lo,
                        max_tokens=hi)
    cross, cost, dev = route_overrides(list(pairs))
    return run_crossover(with_overrides(p, cross), cost, dev)


def rows_of(res, **match):
    return [r for r in res["crossover"] if all(r[k] == v for k, v in match.items())]


@pytest.mark.parametrize("model, acc", [("llama-3-8b", "a100"), ("llama-3-70b", "h100"), ("qwen2.5-7b", "a100")])
@pytest.mark.parametrize("qd", [1, 8])
def test_zero_latency_tier_always_loads_iff_its_bandwidth_exceeds_bytes_per_token_times_tokens_per_s(model, acc, qd):
    breakeven = CostParams(model=model, accelerator=acc).breakeven_bytes_per_s()
    for factor, verdict in ((1.01, "always load"), (0.99, "always recompute"), (10.0, "always load"),
                            (0.1, "always recompute")):
        res = sweep(models=model, accelerators=acc, qd=str(qd), lo=1, hi=100_000,
                    pairs=["remote_rtt_ns=0", f"remote_bytes_per_s={breakeven * factor!r}"])
        (row,) = res["crossover"]
        assert row["verdict"] == verdict and row["crossover_tokens"] is None, (factor, row)
        assert row["breakeven_bytes_per_s"] == breakeven


def test_remote_with_latency_by_hand():
    # per token: recompute 1e9/15056 = 66418.70 ns, transfer 131072/3.125e9 s = 41943.04 ns; rtt 50 us
    # n* = ceil(50000 / (66418.70 - 41943.04)) = ceil(2.043) = 3 at qd 1; at qd 4: ceil(0.51) = 1
    res = sweep(qd="1,4", pairs=["remote_rtt_ns=50us", "remote_bytes_per_s=3.125e9", "points_per_decade=1"])
    (q1,) = rows_of(res, qd=1)
    assert q1["crossover_tokens"] == 3 and q1["verdict"] == "crossover" and q1["crossover_bytes"] == 3 * BPT
    # the integer check either side: n=2 loads in 50000+83887 ns > recompute 132838; n=3: 175830 <= 199257
    assert (q1["load_ns_at_min"], q1["recompute_ns_at_min"]) == (50_000 + 41_944, 66_419)
    (q4,) = rows_of(res, qd=4)
    assert q4["verdict"] == "always load"
    # n*=3 lies between grid points 1 and 8 (one point per decade, 1..4096 in 5 steps): found by bisection
    assert res["config"]["grid_tokens"] == [1, 8, 64, 512, 4096]


def test_cxl_device_with_latency_and_queueing_by_hand():
    # cxl: q reads of p pages share one link: done = q * p * xfer + load_ns. With 4.096e9 B/s a 4 KiB page
    # takes 1000 ns, a llama-3-8b token (32 pages) 32000 ns; load_ns = 1 ms, qd 4:
    # load(n) = 128000 n + 1e6, recompute(n) = ceil(4 n 1e9 / 15056) = ceil(265674.8 n)
    # n* = ceil(1e6 / (4 * (66418.70 - 32000))) = ceil(7.26) = 8 (n=7: 1896000 > 1859724; n=8: 2024000 <= 2125399)
    res = sweep(tiers="cxl", qd="4", lo=1, hi=1000,
                pairs=["bandwidth_bytes_per_s=4096000000", "load_ns=1ms"])
    (row,) = res["crossover"]
    assert row["crossover_tokens"] == 8
    assert row["load_ns_at_min"] == 128_000 + 1_000_000 and row["load_ns_at_max"] == 128_000_000 + 1_000_000
    assert row["recompute_ns_at_max"] == math.ceil(4000 * 1e9 / TPS)
    curve = {c["tokens"]: c for c in res["curves"]}
    assert all(c["load_ns"] == 128_000 * n + 1_000_000 for n, c in curve.items())
    assert row["load_bytes_per_s_at_max"] == pytest.approx(4 * 1000 * BPT * 1e9 / 129_000_000)


def test_find_crossover_is_the_brute_force_answer():
    grid = size_grid(1, 5000, 5)
    brute = lambda load, rec: next((n for n in range(1, 5001)  # noqa: E731
                                    if all(load(m) <= rec(m) for m in range(n, 5001))), None)
    for lat in (0, 10, 999, 123_456):
        load = lambda n, lat=lat: lat + 7 * n  # noqa: E731
        rec = lambda n: 11 * n  # noqa: E731
        n_star, verdict = find_crossover(grid, load, rec)
        want = brute(load, rec)
        if want == 1:
            assert (n_star, verdict) == (None, "always load")
        elif want is None:
            assert (n_star, verdict) == (None, "always recompute") and lat == 123_456
        else:
            assert (n_star, verdict) == (want, "crossover") and want == math.ceil(lat / 4)
    assert find_crossover(grid, lambda n: 12 * n, lambda n: 11 * n) == (None, "always recompute")


def test_size_grid_is_log_spaced_integers_with_both_ends():
    g = size_grid(1, 8192, 8)
    assert g[0] == 1 and g[-1] == 8192 and np.all(np.diff(g) > 0)
    assert 28 <= len(g) <= 33  # 3.9 decades x 8, minus duplicates among the smallest integers
    assert size_grid(7, 7, 8).tolist() == [7]


def test_cxl_ssd_hit_is_link_time_and_a_miss_pays_a_nand_read_and_the_ssd_pages_hold_data():
    hit = DeviceLoader(TIERS["cxl-ssd-hit"], [], 64 * 4096, 2)
    miss = DeviceLoader(TIERS["cxl-ssd-miss"], [], 64 * 4096, 2)
    ssd = DeviceLoader(TIERS["ssd"], [], 64 * 4096, 2)
    # one 32-page object: 32 x ceil(4096 B / 32e9 B/s) = 32 x 128 ns on the link + load_ns 250
    assert hit.load_ns(32 * 4096, 1) == 32 * 128 + 250
    assert hit.load_ns(32 * 4096, 2) == 64 * 128 + 250
    for _ in range(2):  # the miss stays a miss when measured again (the cache is flushed first)
        assert miss.load_ns(32 * 4096, 1) >= 40_000 + 250
    assert ssd.load_ns(4096, 1) >= 40_000  # a NAND page read: the pages were written (a fresh device reads in 0)


def test_device_capacity_is_raised_to_fit_the_sweep_unless_given():
    big = 8 * 1024 * BPT  # 8 objects of 8192 tokens = 8 GiB > the cxl default of 512 MiB
    loader = DeviceLoader(TIERS["cxl"], [], big // 8, 8)
    assert loader.config["cxl"]["cxl_bytes"] >= big
    with pytest.raises(KvbedError, match="tier cxl: .* raise cxl_bytes or lower max_tokens"):
        DeviceLoader(TIERS["cxl"], ["cxl_bytes=512MiB"], big // 8, 8)


def test_a_tier_whose_device_is_missing_is_skipped_with_a_note_or_refused_when_asked_for(monkeypatch):
    monkeypatch.setitem(TIERS, "nvram", TierSpec("nvram", "no-such-device", False, "none", None, None, "test"))
    res = run_crossover(CrossoverParams(tiers="all", models="llama-3-8b", accelerators="a100", max_tokens=16))
    assert "nvram" in [s["tier"] for s in res["skipped"]] and "nvram" not in res["tiers"]
    assert {r["tier"] for r in res["crossover"]} == set(res["tiers"]) and "remote" in res["tiers"]
    with pytest.raises(KvbedError, match="tier nvram: device model 'no-such-device' is not in this build"):
        run_crossover(CrossoverParams(tiers="nvram,remote", models="llama-3-8b", accelerators="a100"))


def test_compressed_kind_loads_fewer_bytes_and_pays_decompression():
    # remote, zero rtt, 1 token of llama-3-8b at 30%: ceil(39321.6 B) -> 39322 B / 1e9 B/s = 39322 ns,
    # plus decompress of 131072 exact bytes at 100e9 B/s = 1311 ns
    res = sweep(lo=1, hi=1, pairs=["kind=compressed", "remote_rtt_ns=0", "remote_bytes_per_s=1e9"])
    assert res["crossover"][0]["load_ns_at_min"] == 39_322 + 1_311


def test_cli_writes_table_csv_json_and_plot(tmp_path):
    out = tmp_path / "xo"
    res = ok(kvbed("crossover", "--tiers", "cxl,remote", "--models", "llama-3-8b,qwen2.5-7b", "--queue-depths",
                   "1,4", "--max-tokens", "256", "-o", out))
    assert "always load" in res.output and "remote" in res.output and "1.97 GB/s" in res.output
    for name in ("crossover.csv", "curves.csv", "crossover.json", "crossover.png"):
        assert (out / name).stat().st_size > 100, name
    rows = list(csv.DictReader(open(out / "crossover.csv")))
    assert len(rows) == 2 * 2 * 2 * 2  # tiers x models x accelerators x qd
    r = next(r for r in rows if (r["tier"], r["model"], r["accelerator"], r["qd"]) == ("remote", "llama-3-8b",
                                                                                           "a100", "1"))
    assert r["crossover_tokens"] == "3" and r["verdict"] == "crossover"
    doc = json.loads((out / "crossover.json").read_text())
    assert doc["kvbed_version"] and doc["config"]["crossover"]["max_tokens"] == 256 and "curves" not in doc
    curves = list(csv.DictReader(open(out / "curves.csv")))
    assert len(curves) == len(rows) * len(doc["config"]["grid_tokens"])
    js = json.loads(ok(kvbed("crossover", "--tiers", "remote", "--models", "mistral-7b", "--accelerators", "h100",
                             "--json")).output)
    assert [r["verdict"] for r in js["crossover"]] == ["always recompute", "always recompute"]  # 3.1 < 4.6 GB/s
    assert js["incomplete"] is False and set(doc) == set(js)  # --json says what crossover.json says
    assert "break-even bandwidth" in res.output and "the tier bandwidth above which" in " ".join(res.output.split())


@pytest.mark.parametrize("args, fragments", [
    (["--tiers", "tape"], ["tiers: unknown tier 'tape'"]),
    (["--models", "gpt-9"], ["models: unknown model 'gpt-9'"]),
    (["--accelerators", "tpu"], ["accelerators: unknown accelerator 'tpu'"]),
    (["--param", "remote_bytes_per_s=-1"], ["remote_bytes_per_s must be positive"]),
    (["--tiers", "cxl", "--param", "bandwidth_bytes_per_s=-5"], ["bandwidth_bytes_per_s must be positive"]),
    (["--param", "remote_rtt_ns=-1"], ["remote_rtt_ns must be >= 0"]),
    (["--queue-depths", "0"], ["queue_depths: expected whole numbers >= 1"]),
    (["--min-tokens", "10", "--max-tokens", "5"], ["min_tokens/max_tokens"]),
    (["--kind", "zipped"], ["kind: expected one of"]),
    (["--models", "llama-3.1-405b"], ["no prefill profile for llama-3.1-405b@a100"]),
    (["--param", "prefill_tokens_per_s=-3"], ["prefill_tokens_per_s must be >= 0"]),
    (["--tiers", "remote", "--param", "warp_factor=9"], ["unknown parameter 'warp_factor'"]),
    (["--param", "model=llama-3-70b"], ["model is swept; give --models"]),
    (["--tiers", "remote", "--param", "tiers=cxl"], ["tiers is given twice"]),
])
def test_bad_parameters_are_one_line_errors_with_exit_2(args, fragments):
    one_line_error(kvbed("crossover", "--max-tokens", "8", *args), *fragments)


# ------------------------------------------------------------------------------------ the figure (testbed)


def test_the_figure_has_a_panel_per_tier_distinct_models_and_each_crossover_labelled(tmp_path):
    from matplotlib.text import Annotation

    from kvreplay.crossover import write_outputs
    from testbed.crossover_plot import crossover_figure

    res = sweep(tiers="ssd,remote", models="llama-3-8b,mistral-7b,qwen2.5-7b", accelerators="a100,h100", qd="1,8",
                hi=64)
    write_outputs(res, tmp_path)
    fig = crossover_figure(tmp_path)
    assert [ax.get_title().split(" ")[0] for ax in fig.axes] == ["ssd", "remote"]  # one panel per tier
    # llama-3-8b and mistral-7b have the same geometry and prefill profile: one model, named once with both
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "llama-3-8b = mistral-7b" in legend and "qwen2.5-7b" in legend and "mistral-7b" not in legend
    for ax, tier in zip(fig.axes, ("ssd", "remote")):
        same = {"mistral-7b": "llama-3-8b"}
        expect = {(same.get(r["model"], r["model"]), r["accelerator"], r["qd"], r["crossover_tokens"])
                  for r in res["crossover"] if r["tier"] == tier and r["crossover_tokens"] is not None}
        notes = [t.get_text() for t in ax.texts if isinstance(t, Annotation)]
        assert len(notes) == len(expect) > 0, (tier, notes, expect)
        for m, a, q, n in expect:
            assert any(t.startswith(f"{n} tok (") and f", {a}, qd {q}" in t and m in t for t in notes), (m, a, q, n)
        colours = {str(line.get_color()) for line in ax.get_lines() if line.get_linestyle() == "-"}
        assert len(colours) == 2  # load lines: two distinct models
    # remote, llama-3-8b on a100 at qd 1: the hand-checked 3 tokens (384 KiB) of test_cli_writes_table...
    assert "3 tok (384 KiB): llama-3-8b = mistral-7b, a100, qd 1" in [t.get_text() for t in fig.axes[1].texts]


def test_the_trace_side_draws_nothing():
    """Plots are the testbed's (testbed.crossover_plot): kvreplay never imports matplotlib."""
    import ast

    from tests.support.paths import ROOT

    for path in (ROOT / "kvreplay").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] == "matplotlib" for n in names), path
