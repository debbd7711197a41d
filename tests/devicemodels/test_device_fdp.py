"""FDP: placement ids select RUHs, RU rollover, RUH update, II vs PI GC destinations, log pages."""

import numpy as np
import pytest

from devicemodels.base import OP_RUH_UPDATE, OP_WRITE
from devicemodels import ftl_state
from devicemodels.ftl_state import LINE_FREE, LINE_OPEN
from kvbed.core.errors import KvbedError

from tests.support.devices import make, ops, writes

# 4096 pages; RU = 4 blocks of 16 pages = 64 pages (256 KiB)
FDP = ["ru_bytes=256KiB", "nruh=4", "op_ratio=0.5", "timing=false"]


def owners_of(d, lbas):
    ppa = d.st.l2p[np.asarray(lbas)]
    return set(d.st.owner[ppa // d.geo.ppl].tolist())


def test_placement_id_selects_the_reclaim_unit_handle():
    d = make("fdp", *FDP)
    for pid in range(4):
        d.submit(writes(range(pid * 100, pid * 100 + 100), pid=pid))
    for pid in range(4):
        assert owners_of(d, range(pid * 100, pid * 100 + 100)) == {pid}
    per = d.stats()["fdp"]["per_ruh"]
    assert [p["host_bytes_written"] for p in per[:4]] == [100 * 4096] * 4
    # a full RU opens a new one: 100 pages per RUH need 2 RUs of 64 each
    assert d.counters()["lines_opened"] == 8
    assert [p["reclaim_units_held"] for p in per[:4]] == [2, 2, 2, 2]
    usage = d.stats()["fdp"]["ruh_usage_log"]
    assert usage == {"nruh": 4, "ruhus": [{"ruha": 1}] * 4}


def test_ruh_update_closes_the_ru_early_and_ruamw_tracks_room():
    d = make("fdp", *FDP)
    d.submit(writes(range(10), pid=2))
    status = {s["pid"]: s for s in d.stats()["fdp"]["ruh_status"]["ruhss"]}
    assert status[2]["ruamw"] == 64 - 10 and status[0]["ruamw"] == 64
    d.submit(ops((OP_RUH_UPDATE, 0, 1, 2)))
    c = d.counters()
    assert c["ruh_updates"] == 1 and c["ru_not_fully_written"] == 1
    d.submit(writes([20], pid=2))
    assert c["lines_opened"] + 1 == d.counters()["lines_opened"]  # the next write opened a fresh RU
    status = {s["pid"]: s for s in d.stats()["fdp"]["ruh_status"]["ruhss"]}
    assert status[2]["ruamw"] == 63
    d.check_invariants()


def _churn(d, rounds=6):
    """Hot data on RUH 0 (overwritten), cold data on RUH 1 (written once): GC must move cold pages."""
    rng = np.random.default_rng(0)
    n = d.logical_pages
    d.submit(writes(range(n // 2, n), pid=1))
    for _ in range(rounds):
        d.submit(writes(rng.integers(0, n // 2, n), pid=0))
    d.check_invariants()


def test_initially_isolated_gc_mixes_into_a_shared_ru():
    d = make("fdp", *FDP, "ruh_type=initially")
    _churn(d)
    assert d.counters()["gc_pages_moved"] > 0
    st = d.st
    used = st.lstate != LINE_FREE
    assert (st.owner[used] == 4).any()  # the shared GC destination (owner = nruh)
    per = d.stats()["fdp"]["per_ruh"]
    assert per[-1]["ruh"] == "gc-shared" and per[-1]["gc_bytes_written"] > 0
    assert all(p["gc_bytes_written"] == 0 for p in per[:4])


def test_persistently_isolated_gc_stays_in_its_ruh():
    d = make("fdp", *FDP, "ruh_type=persistently")
    _churn(d)
    st = d.st
    assert not (st.owner == 4).any()
    per = d.stats()["fdp"]["per_ruh"]
    assert sum(p["gc_bytes_written"] for p in per) == d.counters()["gc_pages_moved"] * 4096
    # every valid page of a cold LBA is still in an RU of RUH 1
    n = d.logical_pages
    assert owners_of(d, range(n // 2, n)) == {1}


def test_fdp_statistics_log_page():
    d = make("fdp", *FDP)
    _churn(d, rounds=3)
    c = d.counters()
    log = d.stats()["fdp"]["stats_log"]
    assert log["hbmw"] == c["host_pages_written"] * 4096
    assert log["mbmw"] == c["media_pages_written"] * 4096
    assert log["mbe"] == c["block_erases"] * 16 * 4096
    assert log["mbmw"] > log["hbmw"]


def test_reclaim_groups_split_dies_and_placement_ids():
    d = make("fdp", *FDP, "nrg=2")
    assert d.n_placement_ids == 4
    d.submit(writes(range(0, 50), pid=1))  # RG 0, RUH 1
    d.submit(writes(range(50, 100), pid=5))  # RG 1, RUH 1
    lines0 = d.st.l2p[:50] // d.geo.ppl
    lines1 = d.st.l2p[50:100] // d.geo.ppl
    assert (lines0 < d.geo.lpr).all() and (lines1 >= d.geo.lpr).all()
    with pytest.raises(KvbedError, match=r"invalid placement id 8 \(valid: 0..7\)"):
        d.submit(writes([0], pid=8))


def test_invalid_placement_id_is_refused():
    d = make("fdp", *FDP)
    for bad in (4, -1):
        with pytest.raises(KvbedError, match=f"invalid placement id {bad}"):
            d.submit(ops((OP_WRITE, 0, 1, 0), (OP_WRITE, 1, 1, bad)))
    assert d.counters()["host_pages_written"] == 0


def test_a_reclaim_group_overfilled_by_the_host_fails_clearly():
    # all data on RG 0 (half the flash): GC runs out of invalid pages and says so, instead of looping
    d = make("fdp", *FDP, "nrg=2", "op_ratio=0.1", "ru_bytes=64KiB")
    with pytest.raises(KvbedError, match="reclaim group 0.*full of valid data"):
        d.submit(writes(range(d.logical_pages), pid=0))


def test_ruh_update_ignores_its_lba_field():
    # RUH update carries no LBA; any value there (even out of range) must be harmless
    d = make("fdp", *FDP)
    rows = [(OP_WRITE, i, 1, 0) for i in range(40)]
    rows[20] = (OP_RUH_UPDATE, 10**12, 1, 1)
    rows[30] = (OP_RUH_UPDATE, -(10**12), 1, 2)
    d.submit(ops(*rows))
    assert d.counters()["ruh_updates"] == 2 and d.counters()["host_pages_written"] == 38
    d.check_invariants()


def test_ruh_usage_log_reports_namespace_association_not_writes():
    # NVMe log 0x21: RUHA says whether a namespace's placement handle list references the RUH
    # (01h host specified), not whether data was written through it. The model's namespace uses
    # every RUH as placement ids 0..nruh-1 (as the VM testbed's fdp.ruhs=0-(nruh-1)), so every
    # RUH is host specified from the start, and stays so after counters are reset.
    d = make("fdp", *FDP)
    assert d.stats()["fdp"]["ruh_usage_log"] == {"nruh": 4, "ruhus": [{"ruha": 1}] * 4}
    d.submit(writes(range(10), pid=2))
    d.reset_counters()
    assert d.stats()["fdp"]["ruh_usage_log"] == {"nruh": 4, "ruhus": [{"ruha": 1}] * 4}


@pytest.mark.parametrize("timing", ["false", "true"])
def test_with_one_ruh_written_the_ruh_type_changes_no_gc_decision(timing):
    """Hints ``none`` write RUH 0 only: both types hold one host and one GC RU open, pick the same victims and
    move the same pages to the same places; only the GC RUs' owner differs (RUH 0 vs the shared owner 4).
    Persistently isolated differs only in the spare RUs its layout must allow for (ftl_state.line_budget:
    4 more frontiers here), which decides whether a layout is accepted, not its WAF."""
    runs, open_rus = {}, {}
    for t in ("initially", "persistently"):
        d = make("fdp", *FDP[:-1], f"timing={timing}", f"ruh_type={t}")
        n = d.logical_pages
        d.submit(writes(range(n), pid=0))
        rng = np.random.default_rng(1)  # the same overwrites for both types
        open_rus[t] = []
        for _ in range(12):  # 3 x n overwrites in chunks that end mid-RU
            d.submit(writes(rng.integers(0, n, 1000), pid=0))
            open_rus[t].append(int((d.st.lstate == LINE_OPEN).sum()))
        d.check_invariants()
        runs[t] = d
    ii, pi = runs["initially"], runs["persistently"]
    assert ii.counters() == pi.counters() and ii.counters()["gc_pages_moved"] > 0
    assert np.array_equal(ii.st.l2p, pi.st.l2p) and np.array_equal(ii.st.vc, pi.st.vc)
    assert open_rus["initially"] == open_rus["persistently"] and max(open_rus["initially"]) == 2
    owners = {t: set(np.unique(d.st.owner[d.st.owner >= 0]).tolist()) for t, d in runs.items()}
    assert owners == {"initially": {0, 4}, "persistently": {0}}  # GC RUs: the shared owner (nruh) or RUH 0
    b = {t: ftl_state.line_budget(d.flash, d.fdp) for t, d in runs.items()}
    assert (b["initially"].frontiers, b["persistently"].frontiers) == (5, 8)
