"""Numba kernels take their state as NamedTuples of arrays, not as dozens of positional arrays (issue 19).

A kernel with 20-30 positional arrays is easy to call with two of them swapped (same dtype, no error, wrong
figures). So no function decorated with numba's ``njit``/``jit`` or kvbed's ``kernel``/``njit``
(:mod:`devicemodels.jit`) in kvreplay/ or devicemodels/ may take more than ``MAX_PARAMS`` parameters; state
goes in NamedTuples defined (and documented) beside the kernel, as :mod:`devicemodels.ftl_state` does.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kvreplay", "devicemodels")
MAX_PARAMS = 16
JIT_DECORATORS = {"njit", "jit", "kernel"}  # numba's (numba.njit, nb.jit, ...) and devicemodels.jit's


def _decorator_name(node: ast.expr) -> str | None:
    """``njit`` for ``@njit``, ``@njit(nogil=True)``, ``@numba.njit``, ``@numba.njit(...)``."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _n_params(fn: ast.FunctionDef) -> int:
    a = fn.args
    return len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)


def find_kernels(source: str, filename: str = "<src>") -> list[tuple[str, int, str, int]]:
    """(file, line, name, parameter count) of every jit-decorated function in ``source`` (nested ones too)."""
    out = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                _decorator_name(d) in JIT_DECORATORS for d in node.decorator_list):
            out.append((filename, node.lineno, node.name, _n_params(node)))
    return out


def tree_kernels() -> list[tuple[str, int, str, int]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out += find_kernels(path.read_text(), path.relative_to(ROOT).as_posix())
    return out


def test_finder_sees_every_decorator_form():
    src = textwrap.dedent('''
        import numba
        from devicemodels.jit import kernel, njit

        @kernel
        def a(x, y): pass

        @kernel(inline="always")
        def b(x): pass

        @njit(nogil=True)
        def c(s1, s2, s3, *rest, k=0, **kw): pass

        @numba.njit
        def d(): pass

        @numba.jit(nopython=True)
        def e(x, /, y): pass

        @property
        def not_a_kernel(self): pass

        def plain(x): pass

        class C:
            @staticmethod
            @njit
            def f(x, y, z): pass
    ''')
    found = {name: n for _, _, name, n in find_kernels(src)}
    assert found == {"a": 2, "b": 1, "c": 6, "d": 0, "e": 2, "f": 3}


def test_finder_reports_an_oversized_kernel():
    src = "@kernel\ndef big(" + ", ".join(f"a{i}" for i in range(MAX_PARAMS + 1)) + "):\n    pass\n"
    assert find_kernels(src, "x.py") == [("x.py", 2, "big", MAX_PARAMS + 1)]


def test_finder_sees_the_tree_kernels():
    """Not vacuous: the tree has well over a hundred kernels, among them ones the rule is about."""
    found = tree_kernels()
    names = {(f, name) for f, _, name, _ in found}
    assert len(found) > 20, len(found)
    assert {("kvreplay/hints/predicted.py", "_pred_kernel"), ("devicemodels/cxl_ssd.py", "cache_pass"),
            ("kvreplay/layout/objtable.py", "ot_insert")} <= names


def test_no_kernel_takes_more_than_16_parameters():
    offenders = [f"{f}:{line} {name} ({n} parameters)" for f, line, name, n in tree_kernels() if n > MAX_PARAMS]
    assert not offenders, (f"kernels over {MAX_PARAMS} parameters (pass state as NamedTuples of arrays, "
                           "see devicemodels/ftl_state.py):\n  " + "\n  ".join(offenders))
