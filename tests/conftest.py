"""Fixtures shared across the test tree: traces made once per session and handed out read-only.

A test that changes a trace copies it first; these are the inputs several test files replay as they are.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.support.cli import kvbed, ok
from tests.support.replay_fixtures import two_lifetimes


@pytest.fixture(scope="session")
def lifetimes_trace(tmp_path_factory) -> Callable[..., Path]:
    """``lifetimes_trace(n_objects, **kw)``: the two-lifetime trace of replay_fixtures, made once per arguments."""
    made: dict[tuple, Path] = {}
    root = tmp_path_factory.mktemp("lifetimes")

    def get(n_objects: int, **kw) -> Path:
        key = (n_objects, *sorted(kw.items()))
        if key not in made:
            made[key] = two_lifetimes(root / f"t{len(made)}.parquet", n_objects=n_objects, **kw)
        return made[key]

    return get


@pytest.fixture(scope="session")
def synth_trace(tmp_path_factory) -> Callable[[int], Path]:
    """``synth_trace(duration_s)``: `kvbed trace synth` with its defaults over that many seconds, made once."""
    made: dict[int, Path] = {}
    root = tmp_path_factory.mktemp("synth")

    def get(duration_s: int) -> Path:
        if duration_s not in made:
            out = root / f"synth-{duration_s}s.parquet"
            ok(kvbed("trace", "synth", "-o", out, "--duration-s", str(duration_s)))
            made[duration_s] = out
        return made[duration_s]

    return get


@pytest.fixture
def plugin_module(tmp_path, monkeypatch) -> Iterator[Callable[[str, str], Path]]:
    """``plugin_module(name, source)``: ``source`` written as NAME.py in a directory outside the repository
    (returned), importable as NAME; afterwards the module and every hint policy loaded as a plugin are forgotten."""
    from kvreplay.hints import HINTS

    names: list[str] = []

    def make(name: str, source: str) -> Path:
        (tmp_path / f"{name}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        names.append(name)
        return tmp_path

    yield make
    for name in names:
        sys.modules.pop(name, None)
    HINTS.forget_plugins()
