"""Validation against ../shared/notes/reference-figures.md (uniform random 4 KiB overwrites at
steady state) and the FDP separation experiments.

Setup: 1M logical pages (the >= 256K the issue asks for; at 256K the frontiers and the free line GC
keeps are ~3 % of the spare space and shift FIFO at 7 % OP by ~2 %), one die and a line of one
block, so the GC unit is one block of N pages as in the references. Sequential fill, 2x capacity of
random warm-up, then 2x measured. The analytic values are evaluated at the device's effective OP
(lines are whole blocks, so physical pages are rounded up: 7 % becomes 7.007 %).
"""

import numpy as np
import pytest

from devicemodels import analytic
from devicemodels.base import OP_TRIM, OP_WRITE, op_batch

from tests.support.devices import make

ONE_BLOCK_GC = ["channels=1", "dies_per_channel=1", "blocks_per_line=1", "timing=false",
                "gc_fg_free_lines=1", "gc_bg_free_lines=1"]
L = 1 << 20
# reference-figures.md, simulated greedy columns (1M logical pages)
GREEDY_REF = {256: {0.07: 7.65, 0.10: 5.59, 0.20: 3.16, 0.28: 2.47},
              64: {0.07: 7.02, 0.10: 5.25, 0.20: 3.05, 0.28: 2.40}}


def steady_uniform_waf(*params, warm=2.0, measure=2.0, seed=1):
    d = make("conv", *ONE_BLOCK_GC, *params, base=[f"logical_bytes={L * 4096}"])
    d.precondition(1.0, overwrite_x=warm, seed=seed)
    rng = np.random.default_rng(seed + 1)
    n = int(measure * L)
    for s in range(0, n, 1 << 20):
        m = min(1 << 20, n - s)
        d.submit(op_batch(np.full(m, OP_WRITE, np.int8), rng.integers(0, L, m), np.ones(m, np.int32)))
    return d.waf(), d.geometry()["op_ratio_effective"]


def test_analytic_reference_values():
    # the closed forms reproduce the reference table
    for rho, fifo, rnd in [(0.07, 7.82, 15.29), (0.10, 5.68, 11.00), (0.20, 3.19, 6.00), (0.28, 2.48, 4.57)]:
        assert analytic.fifo_waf(rho) == pytest.approx(fifo, abs=0.006)
        assert analytic.random_waf(rho) == pytest.approx(rnd, abs=0.006)


@pytest.mark.slow
@pytest.mark.parametrize("op", [0.07, 0.10, 0.20, 0.28])
def test_fifo_within_2_percent_of_analytic(op):
    # measured (seed 1): 7.850 / 5.693 / 3.190 / 2.484 vs 7.810 / 5.673 / 3.185 / 2.481 (+0.1..0.5 %)
    waf, rho = steady_uniform_waf(f"op_ratio={op}", "gc_policy=fifo")
    assert waf == pytest.approx(analytic.fifo_waf(rho), rel=0.02)


@pytest.mark.slow
@pytest.mark.parametrize("op", [0.07, 0.10, 0.20, 0.28])
@pytest.mark.parametrize("ppb", [256, 64])
def test_greedy_within_3_percent_of_reference(op, ppb):
    # measured: 256 ppb 7.624 / 5.575 / 3.156 / 2.464 (-0.3 .. -0.1 %); 64 ppb 7.016 / 5.250 / 3.053 / 2.402
    waf, _ = steady_uniform_waf(f"op_ratio={op}", f"pages_per_block={ppb}")
    assert waf == pytest.approx(GREEDY_REF[ppb][op], rel=0.03)
    # greedy beats FIFO, approaching it as blocks grow
    assert waf < analytic.fifo_waf(op)


@pytest.mark.slow
@pytest.mark.parametrize("op", [0.07, 0.10, 0.20, 0.28])
def test_random_victim_within_3_percent_of_inverse_spare_factor(op):
    # measured: 15.333 / 11.010 / 5.992 / 4.580 vs 15.272 / 10.990 / 5.995 / 4.571
    waf, rho = steady_uniform_waf(f"op_ratio={op}", "gc_policy=random")
    assert waf == pytest.approx(analytic.random_waf(rho), rel=0.03)


