"""docs/development/architecture.md and extending.md name only things that exist, and extending.md lists
every registry in the code with the module that defines it (issue 19)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from kvbed.core.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "development"
PAGES = ["architecture.md", "extending.md"]
ROOMS = ("kvbed", "kvreplay", "devicemodels", "testbed")


def _code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def _is_path(token: str) -> bool:
    return "/" in token and " " not in token and "<" not in token and bool(re.search(r"(\.\w+|/)$", token))


def _resolve(dotted: str):
    """``a.b.C`` -> the object: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("page", PAGES)
def test_every_path_named_exists(page):
    text = (DOCS / page).read_text()
    paths = [t for t in _code_spans(text) if _is_path(t)]
    assert len(paths) > 20
    missing = []
    for p in paths:
        # a template such as kvreplay/hints/NAME.py: its directory must exist
        target = (ROOT / p).parent if "NAME" in p else ROOT / p
        if not target.exists():
            missing.append(p)
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not (DOCS / link).exists():
            missing.append(link)
    assert missing == []


@pytest.mark.parametrize("page", PAGES)
def test_every_dotted_name_imports(page):
    text = (DOCS / page).read_text()
    dotted = [t for t in _code_spans(text) if re.fullmatch(rf"(?:{'|'.join(ROOMS)})(?:\.[A-Za-z_]\w*)+", t)]
    assert dotted
    for name in dotted:
        _resolve(name)


@pytest.mark.parametrize("page", PAGES)
def test_names_given_with_a_file_are_defined_there(page):
    """``file.py`` (`A`, `B`): each of A, B is a top-level class or name of that file."""
    text = (DOCS / page).read_text()
    checked = 0
    for path, names in re.findall(r"`([\w/]+\.py)`\s+\(((?:`\w+`(?:,\s*)?)+)", text):
        tree = ast.parse((ROOT / path).read_text())
        defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        defined |= {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        for name in re.findall(r"`(\w+)`", names):
            assert name in defined, (path, name)
            checked += 1
    if page == "architecture.md":
        assert checked >= 10  # the kernel state tuples


def _registries_in_code() -> dict[int, tuple[str, Path]]:
    """id(registry) -> (its name, the file that makes it), for every ``NAME ... = Registry(...)`` in the rooms."""
    found = {}
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            for m in re.finditer(r"^([A-Z_]+)\s*(?::[^=\n]+)?=\s*Registry\(", path.read_text(), re.M):
                parts = path.relative_to(ROOT).with_suffix("").parts
                mod = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                reg = getattr(importlib.import_module(mod), m.group(1))
                assert isinstance(reg, Registry)
                found[id(reg)] = (m.group(1), path.relative_to(ROOT))
    return found


def _registry_table() -> list[tuple[str, str]]:
    text = (DOCS / "extending.md").read_text()
    section = text[text.index("## Every registry"):]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 5 and cells[1].startswith("`") and cells[2].startswith("`"):
            rows.append((cells[1].strip("`"), cells[2].strip("`")))
    return rows


def test_extending_lists_every_registry_with_the_module_that_defines_it():
    in_code = _registries_in_code()
    assert len(in_code) >= 17
    listed = {}
    for dotted, defined_in in _registry_table():
        reg = _resolve(dotted)
        assert isinstance(reg, Registry), dotted
        name, path = in_code[id(reg)]
        assert dotted.endswith("." + name)
        # the file itself, or its package (a registry may move between a package's modules)
        assert path == Path(defined_in) or (defined_in.endswith("/") and Path(defined_in) in path.parents), \
            (dotted, defined_in, path)
        listed[id(reg)] = dotted
    assert set(listed) == set(in_code), sorted(in_code[i][0] for i in set(in_code) - set(listed))


SECTIONS = {"A hint policy": "HINTS", "A device": "DEVICES", "An importer": "IMPORTERS",
            "A fault kind": "FAULTS", "A recovery contract": "CONTRACTS", "A GC victim policy": "GC_POLICIES"}


def test_each_extension_section_says_files_registration_and_test():
    text = (DOCS / "extending.md").read_text()
    for title, reg in SECTIONS.items():
        body = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
        assert "- Files:" in body and "- Registration:" in body and "- Test:" in body, title
        registration = body.split("- Registration:", 1)[1].split("- Test:", 1)[0]
        assert f"{reg}.register(" in registration, title
        tests = [t for t in _code_spans(body.split("- Test:", 1)[1]) if t.startswith("tests/")]
        assert tests, title
