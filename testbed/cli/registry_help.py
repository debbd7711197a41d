"""CLI choices and help texts that name a registry's entries, read from the registry when they are needed.

A name list typed into a help string drifts as soon as someone registers a policy; one read from the
registry at import time makes ``import testbed.cli.X`` import every policy. So the options here hold only
where the names live (``"kvreplay.hints:HINTS"``, the import users use) and read them when click shows
help, completes a word or checks a value:

- :class:`LazyChoice` - a ``click.Choice`` whose choices are a registry's names (or any constant tuple);
- :class:`LazyHelpOption` - an option whose help has ``{placeholder}``s filled when help is shown
  (``help="... {names} ...", lazy_help={"names": names("kvreplay.faults:FAULTS")}``);
- :class:`RegistryEpilogCommand` - a command whose help ends with a registry's entries and summaries.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Callable

import click


def resolve(spec: str) -> Any:
    """``"package.module:ATTR"`` -> that object (importing the module, which registers its entries)."""
    mod, _, attr = spec.partition(":")
    return getattr(importlib.import_module(mod), attr)


def entry_names(spec: str) -> list[str]:
    """A registry's names (sorted), a mapping's keys or a tuple's items, in their own order."""
    obj = resolve(spec)
    if hasattr(obj, "names") and callable(obj.names):
        return list(obj.names())
    return [str(x) for x in obj]


def names(spec: str) -> Callable[[], str]:
    """For ``lazy_help``: ``"a, b, c"``; an entry point that does not load is listed as ``name (broken)``
    (``kvbed params`` says why)."""
    def text() -> str:
        obj = resolve(spec)
        broken = getattr(obj, "load_error", lambda name: None)
        return ", ".join(n + (" (broken)" if broken(n) else "") for n in entry_names(spec))

    return text


def pairs(spec: str) -> Callable[[], str]:
    """For ``lazy_help``: a mapping as ``"k1=v1, k2=v2"``."""

    def text() -> str:
        obj: Mapping[str, Any] = resolve(spec)
        return ", ".join(f"{k}={v}" for k, v in obj.items())

    return text


class LazyChoice(click.Choice):
    """``click.Choice`` over ``entry_names(spec)``: the same metavar, completion and usage error as a fixed
    Choice, but the registry is imported only when a value is checked or help is shown."""

    def __init__(self, spec: str, case_sensitive: bool = True):  # Choice.__init__ would freeze the names
        self.spec = spec
        self.case_sensitive = case_sensitive

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(entry_names(self.spec))

    def __repr__(self) -> str:
        return f"LazyChoice({self.spec!r})"


class LazyHelpOption(click.Option):
    """An option whose help text's ``{key}`` placeholders are filled by ``lazy_help[key]()`` when read."""

    def __init__(self, *args: Any, lazy_help: dict[str, Callable[[], str]], **kwargs: Any):
        self.lazy_help = lazy_help
        super().__init__(*args, **kwargs)

    @property
    def help(self) -> str | None:  # type: ignore[override]
        text = self._help_template
        if text is None:
            return None
        for key, fill in self.lazy_help.items():
            if "{" + key + "}" in text:
                text = text.replace("{" + key + "}", fill())
        return text

    @help.setter
    def help(self, value: str | None) -> None:
        self._help_template = value


class RegistryEpilogCommand(click.Command):
    """A command whose help ends with a section listing a registry's entries with their summaries:
    ``registry_epilog=("FORMAT", "kvreplay.importers:IMPORTERS")``."""

    def __init__(self, *args: Any, registry_epilog: tuple[str, str], **kwargs: Any):
        self.registry_epilog = registry_epilog
        super().__init__(*args, **kwargs)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        title, spec = self.registry_epilog
        reg = resolve(spec)
        with formatter.section(title):
            formatter.write_dl([(n, reg.summary(n)) for n in reg.names()])
        super().format_epilog(ctx, formatter)


def markdown_table(spec: str, header: tuple[str, str], attr: str | None = None) -> str:
    """A registry as a two-column Markdown table: name and its summary (or its attribute ``attr``), for the
    README blocks generated from registries."""
    reg = resolve(spec)
    rows = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    for n in reg.names():
        text = getattr(reg.get(n), attr) if attr else reg.summary(n)
        rows.append(f"| {n} | {' '.join(str(text).split()).replace('|', '/')} |")
    return "\n".join(rows) + "\n"
