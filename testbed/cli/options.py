"""Options several commands share, declared once so that they are spelled the same everywhere."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import click

from testbed.cli.registry_help import LazyHelpOption


def param_option(help: str) -> Callable:
    """``-p/--param K=V`` (repeatable): the one way every command takes parameters. ``help`` says which
    parameters this command takes; the pointer to ``kvbed params KEY`` is added here."""
    return click.option("-p", "--param", "params", multiple=True, metavar="K=V",
                        help=f"{help} (repeatable; `kvbed params KEY` explains a key)")


def field_option(fld: dataclasses.Field, default_text: str, *, name: str | None = None, **kwargs: Any) -> Callable:
    """The ``--field-name`` option of a parameter field marked for the CLI: its help is the field's, with its
    choices (read when help is shown, so a registry is imported only then) and ``default_text``."""
    from kvbed.core.params import choices_of

    help_ = fld.metadata.get("help", "")
    lazy = {}
    if "choices" in fld.metadata:
        help_ += " (one of: {choices})"
        lazy["choices"] = lambda: ", ".join(choices_of(fld) or ())
    return click.option(name or "--" + fld.name.replace("_", "-"), fld.name, cls=LazyHelpOption, lazy_help=lazy,
                        help=f"{help_} [default: {default_text}]", **kwargs)
