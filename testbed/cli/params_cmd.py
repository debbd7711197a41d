"""``kvbed params``: every parameter set, with defaults, units, choices and meaning (from the dataclasses);
one key's entry in every set that has it; and the values a finished run used, beside the defaults."""

from __future__ import annotations

import click

from kvbed.core.errors import KvbedError
from testbed.paramdocs import auto_sized


@click.command("params")
@click.argument("names", metavar="[SET|KEY|RUN_DIR]...", nargs=-1)
@click.option("--markdown", is_flag=True, help="print Markdown tables (the README's parameter section)")
@click.option("--presets", is_flag=True, help="print the device parameter presets (preset=NAME): what each sets "
                                               "and where the value comes from")
def params(names: tuple[str, ...], markdown: bool, presets: bool) -> None:
    """Parameters by SET (all of them when none is named; each table's title is its set's name): the keys
    of --param, config.json and study axes, with defaults, units or choices, and meaning. A KEY (e.g.
    error_rate, or fdp.ru_bytes) shows that key in every set that has it; a RUN_DIR shows the values the run
    used beside the defaults, marking those the replay sized itself.

    Keys marked "replay: auto" are sized by `kvbed replay` from the trace unless given (1 MiB pages,
    full-stripe reclaim units and zones, capacity = peak live data / fill_ratio, dies for the write rate)."""
    from testbed.cli.console import console
    from testbed.paramdocs import markdown as md
    from testbed.paramdocs import parameter_sets
    from testbed.runparams import is_run_dir

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
    spelled = {n: _set_name(n, known) for n in names}  # a set by either spelling of its group (hint.X, hints.X)
    names = tuple(spelled[n] or n for n in names)
    sets = [n for n in names if n in known]
    runs = [n for n in names if n not in known and is_run_dir(n)]
    keys = [n for n in names if n not in known and n not in runs]
    for k in keys:
        if not _key_sets(k, known):
            raise KvbedError(_unknown(k, known))
    if markdown:
        if keys or runs:
            raise KvbedError("--markdown prints parameter sets; give SET names only")
        click.echo(md(sets or None), nl=False)
        return
    con = console(False)
    for n in names:
        if n in sets:
            _print_set(con, n, known)
            also = [s for s, _ in _key_sets(n, known)]
            if also:  # a set's name that is also a key: the set is shown, and where the key is said
                click.echo(f"{n} is also a key of {', '.join(also)}: `kvbed params {also[0]}.{n}` shows it")
        elif n in runs:
            _print_run(con, n)
        else:
            _print_key(n, known)
    if not names:
        for n in known:
            _print_set(con, n, known)


def _spellings(name: str) -> set[str]:
    """Every spelling of a set's name or a key's set prefix, its first part by each name of its group
    (:data:`kvbed.core.params.GROUP_ALIASES`: ``hint.hotness`` and ``hints.hotness`` are one set)."""
    from kvbed.core.params import GROUP_ALIASES, group_of

    first, dot, rest = name.partition(".")
    group = group_of(first)
    return {f + dot + rest for f in {first, group, *(a for a, g in GROUP_ALIASES.items() if g == group)}}


def _set_name(name: str, known: dict) -> str | None:
    """The set ``name`` spells (None: no set)."""
    return next((s for s in sorted(_spellings(name)) if s in known), None)


def _key_sets(key: str, known: dict) -> list[tuple[str, dict]]:
    """``(set name, describe row)`` of every set with field ``key`` (``set.key`` picks one set; ``hint.key``
    or ``hints.key``, as --param takes it, every hint policy's set with that key)."""
    from kvbed.core.params import describe

    group, dot, field = key.rpartition(".")
    field = field.replace("-", "_")
    prefixes = _spellings(group) if dot else set()
    out = []
    for name, (cls, _) in known.items():
        head, _, tail = name.partition(".")
        if dot and not prefixes & {name, tail, head}:
            continue
        out += [(name, r) for r in describe(cls) if r["name"] == field]
    return out


def _unknown(key: str, known: dict) -> str:
    from kvbed.core.params import describe, did_you_mean, near_matches

    every = sorted({r["name"] for cls, _ in known.values() for r in describe(cls)} | set(known))
    hint = did_you_mean(near_matches(key.rpartition(".")[2], every))
    return f"unknown parameter set or key {key!r}{hint}; not a run directory either (`kvbed params` lists every set)"


def _print_set(con, name: str, known: dict) -> None:
    from rich.table import Table

    from kvbed.core.params import describe

    cls, where = known[name]
    auto = auto_sized(cls)
    t = Table(title=f"{name}: {where}", title_justify="left")
    for c in ("key", "default", "unit / choices", "meaning"):
        t.add_column(c, overflow="fold")
    for r in describe(cls):
        default = r["default"] + (" (replay: auto)" if r["name"] in auto else "")
        t.add_row(r["name"] + ("*" if r["cli"] else ""), default,
                  ", ".join(r["choices"]) if r["choices"] else (r["unit"] or ""), r["help"])
    if auto:
        t.caption = ("replay: auto = `kvbed replay` sizes it from the trace unless given: "
                     + "; ".join(f"{k}: {how}" for k, how in auto.items()))
        t.caption_justify = "left"
    con.print(t)


def _print_key(key: str, known: dict) -> None:
    for name, r in _key_sets(key, known):
        cls, where = known[name]
        click.echo(f"{r['name']}  (set {name}: {where})")
        default = r["default"] if r["default"] != "" else '""'
        click.echo(f"  default: {default}")
        if r["choices"]:
            click.echo(f"  choices: {', '.join(r['choices'])}")
        click.echo(f"  unit:    {r['unit'] or '-'}")
        click.echo(f"  meaning: {r['help']}")
        how = auto_sized(cls).get(r["name"])
        if how:
            click.echo(f"  kvbed replay sizes it unless given: {how} (`kvbed params RUN_DIR` shows a run's value)")
        if r["cli"]:
            click.echo(f"  also an option: --{r['name'].replace('_', '-')}")


def _print_run(con, run_dir: str) -> None:
    from rich.table import Table

    from testbed.runparams import load_config, run_groups

    for g in run_groups(load_config(run_dir)):
        t = Table(title=f"{run_dir}: {g['title']}", title_justify="left")
        for c in ("key", "used", "default", "from"):
            t.add_column(c, overflow="fold")
        for r in g["rows"]:
            src = f"auto-sized: {r['how']}" if r["source"] == "auto-sized" else r["source"]
            style = {"auto-sized": "yellow", "given": "bold"}.get(r["source"])
            t.add_row(r["key"], r["used"], r["default"], src, style=style)
        con.print(t)
