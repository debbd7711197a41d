"""The rooms' layering and the packages' import hygiene (issues 9 and 19): no import cycles either.

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


# ------------------------------------------------------------------------------------------ import cycles

PROJECT = ("testbed", "kvreplay", "devicemodels", "kvbed")


def _modules(root: Path, packages: tuple[str, ...]) -> dict[str, tuple[Path, bool]]:
    """Every module of ``packages`` under ``root`` by dotted name -> (file, is a package's __init__)."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _import_graph(root: Path, packages: tuple[str, ...] = PROJECT) -> dict[str, dict[str, int]]:
    """module -> {module of the project it imports: line of the first such import}. Every import anywhere in
    a file counts (function-level, under TYPE_CHECKING), absolute and relative; ``from pkg import name`` is
    ``pkg.name`` when that is a module, else ``pkg`` (a package's __init__ is the package)."""
    mods = _modules(root, packages)

    def owner(name: str) -> str | None:  # the module that defines ``name`` (a.b.C -> a.b)
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for mod, (path, is_pkg) in mods.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                dep = owner(t) if t.split(".")[0] in packages else None
                if dep and dep != mod:
                    edges[dep] = min(edges.get(dep, node.lineno), node.lineno)
        graph[mod] = edges
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            v, deps = work[-1]
            for w in deps:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return sorted(found)


def _cycle_report(graph: dict[str, dict[str, int]], cycles: list[list[str]]) -> str:
    lines = []
    for comp in cycles:
        lines.append(f"cycle of {len(comp)} modules:")
        lines += [f"  {a} (line {graph[a][b]}) -> {b}" for a in comp for b in sorted(graph[a]) if b in comp]
    return "\n".join(lines)


def test_no_two_modules_import_each_other():
    """No import cycle among the project's modules, however long, function-level imports included: a module
    that needs another's code and is needed by it means code sits in the wrong module."""
    graph = _import_graph(ROOT)
    assert len(graph) > 150 and "kvreplay.tiers.state" in graph["kvreplay.tiers.sim"]  # the walk found the project
    cycles = _cycles(graph)
    assert cycles == [], "\n" + _cycle_report(graph, cycles)


def test_the_checker_sees_a_cycle(tmp_path):
    """A two-module cycle made of a function-level relative import and a ``from pkg import module``, a
    three-module one through a package's __init__, and modules that only import down: exactly the cycles
    are reported."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import os\n\ndef f():\n    from . import b\n")
    (pkg / "b.py").write_text("from pkg import a, c\n")
    (pkg / "c.py").write_text("X = 1\n")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.x import Y\n")
    (pkg / "sub" / "x.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..sub.y import Z\nY = 1\n")
    (pkg / "sub" / "y.py").write_text("from pkg.sub import Y\nZ = Y\n")
    graph = _import_graph(tmp_path, ("pkg",))
    assert graph["pkg.a"] == {"pkg.b": 4}
    assert graph["pkg.b"] == {"pkg.a": 1, "pkg.c": 1}
    assert graph["pkg.sub.x"] == {"pkg.sub.y": 3}
    assert _cycles(graph) == [["pkg.a", "pkg.b"], ["pkg.sub", "pkg.sub.x", "pkg.sub.y"]]
    report = _cycle_report(graph, _cycles(graph))
    assert "pkg.a (line 4) -> pkg.b" in report and "pkg.sub.y (line 1) -> pkg.sub" in report


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


def test_the_test_tree_shares_through_support_only():
    """Test files import helpers from tests.support, never from another test file; every directory of the tree is
    a package, so two test files of one name in different rooms do not collide."""
    tests = ROOT / "tests"
    bad = [f"{p.relative_to(ROOT)}:{line}: import {mod}" for p in sorted(tests.rglob("*.py"))
           for line, mod in _imports(p) if mod.rsplit(".", 1)[-1].startswith("test_")
           or _under(mod, "tests") and not _under(mod, "tests.support")]
    assert bad == []
    dirs = {p.parent for p in tests.rglob("test_*.py")} | {tests / "support"}
    assert sorted(str(d.relative_to(ROOT)) for d in dirs if not (d / "__init__.py").exists()) == []
    assert len(dirs) >= 10  # the tree: core, devicemodels, kvreplay/..., testbed/..., golden
