"""numba's kernel cache is keyed by the kernel sources, so an edit never runs a stale kernel."""

import os
import subprocess
import sys
from pathlib import Path

from testbed.numbacache import source_fingerprint


def _tree(root: Path, histogram: str) -> None:
    for rel, text in {"devicemodels/histogram.py": histogram, "kvreplay/tiers/kernel.py": "K = 1\n",
                      "testbed/cli.py": "X = 1\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_fingerprint_follows_every_kernel_module(tmp_path):
    _tree(tmp_path, "NB = 64\n")
    before = source_fingerprint(tmp_path)
    assert source_fingerprint(tmp_path) == before  # stable
    (tmp_path / "devicemodels/histogram.py").write_text("NB = 128\n")  # a module kernels inline from
    assert source_fingerprint(tmp_path) != before
    _tree(tmp_path, "NB = 64\n")
    assert source_fingerprint(tmp_path) == before
    (tmp_path / "testbed/cli.py").write_text("X = 2\n")  # no kernels outside devicemodels/ and kvreplay/
    assert source_fingerprint(tmp_path) == before


def _cache_dir(env: dict) -> str:
    code = "import os, testbed; print(os.environ['NUMBA_CACHE_DIR'])"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_children_share_the_directory_and_old_ones_are_pruned(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "KVBED_NUMBA_CACHE_BASE")}
    env["NUMBA_CACHE_DIR"] = str(tmp_path)
    first = _cache_dir(env)
    assert Path(first).parent == tmp_path and Path(first).is_dir()
    # a child process inherits both variables and must not nest another level
    child_env = dict(env, NUMBA_CACHE_DIR=first, KVBED_NUMBA_CACHE_BASE=str(tmp_path))
    assert _cache_dir(child_env) == first
    for i in range(6):  # stale fingerprints from earlier edits
        old = tmp_path / f"old{i}"
        old.mkdir()
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    _cache_dir(env)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([Path(first).name, "old3", "old4", "old5"])
