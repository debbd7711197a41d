"""`kvbed trace capture` as a process: bad arguments exit 2 in one line; a vanished publisher, SIGTERM
and --duration keep what was captured and exit 0; SIGKILL leaves the trace of the last flush; the
captured trace replays."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from tests.support.capture_publisher import FakeEngine, batch, removed, stored
from tests.support.cli import kvbed, ok, one_line_error
from kvreplay.schema import TraceReader
from kvreplay.validate import validate_trace
from tests.support.capture_publisher import endpoints

from tests.support.paths import ROOT


def start(*args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", "from testbed.cli import main; main()", "trace", "capture",
                             *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)


def feed_until(eng, proc, out: Path, rows: int, timeout=30.0, first=0):
    """Publish stores (handshake included) until the file on disk holds at least ``rows`` rows."""
    end = time.monotonic() + timeout
    i = first
    while time.monotonic() < end:
        eng.send(batch(100.0 + i, [stored([10_000 + 2 * i, 10_001 + 2 * i], medium="GPU"),
                                   stored([10_000 + 2 * i], medium="CPU")]))
        i += 1
        time.sleep(0.005)
        if out.exists():
            try:
                if TraceReader(out).num_rows >= rows:
                    return i
            except Exception:
                pass
        assert proc.poll() is None, proc.communicate()
    raise AssertionError("capture never flushed")


def test_bad_arguments_exit_2(tmp_path):
    out = tmp_path / "x.parquet"
    one_line_error(kvbed("trace", "capture", "--zmq", "localhost:5557", "-o", out), "expected a ZMQ endpoint")
    one_line_error(kvbed("trace", "capture", "--zmq", "tcp://127.0.0.1:1", "--replay", "tcp://127.0.0.1:2",
                         "--replay", "tcp://127.0.0.1:3", "-o", out), "2 --replay endpoints for 1 --zmq")
    one_line_error(kvbed("trace", "capture", "--zmq", "tcp://127.0.0.1:1", "--model", "gpt-9", "-o", out), "model")
    one_line_error(kvbed("trace", "capture", "--zmq", "tcp://127.0.0.1:1", "--medium", "NVME", "-o", out),
                   "expected NAME=TIER")
    one_line_error(kvbed("trace", "capture", "--zmq", "tcp://127.0.0.1:1", "--duration", "-3", "-o", out),
                   "duration_s must be >= 0")
    assert not out.exists()


def test_publisher_that_disappears_keeps_the_capture(tmp_path):
    pub, _ = endpoints()
    out = tmp_path / "gone.parquet"
    proc = start("--zmq", pub, "--duration", 4, "--param", "quiet_s=1", "--param", "flush_s=0.2", "-o", out, "--json")
    ctx = zmq.Context()
    eng = FakeEngine(ctx, pub)
    try:
        feed_until(eng, proc, out, 1)
    finally:
        eng.close()  # the engine goes away
        ctx.term()
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    s = json.loads(stdout)
    assert s["stopped_by"] == "duration" and s["events"] >= 1
    assert "gone quiet for" in stderr
    assert validate_trace(out).ok and TraceReader(out).num_rows == s["events"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_sigterm_stops_cleanly_and_the_trace_replays(tmp_path, sig):
    """SIGTERM, and Ctrl-C too: a capture has no end of its own, so a signal is its normal stop (exit 0, the
    trace complete), unlike the commands Ctrl-C cuts short (exit 130)."""
    pub, _ = endpoints()
    out, raw = tmp_path / "t.parquet", tmp_path / "t.kvraw"
    proc = start("--zmq", pub, "--raw", raw, "--param", "flush_s=0.2", "-o", out, "--json")
    ctx = zmq.Context()
    eng = FakeEngine(ctx, pub)
    try:
        n = feed_until(eng, proc, out, 40)
        eng.send(batch(500.0, [removed([10_000], medium="CPU")]))
        time.sleep(0.3)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        eng.close()
        ctx.term()
    assert proc.returncode == 0, stderr
    s = json.loads(stdout)
    assert s["stopped_by"] == "signal" and s["facts"]["stored_blocks"]["cpu"] >= 1
    r = TraceReader(out)
    assert r.num_rows == s["events"] and r.meta.extra["complete"] is True
    assert validate_trace(out).ok
    # the raw file gives the same trace
    again = tmp_path / "again.parquet"
    ok(kvbed("trace", "import", "vllm-events", raw, "-o", again))
    assert TraceReader(again).num_rows == s["events"]
    # and the CPU tier's persists replay on a DRAM device
    res = ok(kvbed("replay", out, "--tier", "cpu", "--device", "dram", "-o", tmp_path / "rep", "-q", "--no-plots"))
    assert (tmp_path / "rep").exists(), res.output
    assert n > 0


def test_sigkill_leaves_the_last_flush(tmp_path):
    pub, _ = endpoints()
    out = tmp_path / "k.parquet"
    proc = start("--zmq", pub, "--param", "flush_s=0.2", "-o", out)
    ctx = zmq.Context()
    eng = FakeEngine(ctx, pub)
    try:
        feed_until(eng, proc, out, 30)
        proc.kill()
        proc.wait(10)
    finally:
        eng.close()
        ctx.term()
    r = TraceReader(out)  # readable: a flush is a rename of a complete file
    assert r.num_rows >= 30 and r.meta.extra["complete"] is False
    assert validate_trace(out).ok


def test_warnings_reach_the_terminal_and_the_summary_counts_them(tmp_path):
    """The session used to keep the warn it was built with while the CLI set another afterwards: warnings
    were never printed. Now each kind is printed once on stderr and counted in the summary."""
    pub, _ = endpoints()
    ctx = zmq.Context()
    eng = FakeEngine(ctx, pub)
    out = tmp_path / "w.parquet"
    proc = start("--zmq", pub, "--duration", "4", "-o", out, "--param", "flush_s=0.2")
    try:
        end = time.monotonic() + 30
        i = 0
        while time.monotonic() < end and proc.poll() is None:  # a bad event in every batch, good ones beside it
            eng.send(batch(100.0 + i, [stored([20_000 + i]), stored([30_000 + i], bs=-1)]))
            i += 1
            time.sleep(0.01)
        so, se = proc.communicate(timeout=30)
    finally:
        eng.close()
        ctx.term()
    assert proc.returncode == 0, se
    assert se.count("warning") == 1 and "BlockStored block_size -1" in se and "rest of its batch taken" in se
    assert "bad events" in so and "BlockStored block_size=" in so and "1 warning" in so
    rows = TraceReader(out).num_rows
    assert rows >= 2 and rows % 2 == 0  # the good stores (create + commit each), none of the bad ones