def _hotcold(device, *params, separate, rounds_warm=4, rounds=4, seed=2):
    """80 % of writes to 20 % of the LBAs; 'separate' puts hot on placement id 0 and cold on 1."""
    d = make(device, *ONE_BLOCK_GC, "op_ratio=0.28", *params, base=[f"logical_bytes={L * 4096}"])
    rng = np.random.default_rng(seed)
    hot = L // 5
    lba = np.arange(L)
    pid = (lba >= hot).astype(np.int16) if separate else np.zeros(L, np.int16)
    d.submit(op_batch(np.full(L, OP_WRITE, np.int8), lba, np.ones(L, np.int32), pid))
    for r in range(rounds_warm + rounds):
        if r == rounds_warm:
            d.reset_counters()
        is_hot = rng.random(L) < 0.8
        lba = np.where(is_hot, rng.integers(0, hot, L), rng.integers(hot, L, L))
        pid = (~is_hot).astype(np.int16) if separate else np.zeros(L, np.int16)
        d.submit(op_batch(np.full(L, OP_WRITE, np.int8), lba, np.ones(L, np.int32), pid))
    return d.waf()


@pytest.mark.slow
def test_hot_cold_separation_on_fdp():
    """Reference (greedy, 256-page blocks, 28 % OP): mixed in one stream 2.81, separated 2.46.

    Measured: two RUHs, persistently isolated (GC keeps each stream's data in its RUs) 2.460,
    equal to the reference 2.46, i.e. back at the uniform value; the same writes on one RUH 2.709,
    10 % higher. The reference 2.81 is a single write frontier where each new block starts with
    one victim's copies followed by host data; our conv with gc_separate_frontier=false is that
    model and gives 2.805 (-0.2 %). FDP (like conv by default) writes GC copies to their own RU, which
    already separates GC'd (colder) data from new writes: hence 2.709 rather than 2.81.
    """
    fdp = ["ru_bytes=1MiB", "nruh=2"]
    separated = _hotcold("fdp", *fdp, "ruh_type=persistently", separate=True)
    mixed = _hotcold("fdp", *fdp, separate=False)
    single_frontier = _hotcold("conv", "gc_separate_frontier=false", "gc_fg_free_lines=2", "gc_bg_free_lines=2",
                               separate=False)
    assert separated == pytest.approx(2.46, rel=0.03)
    assert single_frontier == pytest.approx(2.81, rel=0.03)
    assert mixed > 1.08 * separated  # separation cuts WAF by ~9 % here
    assert single_frontier > mixed


def _lifetime_workload(separate, lifetimes=(1, 2, 4, 8, 16), obj=1792, chunk=16, rounds=300, warm=100):
    """KV-cache-like: every round each stream writes one object (interleaved 16-page chunks) and TRIMs
    the one that expired; stream k's objects live lifetimes[k] rounds. Oracle placement = RUH k."""
    n_l = 65536
    d = make("fdp", "channels=1", "dies_per_channel=1", "op_ratio=0.07", "ru_bytes=1MiB", "nruh=5",
             "timing=false", base=[f"logical_bytes={n_l * 4096}"])
    base = np.cumsum([0] + [obj * (lt + 1) for lt in lifetimes])
    assert base[-1] <= n_l
    for r in range(rounds):
        if r == warm:
            d.reset_counters()
        rows = [(OP_TRIM, base[k] + ((r - lt) % (lt + 1)) * obj, obj, 0)
                for k, lt in enumerate(lifetimes) if r >= lt]
        rows += [(OP_WRITE, base[k] + (r % (lt + 1)) * obj + c * chunk, chunk, k if separate else 0)
                 for c in range(obj // chunk) for k, lt in enumerate(lifetimes)]
        d.submit(op_batch(*(np.array(col) for col in zip(*rows))))
    d.check_invariants()
    return d.waf()


@pytest.mark.slow
def test_oracle_lifetimes_per_ruh_reach_waf_near_one():
    # measured: 1.000 with one RUH per lifetime class vs 1.536 with every stream on one RUH
    oracle = _lifetime_workload(separate=True)
    one_ruh = _lifetime_workload(separate=False)
    assert oracle <= 1.05
    assert one_ruh >= 1.4
