"""Results do not move when code is reorganised: the runs of ``golden_runs.RUNS`` give the figures and digests
recorded in golden/digests.json. The headline figures are compared first, so a failure names what moved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import golden_runs as G
from tests.support.cli import kvbed, ok

GOLDEN = json.loads((Path(__file__).parent / "digests.json").read_text())


def moved(want: dict, got: dict) -> list[str]:
    """The figures that differ, one readable line each (exact: a golden figure never moves by noise)."""
    return [f"{k}: {want.get(k)!r} -> {got.get(k)!r}" for k in sorted(set(want) | set(got)) if want.get(k) != got.get(k)]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("golden").resolve()


@pytest.mark.parametrize("name", list(G.RUNS))
def test_golden_run(work, name):
    if name in G.NEEDS_MOONCAKE and not G.MOONCAKE.exists():
        pytest.skip(f"{G.MOONCAKE} not present")
    ok(kvbed(*G.argv(name, work)))
    assert moved(GOLDEN[name]["figures"], G.figures(name, work)) == [], f"{name}: headline figures moved"
    assert G.digest(name, work) == GOLDEN[name]["digests"]


def test_every_run_records_figures_worth_reading():
    for name, rec in GOLDEN.items():
        figs, cmd = rec["figures"], G.RUNS[name][0]
        if cmd == "trace":
            assert figs["events"] > 100_000, name
            assert sum(v for k, v in figs.items() if k.startswith("events.")) == figs["events"], name
            assert 0 < figs["ssd.ref_hit_ratio"] < figs["ssd.lookup_hit_ratio"] < 1, name
        elif cmd == "replay":
            assert figs["end_to_end_waf"] >= figs["waf"] >= 1.0, name
            assert figs["object_read.p99_ns"] > 0 and figs["object_write.p99_ns"] > 0, name
        else:  # device run: a GC-heavy workload
            assert figs["waf"] > 1.0 and figs["gc.bytes_moved"] > 0, name


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    work = tmp_path_factory.mktemp("golden-demo").resolve()
    ok(kvbed(*G.argv("sample", work)))
    ok(kvbed(*G.argv("demo-none", work)))
    return work


def test_a_moved_figure_is_named(demo):
    """The failure of a golden run says which figure moved, old -> new, before any digest."""
    got = G.figures("demo-none", demo)
    assert moved(GOLDEN["demo-none"]["figures"], got) == []
    res = demo / "demo-none" / "result.json"
    saved = res.read_text()
    doc = json.loads(saved)
    doc["jobs"][0]["waf"] += 0.01
    res.write_text(json.dumps(doc))
    try:
        lines = moved(GOLDEN["demo-none"]["figures"], G.figures("demo-none", demo))
    finally:
        res.write_text(saved)
    assert lines == [f"waf: {got['waf']!r} -> {got['waf'] + 0.01!r}"]


def test_the_version_is_masked(demo):
    """A bare checkout (version 0.1.0+src) and an installed one give the same digests."""
    masked, unmasked = G.digest("demo-none", demo), G.digest("demo-none", demo, version=False)
    assert masked == GOLDEN["demo-none"]["digests"]
    for f in ("config.json", "result.json"):
        p = demo / "demo-none" / f
        text = p.read_text()
        assert text.count('"0.1.0"') == 1, f
        p.write_text(text.replace('"0.1.0"', '"0.1.0+src"'))
    assert G.digest("demo-none", demo) == masked
    assert G.digest("demo-none", demo, version=False) != unmasked  # the unmasked digest sees the change
