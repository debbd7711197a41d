"""``kvbed params``: every parameter set, with defaults, units, choices and meaning (from the dataclasses)."""

from __future__ import annotations

import click

from kvbed.core.errors import KvbedError


@click.command("params")
@click.argument("sets", metavar="[SET]...", nargs=-1)
@click.option("--markdown", is_flag=True, help="print Markdown tables (the README's parameter section)")
@click.option("--presets", is_flag=True, help="print the device parameter presets (preset=NAME): what each sets "
                                               "and where the value comes from")
def params(sets: tuple[str, ...], markdown: bool, presets: bool) -> None:
    """Parameters by SET (all of them when none is named; each table's title is its set's name): the keys
    of --param, config.json and study axes, with defaults, units or choices, and meaning."""
    from rich.table import Table

    from testbed.cli.console import console
    from kvbed.core.params import describe
    from testbed.paramdocs import markdown as md
    from testbed.paramdocs import parameter_sets

    if presets:
        from devicemodels import PRESETS
        from kvbed.core.params import format_value

        for name in PRESETS.names():
            pr = PRESETS.get(name)
            click.echo(f"{name}: {pr.summary}")
            for k, v in pr.values.items():
                click.echo(f"  {k}={format_value(k, v)}    # {pr.sources.get(k, '')}")
        return
    known = parameter_sets()
    for s in sets:
        if s not in known:
            raise KvbedError(f"unknown parameter set {s!r} (choose from: {', '.join(known)})")
    names = list(sets) or list(known)
    if markdown:
        click.echo(md(names), nl=False)
        return
    con = console(False)
    for name in names:
        cls, where = known[name]
        t = Table(title=f"{name}: {where}", title_justify="left")
        for c in ("key", "default", "unit / choices", "meaning"):
            t.add_column(c, overflow="fold")
        for r in describe(cls):
            t.add_row(r["name"] + ("*" if r["cli"] else ""), r["default"],
                      ", ".join(r["choices"]) if r["choices"] else (r["unit"] or ""), r["help"])
        con.print(t)
