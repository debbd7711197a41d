"""The rooms' layering and the packages' import hygiene (issues 9 and 19).

Layers point down: testbed (CLI, VM, studies, reports) -> kvreplay and devicemodels -> kvbed.core, the
foundation, a package of its own: the lower rooms never import testbed. Importing any package has no side
effects: no environment variable changes and no file is touched (numba's kernel cache is set up at the first
compile, not on import).
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
    """Every absolute import of a file, function-level ones included (``from a import b`` also as ``a.b``)."""
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names if node.module in ("testbed", "kvbed")]
    return out


def _violations(pkg: str, allowed) -> list[str]:
    bad = []
    for path in sorted((ROOT / pkg).rglob("*.py")):
        for line, mod in _imports(path):
            if not allowed(mod):
                bad.append(f"{path.relative_to(ROOT)}:{line}: import {mod}")
    return bad


def _under(mod: str, pkg: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


def _is_upper(mod: str) -> bool:
    """The top room: testbed, and kvbed's entry points (kvbed.study) that stand on it."""
    return _under(mod, "testbed") or (_under(mod, "kvbed") and mod != "kvbed" and not _under(mod, "kvbed.core"))


@pytest.mark.parametrize("pkg", ["kvreplay", "devicemodels"])
def test_lower_rooms_never_import_testbed(pkg):
    assert _violations(pkg, lambda m: not _is_upper(m)) == []


def test_physics_knows_no_traces():
    assert _violations("devicemodels", lambda m: not _under(m, "kvreplay")) == []


def test_the_foundation_stands_on_the_standard_library_and_numpy():
    stdlib = set(sys.stdlib_module_names)
    ok = lambda m: m.split(".")[0] in stdlib or m.split(".")[0] == "numpy" or _under(m, "kvbed.core")  # noqa: E731
    assert _violations("kvbed/core", ok) == []


def test_the_kvbed_package_itself_imports_nothing():
    """``import kvbed.core`` runs kvbed/__init__.py first: it must not pull in the upper room."""
    assert _imports(ROOT / "kvbed" / "__init__.py") == []


def test_the_guest_agent_is_stdlib_and_pyzmq_only():
    stdlib = set(sys.stdlib_module_names)
    ok = lambda m: m.split(".")[0] in stdlib | {"zmq"} or m.startswith("kvreplay.agent")  # noqa: E731
    assert _violations("kvreplay/agent", ok) == []


def test_the_checker_sees_a_violation(tmp_path):
    """The walk finds an import of the upper room in any form, the foundation excepted."""
    (tmp_path / "m.py").write_text("import os\nfrom testbed.results import io_entry\nfrom testbed import plots\n"
                                   "from kvbed.core.errors import KvbedError\nfrom kvbed import study\n"
                                   "def f():\n    import testbed.cli\n")
    found = [m for _, m in _imports(tmp_path / "m.py") if _is_upper(m)]
    assert found == ["testbed.results", "testbed", "testbed.plots", "kvbed.study", "testbed.cli"]


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
