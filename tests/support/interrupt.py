"""Ctrl-C at a controlled moment: ``kvbed`` in a subprocess whose chosen function, on its n-th call, sends
a real SIGINT to the process group (as a terminal's Ctrl-C does: a replay's plot helper gets it too) before or
after doing its work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

_WRAPPER = """
import importlib, os, signal, sys
mod_name, attr, nth, when = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
mod = importlib.import_module(mod_name)
orig = getattr(mod, attr)
calls = [0]

def patched(*a, **k):
    calls[0] += 1
    if when == "before" and calls[0] == nth:
        os.killpg(0, signal.SIGINT)
    out = orig(*a, **k)
    if when in ("after", "twice") and calls[0] == nth:
        os.killpg(0, signal.SIGINT)
        if when == "twice":  # the user presses Ctrl-C again once the first one was taken
            for _ in range(10_000):
                pass
            os.killpg(0, signal.SIGINT)
    return out

setattr(mod, attr, patched)
from testbed.cli import main
main(sys.argv[5:])
"""


def kvbed_interrupted(target: str, *args, nth: int = 1, when: str = "after", cwd: Path | None = None,
                      timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``kvbed ARGS``; SIGINT comes on the ``nth`` call of ``target`` ("module:function"), ``before`` or
    ``after`` it does its work, or ``twice`` after it."""
    mod, attr = target.split(":")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", _WRAPPER, mod, attr, str(nth), when, *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd or ROOT, timeout=timeout,
                          start_new_session=True)  # its own process group, which the SIGINT reaches


def one_interrupted_line(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit status 130 and one ``kvbed: interrupted...`` line on stderr holding every fragment."""
    assert proc.returncode == 130, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert err.startswith("kvbed: interrupted") and "\n" not in err, err
    for f in fragments:
        assert f in err, (f, err)
    return err
