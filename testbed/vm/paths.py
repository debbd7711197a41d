"""Where the VM testbed keeps things: images in the user's cache, VM state apart from it.

Both honour the XDG variables, and ``KVBED_CACHE_DIR`` / ``KVBED_STATE_DIR``
override them (tests point them at temporary directories so several runs can
share a machine without seeing each other's VMs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPE_DIR = REPO_ROOT / "images" / "guest"
AGENT_DIR = REPO_ROOT / "kvreplay" / "agent"


def cache_dir() -> Path:
    if os.environ.get("KVBED_CACHE_DIR"):
        return Path(os.environ["KVBED_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvbed"


def images_dir() -> Path:
    return cache_dir() / "images"


def state_dir() -> Path:
    """Root of per-VM state directories (pid, ports, params, overlay, logs)."""
    if os.environ.get("KVBED_STATE_DIR"):
        return Path(os.environ["KVBED_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "kvbed" / "vms"


def read_manifest(artifact_dir: Path) -> dict:
    """A cached artifact's ``manifest.json`` (a guest image, a FEMU build); {} when absent or unreadable."""
    try:
        return json.loads((artifact_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
