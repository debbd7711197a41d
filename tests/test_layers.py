"""The rooms' layering and the packages' import hygiene (issue 9).

Layers point down: testbed (CLI, VM, studies, reports) -> kvreplay and devicemodels -> testbed.core.
Importing any package has no side effects: no environment variable changes and no file is touched
(numba's kernel cache is set up at the first compile, not on import).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names if node.module == "testbed"]
    return out


def _violations(pkg: str, allowed) -> list[str]:
    bad = []
    for path in sorted((ROOT / pkg).rglob("*.py")):
        for line, mod in _imports(path):
            if not allowed(mod):
                bad.append(f"{path.relative_to(ROOT)}:{line}: import {mod}")
    return bad


def _is_testbed(mod: str) -> bool:
    return mod == "testbed" or mod.startswith("testbed.")


def _is_core(mod: str) -> bool:
    return mod == "testbed.core" or mod.startswith("testbed.core.")


@pytest.mark.parametrize("pkg", ["kvreplay", "devicemodels"])
def test_lower_rooms_import_only_the_foundation_of_testbed(pkg):
    assert _violations(pkg, lambda m: not _is_testbed(m) or _is_core(m)) == []


def test_physics_knows_no_traces():
    assert _violations("devicemodels", lambda m: not (m == "kvreplay" or m.startswith("kvreplay."))) == []


def test_the_foundation_stands_on_the_standard_library_and_numpy():
    stdlib = set(sys.stdlib_module_names)
    ok = lambda m: m.split(".")[0] in stdlib or m.split(".")[0] == "numpy" or _is_core(m)  # noqa: E731
    assert _violations("testbed/core", ok) == []


def test_the_guest_agent_is_stdlib_and_pyzmq_only():
    stdlib = set(sys.stdlib_module_names)
    ok = lambda m: m.split(".")[0] in stdlib | {"zmq"} or m.startswith("kvreplay.agent")  # noqa: E731
    assert _violations("kvreplay/agent", ok) == []


def test_the_checker_sees_a_violation(tmp_path):
    """The walk finds an import of testbed outside core, in any form."""
    (tmp_path / "m.py").write_text("import os\nfrom testbed.results import io_entry\nfrom testbed import plots\n"
                                   "from testbed.core.errors import KvbedError\n")
    found = [m for _, m in _imports(tmp_path / "m.py") if _is_testbed(m) and not _is_core(m)]
    assert found == ["testbed.results", "testbed", "testbed.plots"]


_PROBE = """
import json, os, sys
before = dict(os.environ)
import {mods}
after = dict(os.environ)
print(json.dumps({{"changed": sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))}}))
"""


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".venv", ".hypothesis", ".pytest_cache")]
        for name in filenames + dirnames:
            p = Path(dirpath) / name
            try:
                st = p.stat()
            except FileNotFoundError:
                continue
            out[str(p)] = (st.st_mtime_ns, st.st_size)
    return out


@pytest.mark.parametrize("mods", [
    "devicemodels", "kvreplay", "testbed",
    "kvreplay.replay, kvreplay.hints, kvreplay.importers, kvreplay.tiers.sim, kvreplay.layout, kvreplay.validate",
    "testbed.cli, testbed.results, testbed.vm.replay",
])
def test_import_has_no_side_effects(tmp_path, mods):
    cache = tmp_path / "numba-cache"
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "KVBED_"))}
    env.update(NUMBA_CACHE_DIR=str(cache), HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"),
               PYTHONDONTWRITEBYTECODE="1")
    tree = _snapshot(ROOT)
    res = subprocess.run([sys.executable, "-c", _PROBE.format(mods=mods)], env=env, cwd=tmp_path,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1])["changed"] == []
    assert not cache.exists()
    assert list(home.rglob("*")) == []
    assert _snapshot(ROOT) == tree
