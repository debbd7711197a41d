"""Figures quoted in the README and docs come from saved runs (testbed/docfigures, docs/figures/*.json): every
marked block is what its saved figures render to, and the saved figures are what the code gives now."""

from __future__ import annotations

import json

import pytest

from testbed.docfigures import FIGURE_SETS
from testbed.docfigures import base


def _leaves(x, path=""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, x


def moved(saved, now) -> list[str]:
    """Each figure that differs, as ``path: saved -> now`` (a figure only on one side too)."""
    a, b = dict(_leaves(saved)), dict(_leaves(now))
    return [f"{k}: {a.get(k, '<absent>')} -> {b.get(k, '<absent>')}" for k in sorted(a.keys() | b.keys())
            if a.get(k, object()) != b.get(k, object())]


def test_every_block_is_rendered_from_its_saved_figures():
    for doc in base.documents():
        text = doc.read_text()
        assert base.render_text(text, str(doc)) == text, (
            f"{doc.name}: a figures block differs from docs/figures (python scripts/doc_figures.py render)")


def test_every_set_is_saved_and_quoted_and_every_block_names_a_set():
    quoted = {s for d in base.documents() for s, _, _ in base.blocks_in(d.read_text())}
    assert quoted <= set(FIGURE_SETS.names())
    for name in FIGURE_SETS.names():
        assert name in quoted, f"figure set {name} is quoted nowhere"
        saved = base.load_saved(name)
        fs = FIGURE_SETS.get(name)()
        assert saved["commands"] == fs.saved_commands(), (
            f"{name}: its commands changed since its figures were saved (python scripts/doc_figures.py run {name})")


def test_moved_names_each_figure():
    assert moved({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 3], "c": 0}) == ["b[1]: 2 -> 3", "c: <absent> -> 0"]


@pytest.mark.parametrize("name", [n for n in FIGURE_SETS.names() if FIGURE_SETS.get(n).deterministic])
def test_saved_figures_are_what_the_code_gives(name, tmp_path):
    if FIGURE_SETS.get(name).needs_mooncake and not base.MOONCAKE.exists():
        pytest.skip(f"{base.MOONCAKE} not present")
    now = base.derive(name, tmp_path)
    saved = base.load_saved(name)["figures"]
    diff = moved(saved, now)
    assert not diff, (f"{name}: figures moved (if on purpose: python scripts/doc_figures.py run {name} && "
                      f"python scripts/doc_figures.py render):\n" + "\n".join(diff[:40]))
    assert json.dumps(now, sort_keys=True) == json.dumps(saved, sort_keys=True)
