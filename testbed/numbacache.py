"""Key numba's on-disk kernel cache by a fingerprint of kvbed's kernel sources.

numba invalidates a cached kernel when the kernel's own file changes, not when a
module it inlines from changes (histogram.py, ftl_state.py, layout/common.py...),
so after such an edit a stale kernel would silently run the old code. Keeping one
cache directory per source fingerprint makes every edit start from a clean cache;
the few newest directories are kept so switching branches stays warm.

Base directory: ``NUMBA_CACHE_DIR`` as given by the user (the Makefile sets
``.cache/numba``), else ``$XDG_CACHE_HOME/kvbed/numba``. The chosen base is kept in
``KVBED_NUMBA_CACHE_BASE`` so child processes land in the same directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

KEEP = 4
_PACKAGES = ("devicemodels", "kvreplay")


def source_fingerprint(root: Path) -> str:
    h = hashlib.sha1()
    for pkg in _PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            h.update(path.relative_to(root).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def configure() -> Path | None:
    """Point numba at the cache directory of the current sources (before kernels compile)."""
    root = Path(__file__).resolve().parents[1]
    base_text = os.environ.get("KVBED_NUMBA_CACHE_BASE") or os.environ.get("NUMBA_CACHE_DIR")
    if not base_text:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        base_text = str(Path(xdg) / "kvbed" / "numba")
    base = Path(base_text)
    try:
        cache = base / source_fingerprint(root)
        cache.mkdir(parents=True, exist_ok=True)
        os.utime(cache)  # newest first when pruning
    except OSError:
        return None  # read-only home or sources: numba's default (__pycache__) still works
    os.environ["KVBED_NUMBA_CACHE_BASE"] = str(base)
    os.environ["NUMBA_CACHE_DIR"] = str(cache)
    if "numba" in sys.modules:  # imported before us: numba reads the variable once, at import
        sys.modules["numba"].config.CACHE_DIR = str(cache)
    _prune(base, keep=cache)
    return cache


def _prune(base: Path, keep: Path) -> None:
    try:
        dirs = sorted((d for d in base.iterdir() if d.is_dir() and d != keep),
                      key=lambda d: d.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in dirs[KEEP - 1:]:
        shutil.rmtree(old, ignore_errors=True)
