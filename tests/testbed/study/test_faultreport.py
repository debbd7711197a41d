"""A fault study's findings and plot say what each contract let through (issue 21): sums over the fault
settings of the per-setting mean over seeds, checked on a known table."""

from __future__ import annotations

import pandas as pd
import pytest

from testbed.study.faultreport import fault_findings, loads_by_contract_figure
from testbed.study.findings import findings

FAULT, CONTRACT = "replay.param.fault", "replay.param.contract"
COLS = [FAULT, CONTRACT]
DOC = {"axes": {FAULT: [], CONTRACT: []}, "zips": [], "traces": {"a": {"label": "t"}}}
# (fault, contract) -> loads wrong, stale-entry loads, of them wrong, detected, recomputed tokens, header bytes
CASES = {
    ("pl@1", "none"): (100, 10, 10, 0, 500, 0), ("pl@1", "full"): (0, 10, 0, 110, 2000, 4096),
    ("pl@2", "none"): (40, 3, 2, 0, 300, 0), ("pl@2", "full"): (0, 3, 0, 41, 900, 4096),
}


def _table() -> pd.DataFrame:
    """2 seeds: seed 1 has one more wrong load under none, so the mean is x.5 and the sum shows the rounding."""
    rows = []
    for seed in (0, 1):
        for (fault, contract), (wrong, stale, stale_wrong, det, tok, hdr) in CASES.items():
            extra = seed if contract == "none" else 0
            rows.append({"status": "ok", "device": "fdp", "policy": "none", "seed": seed, FAULT: fault,
                         CONTRACT: contract, "loads_wrong": wrong + extra, "stale_entry_loads": stale,
                         "stale_wrong_loads": stale_wrong, "loads_detected": det, "recompute_tokens": tok,
                         "contract_extra_bytes_written": hdr, "end_to_end_waf": 1.0, "saturated": 0,
                         "run_dir": f"runs/{fault}-{contract}-{seed}"})
    return pd.DataFrame(rows)


def test_findings_sum_each_contract_over_the_fault_settings():
    got = fault_findings(_table(), COLS)
    # none: (100.5 + 40.5) = 141 wrong; stale entries 13 under both; 12 served wrong under none, 0 under full
    assert got[0] == ("On fdp, loads served wrong after the faults by contract, summed over the 2 fault settings, "
                      "each the mean over 2 seeds: none 141, full 0.")
    assert "stale host-index entry" in got[1] and "none 13, full 13; of them served wrong none 12, full 0" in got[1]
    assert "tokens recomputed none 800, full 2,900" in got[2] and "none 0 B, full 8.0 KiB" in got[2]


def test_the_study_findings_include_them_and_a_hint_study_has_none():
    assert findings(_table(), DOC)[:3] == fault_findings(_table(), COLS)
    hints = _table().drop(columns=["loads_wrong"])
    assert fault_findings(hints, COLS) == []
    assert loads_by_contract_figure(hints, COLS) is None


def test_the_plot_has_a_bar_per_contract_and_setting_at_the_mean():
    fig = loads_by_contract_figure(_table(), COLS)
    wrong, stale = fig.axes[0], fig.axes[1]
    # bars: none at pl@1, pl@2, then full at pl@1, pl@2
    assert [p.get_height() for p in wrong.patches] == pytest.approx([100.5, 40.5, 0, 0])
    assert [p.get_height() for p in stale.patches] == pytest.approx([10, 2, 0, 0])
    assert wrong.get_ylim()[0] == 0 and "contract" in wrong.get_title()
    labels = sorted(t.get_text() for t in wrong.texts)
    assert labels == ["0", "0", "100.5", "40.5"]  # every bar labelled, a mean over seeds as it is
