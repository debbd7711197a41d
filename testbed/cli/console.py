"""The rich consoles every command prints through, and the tables several commands print."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from rich.table import Table


def console(err: bool = False) -> Console:
    """stdout (or stderr) console; files and pipes get full-width tables, not an 80-column squeeze.

    The stream is looked up at write time, so click's test runner captures it.
    """
    con = Console(stderr=err)
    if not con.is_terminal:
        con.width = max(con.width, 160)
    return con


def print_whole(con: Console, table: Any) -> None:
    """Print a table with no figure cut short: a file or a pipe gets it at its full width, however wide (a
    terminal too narrow for it folds the cells of columns made with ``overflow="fold"``)."""
    if not con.is_terminal:
        con.width = max(con.width, con.measure(table, options=con.options.update(max_width=1 << 16)).maximum)
    con.print(table)


def facts_table(facts: dict[str, Any], title: str = "source facts") -> Table:
    """A two-column table of facts (a source's or a capture's): shares as percentages, counts with separators."""
    from rich.table import Table  # here: the commands that print no table do not import it

    t = Table(title=title, title_justify="left", show_header=False)
    t.add_column("fact")
    t.add_column("value", justify="right")
    for k, v in facts.items():
        if isinstance(v, float):
            v = f"{100 * v:.1f}%" if k.endswith("share") else f"{v:,.3f}"
        elif isinstance(v, int):
            v = f"{v:,}"
        elif isinstance(v, dict):
            v = ", ".join(f"{a}={b}" for a, b in v.items())
        t.add_row(k.replace("_", " "), str(v))
    return t
