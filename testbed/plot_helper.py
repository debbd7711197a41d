"""A replay's plots drawn by a helper process forked when the replay starts.

Why: the plots need matplotlib, whose import (~0.2 s) would otherwise come after the replay, on one core,
while the replay's own first ~0.3 s (numba setting up and loading its cached kernels) keep only one core busy.
A child forked before the replay imports the plotting code on the other core meanwhile; when the run's files
are written it gets the run (its result, config and tables, pickled), forks a second process that has it all
already, and the two draw the same PNGs the command would draw itself, one every other plot (~0.22 s of
drawing on one core, ~0.14 s on two). scripts/bench_process.py, the Mooncake replay as a user runs it:
1.84 s -> 1.53 s for the whole process (with the replay's smaller batches, kvreplay.replay.prefetch).

The command's semantics stay: a Ctrl-C stops plotting before the next plot. A terminal's Ctrl-C reaches the
whole process group, so the child stops by itself (it takes SIGINT as "stop", never as an exception); a SIGINT
sent to the parent alone reaches the child as a message, which the child passes on to the second drawing
process before its own next plot. The child writes only while :meth:`PlotHelper.draw`
waits for it, each PNG atomically. Where forking is unsafe or unavailable (not Linux, other Python threads
running) there is no helper, and where the child fails, dies or stops without the parent having been
interrupted, the caller draws in its own process (where an error shows with its traceback): the plots are the
same either way.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from testbed.results import Run

POLL_S = 0.05  # how often the parent checks should_stop while the child draws


class PlotHelper:
    """A forked child holding the plotting code, waiting for one run to draw."""

    def __init__(self, proc: multiprocessing.process.BaseProcess, conn: Connection):
        self.proc = proc
        self.conn = conn

    @classmethod
    def start(cls) -> PlotHelper | None:
        """The helper, or None where forking is not safe: a fork copies only the calling thread, so another
        Python thread running (holding a lock the child might need) means plotting in this process."""
        if sys.platform != "linux" or threading.active_count() > 1:
            return None
        ctx = multiprocessing.get_context("fork")
        here, there = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(there, here), name="kvbed-plots", daemon=True)
        # SIGINT blocked across the fork: the child installs its stop handler before one can arrive
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            proc.start()
        except OSError:  # no process to spare (EAGAIN, ENOMEM): plot here
            here.close()
            return None
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            there.close()
        return cls(proc, here)

    def draw(self, run: Run, should_stop: Callable[[], bool]) -> list[Path] | None:
        """The plots of ``run`` drawn by the child (as :func:`testbed.plots.draw_run_plots` draws them), or None
        if it could not: the caller then draws them itself. The child is gone when this returns."""
        try:
            if should_stop():
                return []  # as draw_run_plots: nothing drawn once a stop was asked for
            self.conn.send(run)
            stopped = False
            while not self.conn.poll(POLL_S):
                if not self.proc.is_alive():
                    return None
                if not stopped and should_stop():
                    self.conn.send("stop")
                    stopped = True
            kind, what = self.conn.recv()
        except (EOFError, OSError):
            return None
        finally:
            self.close()
        if kind == "stopped" and not should_stop():
            return None  # a SIGINT sent to the child alone: this run's plots are still wanted
        return [Path(p) for p in what] if kind in ("done", "stopped") else None

    def close(self) -> None:
        """End the child (at once if it is still waiting or drawing) and reap it."""
        self.conn.close()
        if self.proc.is_alive():
            self.proc.terminate()
        self.proc.join()


def _serve(conn: Connection, parent_end: Connection) -> None:
    """The child: import the plotting code, draw the one run it is sent (with a second process, forked from this
    one once the run is here, drawing every other plot), report the plots drawn."""
    interrupted: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    parent_end.close()
    try:
        from testbed.plots import draw_jobs, run_plot_jobs

        run = conn.recv()
        jobs = run_plot_jobs(run)
        other = _SecondProcess(jobs[1::2], lambda: bool(interrupted))

        def stop() -> bool:
            if interrupted or conn.poll():  # a Ctrl-C here, or a message from the parent
                other.stop()
                return True
            return False

        drawn = draw_jobs(jobs[0::2], stop)
        drawn += other.wait()
        order = {path: k for k, (path, _) in enumerate(jobs)}
        drawn.sort(key=order.__getitem__)
        conn.send(("stopped" if interrupted else "done", [str(p) for p in drawn]))
    except EOFError:  # the parent needs no plots after all
        pass
    except Exception as exc:  # the parent draws in its own process, where the error shows in full
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))


class _SecondProcess:
    """``jobs`` drawn in a process forked from this one (it has the run and the plotting code already: the fork
    costs ~10 ms), so the plots are drawn on both cores."""

    def __init__(self, jobs: list, should_stop: Callable[[], bool]):
        self.pid = None
        if not jobs:
            return
        self.rd, wr = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the second process: draw, say which, and leave without the first one's clean-up
            code = 1
            try:
                os.close(self.rd)
                from testbed.plots import draw_jobs

                os.write(wr, json.dumps([str(p) for p in draw_jobs(jobs, should_stop)]).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(wr)
        self.stopped = False

    def stop(self) -> None:
        """Stop it before its next plot (a SIGINT: it takes one as "stop")."""
        if self.pid is not None and not self.stopped:
            self.stopped = True
            os.kill(self.pid, signal.SIGINT)

    def wait(self) -> list[Path]:
        """The plots it drew, once it is done."""
        if self.pid is None:
            return []
        with os.fdopen(self.rd, "rb") as f:
            text = f.read()
        _, status = os.waitpid(self.pid, 0)
        if status != 0:
            raise RuntimeError(f"the second plotting process failed (wait status {status})")
        return [Path(p) for p in json.loads(text)]


@contextmanager
def plot_helper(enabled: bool = True) -> Iterator[PlotHelper | None]:
    """A :class:`PlotHelper` for the block (None when ``enabled`` is false or forking is unsafe), ended on the
    way out whatever happened."""
    helper = PlotHelper.start() if enabled else None
    try:
        yield helper
    finally:
        if helper is not None:
            helper.close()


def draw_plots(helper: PlotHelper | None, run: Run, should_stop: Callable[[], bool]) -> list[Path]:
    """The run's plots: by the helper when there is one and it succeeds, else in this process."""
    if helper is not None:
        drawn = helper.draw(run, should_stop)
        if drawn is not None:
            return drawn
    from testbed.plots import draw_run_plots

    return draw_run_plots(run, should_stop)
