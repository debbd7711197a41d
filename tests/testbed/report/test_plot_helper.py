"""The forked plot helper (testbed.plot_helper): the PNGs it draws (every other one in a second process) are
the bytes this process draws, a stop request or its own SIGINT stops it before the next plot, and whatever goes
wrong in it the caller still gets the plots, drawn in its own process."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from tests.support.cli import kvbed, ok
from testbed import plot_helper as PH
from testbed.plots import draw_run_plots
from testbed.results import load_run

PNGS = ["waf.png", "latency_cdf.png", "ruh_bytes.png"]


@pytest.fixture(scope="module")
def run_dir(lifetimes_trace, tmp_path_factory):
    out = tmp_path_factory.mktemp("helper") / "run"
    ok(kvbed("replay", lifetimes_trace(3000), "-o", out, "-q", "--no-plots", "--hints", "oracle"))
    return out


def _run_in(run_dir: Path, where: Path):
    run = load_run(run_dir, "run")  # titled alike wherever the plots go
    where.mkdir()
    run.path = where
    return run


def test_the_helper_draws_the_same_bytes(run_dir, tmp_path):
    here = draw_run_plots(_run_in(run_dir, tmp_path / "here"))
    helper = PH.PlotHelper.start()
    assert helper is not None and helper.proc.pid != os.getpid()
    there = helper.draw(_run_in(run_dir, tmp_path / "there"), lambda: False)
    assert [p.name for p in there] == [p.name for p in here] == PNGS
    for a, b in zip(here, there):
        assert a.read_bytes() == b.read_bytes() and b.parent == tmp_path / "there"
    assert not helper.proc.is_alive()
    assert sorted(p.name for p in (tmp_path / "there").iterdir()) == sorted(PNGS)  # nothing else left there


def test_a_stop_before_the_first_plot_draws_none(run_dir, tmp_path):
    helper = PH.PlotHelper.start()
    assert helper.draw(_run_in(run_dir, tmp_path / "r"), lambda: True) == []
    assert list((tmp_path / "r").iterdir()) == []


def test_a_sigint_to_the_child_alone_leaves_the_plots_to_the_caller(run_dir, tmp_path, monkeypatch):
    """The child stops on SIGINT, but the parent was not interrupted: its plots are still wanted, so ``draw``
    says it could not, and draw_plots draws them in this process."""
    from testbed import plots

    orig = plots.plot_waf

    def waf_then_sigint(run, path):  # runs in the child (forked after the patch)
        orig(run, path)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(plots, "plot_waf", waf_then_sigint)
    helper = PH.PlotHelper.start()
    assert helper.draw(_run_in(run_dir, tmp_path / "r"), lambda: False) is None
    # it stopped before its next plot (ruh_bytes; latency_cdf is the second process's, which got no SIGINT)
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["latency_cdf.png", "waf.png"]
    monkeypatch.setattr(plots, "plot_waf", orig)
    drawn = PH.draw_plots(None, _run_in(run_dir, tmp_path / "again"), lambda: False)
    assert [p.name for p in drawn] == PNGS


def test_a_failing_or_dead_child_leaves_the_plots_to_the_caller(run_dir, tmp_path, monkeypatch):
    from testbed import plots

    def broken(run, path):
        raise ValueError("no such axis")

    monkeypatch.setattr(plots, "plot_latency_cdf", broken)
    helper = PH.PlotHelper.start()
    assert helper.draw(_run_in(run_dir, tmp_path / "failed"), lambda: False) is None
    # the caller's own drawing shows the error in full
    helper = PH.PlotHelper.start()
    with pytest.raises(ValueError, match="no such axis"):
        PH.draw_plots(helper, _run_in(run_dir, tmp_path / "shown"), lambda: False)
    monkeypatch.undo()
    helper = PH.PlotHelper.start()
    helper.proc.kill()
    helper.proc.join()
    drawn = PH.draw_plots(helper, _run_in(run_dir, tmp_path / "dead"), lambda: False)
    assert [p.name for p in drawn] == PNGS and all(p.exists() for p in drawn)


def test_no_helper_while_another_thread_runs():
    gate = threading.Event()
    t = threading.Thread(target=gate.wait)
    t.start()
    try:
        assert PH.PlotHelper.start() is None
    finally:
        gate.set()
        t.join()
    with PH.plot_helper(enabled=False) as none:
        assert none is None
    with PH.plot_helper() as helper:
        assert helper is not None and helper.proc.is_alive()
    assert not helper.proc.is_alive()  # ended on the way out, never asked to draw
