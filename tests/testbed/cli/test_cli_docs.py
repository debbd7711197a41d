"""docs/reference/cli.md is what testbed/clidocs.py makes from the click command tree now (regenerate with
``python scripts/reference_docs.py``), and the generator shows every command and option."""

from __future__ import annotations

import subprocess
import sys

import click

from testbed.cli import cli
from testbed.clidocs import _escape, markdown
from tests.support.paths import ROOT

PAGE = ROOT / "docs" / "reference" / "cli.md"


def _commands(cmd: click.Command, ctx: click.Context, path: list[str]):
    yield path, cmd, ctx
    if isinstance(cmd, click.Group):
        for n in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, n)
            yield from _commands(sub, click.Context(sub, info_name=n, parent=ctx), [*path, n])


def test_the_page_is_in_step_with_the_code():
    assert PAGE.read_text() == markdown(), "docs/reference/cli.md is stale: python scripts/reference_docs.py"


def test_every_command_and_option_is_on_the_page():
    page = markdown()
    seen = 0
    for path, cmd, ctx in _commands(cli, click.Context(cli, info_name="kvbed"), ["kvbed"]):
        section = page.split(f"\n## {' '.join(path)}\n", 1)[1].split("\n## ", 1)[0]
        for p in cmd.get_params(ctx):
            if isinstance(p, click.Option) and not p.hidden and p is not cmd.get_help_option(ctx):
                for opt in p.opts:
                    assert f"`{opt}`" in section, (path, opt)
                    seen += 1
    assert seen > 100
    # choices and defaults as --help shows them
    replay = page.split("\n## kvbed replay\n", 1)[1].split("\n## ", 1)[0]
    assert "`--device` [conv\\|cxl\\|cxl-ssd\\|dram\\|fdp\\|zns]" in replay and "[default: fdp]" in replay


def test_markup_is_escaped_outside_code_spans():
    assert _escape("a <b> | `x|y` `k_v` 2*3") == "a &lt;b&gt; \\| x\\|y `k_v` 2\\*3"


def test_the_regeneration_command_finds_nothing_stale():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "reference_docs.py"), "--check"],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
