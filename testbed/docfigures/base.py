"""Figures quoted in the README and docs, generated from saved runs (never typed by hand): the machinery.

A *figure set* (one file here, one registration in ``FIGURE_SETS``) names the kvbed commands that produce
it, extracts its figures from what those commands saved, and renders one or more Markdown blocks from the
figures. The figures of each set are committed as ``docs/figures/<name>.json`` together with the commands
and the kvbed version and commit that ran them; the documents hold the rendered blocks between markers::

    <!-- figures:<set>/<block> -->
    ...rendered text...
    <!-- /figures -->

``scripts/doc_figures.py run SET`` runs the commands and saves the figures, ``render`` rewrites every block
from the saved figures, ``check`` says which blocks are stale. Tests check every block against its saved
figures, and re-run the deterministic sets to check the saved figures against what the code gives now.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from kvbed.core.atomicio import write_json
from kvbed.core.errors import KvbedError
from kvbed.core.registry import Registry
from kvbed.core.version import __version__

ROOT = Path(__file__).resolve().parents[2]
FIGURES_DIR = ROOT / "docs" / "figures"
MOONCAKE = (ROOT / "../shared/data/traces/mooncake/conversation_trace.jsonl").resolve()
#: the documents whose blocks are rendered (the README and every Markdown file under docs/)
BLOCK_RE = re.compile(r"<!-- figures:(?P<set>[a-z0-9-]+)/(?P<block>[a-z0-9-]+) -->\n(?P<body>.*?)<!-- /figures -->",
                      re.S)


class FigureSet:
    """Commands (argv after ``kvbed``, with ``{w}`` for the work directory and ``{mc}`` for the Mooncake
    trace), the figures extracted from their outputs, and the blocks rendered from the figures."""

    name: str
    summary: str = ""
    #: the figures are a pure function of the code and the inputs (no wall-clock value): tests re-derive them
    deterministic: bool = True
    needs_mooncake: bool = False
    commands: tuple[tuple[str, ...], ...] = ()

    def argv(self, work: Path) -> list[list[str]]:
        return [[a.format(w=work, mc=MOONCAKE) for a in c] for c in self.commands]

    def run(self, work: Path) -> None:
        """Produce the outputs :meth:`extract` reads: the kvbed commands, in-process, in order."""
        run_commands(self, work)

    def saved_commands(self) -> list[str]:
        return [" ".join(["kvbed", *c]) for c in self.commands]

    def extract(self, work: Path) -> dict[str, Any]:
        raise NotImplementedError

    def blocks(self, fig: dict[str, Any]) -> dict[str, str]:
        raise NotImplementedError


class BenchFigureSet(FigureSet):
    """Figures of a benchmark script (wall-clock speeds among them, so never re-derived by a test): the script
    runs with ``args`` (``{w}``: the work directory) and writes what :meth:`extract` reads."""

    deterministic = False
    script: str = ""
    args: tuple[str, ...] = ()

    def run(self, work: Path) -> None:
        import os
        import sys

        if self.needs_mooncake and not MOONCAKE.exists():
            raise KvbedError(f"figure set {self.name!r} needs the Mooncake trace", where=str(MOONCAKE))
        work.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, str(ROOT / self.script), *(a.format(w=work) for a in self.args)]
        subprocess.run(argv, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})

    def saved_commands(self) -> list[str]:
        return [" ".join(["python", self.script, *self.args])]


FIGURE_SETS: Registry[type[FigureSet]] = Registry("figure set", summary_attr="summary")


def saved_path(name: str) -> Path:
    return FIGURES_DIR / f"{name}.json"


def load_saved(name: str) -> dict[str, Any]:
    p = saved_path(name)
    if not p.exists():
        raise KvbedError(f"no saved figures for {name!r} (run: python scripts/doc_figures.py run {name})", where=str(p))
    return json.loads(p.read_text())


def run_commands(fs: FigureSet, work: Path) -> None:
    """Run the set's commands in-process, in order, into ``work``."""
    from click.testing import CliRunner

    from testbed.cli import cli

    if fs.needs_mooncake and not MOONCAKE.exists():
        raise KvbedError(f"figure set {fs.name!r} needs the Mooncake trace", where=str(MOONCAKE))
    work.mkdir(parents=True, exist_ok=True)
    for argv in fs.argv(work):
        res = CliRunner().invoke(cli, argv)
        if res.exit_code != 0:
            raise KvbedError(f"figure set {fs.name!r}: `kvbed {' '.join(argv)}` exited {res.exit_code}: "
                             f"{(res.stderr or res.output).strip()[-400:]}")


def derive(name: str, work: Path) -> dict[str, Any]:
    """Run set ``name`` into ``work`` and return its figures (JSON-normalised)."""
    fs = FIGURE_SETS.get(name)()
    fs.run(work)
    return json.loads(json.dumps(fs.extract(work)))


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def save(name: str, figures: dict[str, Any]) -> Path:
    fs = FIGURE_SETS.get(name)()
    doc = {"set": name, "summary": fs.summary, "kvbed_version": __version__, "commit": _commit(),
           "commands": fs.saved_commands(), "figures": figures}
    write_json(saved_path(name), doc)
    return saved_path(name)


def documents() -> list[Path]:
    docs = sorted((ROOT / "docs").rglob("*.md")) if (ROOT / "docs").exists() else []
    return [ROOT / "README.md", *docs]


def rendered(name: str) -> dict[str, str]:
    """Every block of set ``name`` rendered from its saved figures (each ending in a newline)."""
    fs = FIGURE_SETS.get(name)()
    out = fs.blocks(load_saved(name)["figures"])
    return {k: v if v.endswith("\n") else v + "\n" for k, v in out.items()}


def blocks_in(text: str) -> list[tuple[str, str, str]]:
    """(set, block, body) of every marked block of a document."""
    return [(m["set"], m["block"], m["body"]) for m in BLOCK_RE.finditer(text)]


def render_text(text: str, where: str) -> str:
    """``text`` with every marked block replaced by its rendering from the saved figures."""
    cache: dict[str, dict[str, str]] = {}

    def sub(m: re.Match) -> str:
        name, block = m["set"], m["block"]
        if name not in cache:
            cache[name] = rendered(name)
        if block not in cache[name]:
            raise KvbedError(f"figure set {name!r} has no block {block!r} (it has: {', '.join(cache[name])})",
                             where=where)
        return f"<!-- figures:{name}/{block} -->\n{cache[name][block]}<!-- /figures -->"

    return BLOCK_RE.sub(sub, text)

