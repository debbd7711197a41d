"""The rich consoles every command prints through."""

from rich.console import Console


def console(err: bool = False) -> Console:
    """stdout (or stderr) console; files and pipes get full-width tables, not an 80-column squeeze.

    The stream is looked up at write time, so click's test runner captures it.
    """
    con = Console(stderr=err)
    if not con.is_terminal:
        con.width = max(con.width, 160)
    return con
