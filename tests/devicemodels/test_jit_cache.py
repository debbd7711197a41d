"""numba's kernel cache is keyed by the kernel sources, so an edit never runs a stale kernel, and is set up
at the first compile (importing is side-effect free: tests/test_layers.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from devicemodels.jit import source_fingerprint


def _tree(root: Path, histogram: str) -> None:
    for rel, text in {"devicemodels/histogram.py": histogram, "kvreplay/tiers/kernel.py": "K = 1\n",
                      "testbed/cli.py": "X = 1\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_fingerprint_follows_every_kernel_module(tmp_path):
    _tree(tmp_path, "NB = 64\n")
    before = source_fingerprint(tmp_path)
    source_fingerprint.cache_clear()
    assert source_fingerprint(tmp_path) == before  # stable
    (tmp_path / "devicemodels/histogram.py").write_text("NB = 128\n")  # a module kernels inline from
    source_fingerprint.cache_clear()
    assert source_fingerprint(tmp_path) != before
    _tree(tmp_path, "NB = 64\n")
    source_fingerprint.cache_clear()
    assert source_fingerprint(tmp_path) == before
    (tmp_path / "testbed/cli.py").write_text("X = 2\n")  # no kernels outside devicemodels/ and kvreplay/
    source_fingerprint.cache_clear()
    assert source_fingerprint(tmp_path) == before
    source_fingerprint.cache_clear()


# a small kernel that inlines a helper from another module (rng.py), run in a child process; the child may
# pretend the sources changed by replacing the fingerprint before the first call
_CHILD = """
import json, sys
import numpy as np
from devicemodels import jit, rng
if len(sys.argv) > 1:
    jit.source_fingerprint = lambda root=None: sys.argv[1]
with jit.compile_clock() as clock:
    state = rng.new_state(7)
    x = rng.below(state, 1000)
stats = rng.below.stats
print(json.dumps({"hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values()),
                  "path": stats.cache_path, "x": int(x), "jit_s": jit.compile_seconds(clock)}))
"""


def _child(env, *args):
    res = subprocess.run([sys.executable, "-c", _CHILD, *args], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_first_compile_fills_the_cache_later_processes_load_it_and_a_source_change_recompiles(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "cache")
    first = _child(env)
    assert first["misses"] == 1 and first["hits"] == 0
    assert Path(first["path"]).parent == tmp_path / "cache" and any(Path(first["path"]).glob("*.nbi"))
    assert first["jit_s"] > 0
    again = _child(env)
    assert again["hits"] == 1 and again["misses"] == 0 and again["x"] == first["x"]
    changed = _child(env, "another-fingerprint")  # what an edit of any kernel module does
    assert changed["misses"] == 1 and changed["hits"] == 0
    assert _child(env)["hits"] == 0  # the index now holds the other stamp: back to a compile
