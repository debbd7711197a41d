"""Hint policies from outside kvbed: ``--hints module:Class``, ``--hints path/file.py:Class`` and the
``kvbed.hints`` entry-point group.

The registry (:mod:`kvreplay.hints.registry`) resolves them (:class:`kvbed.core.registry.Plugins`); this
module says what a plugin must be to be replayed: a concrete :class:`~kvreplay.hints.base.HintPolicy`
subclass stating what it may know (``knows``), whose ``Params`` is a frozen dataclass with a default for every
field and whose ``columns`` are trace columns. Anything else is refused in one line naming the spec and what is
missing. :mod:`kvreplay.hints.provenance` records the file defining a plugin and its sha256 (config.json's
``hint_source``) and refuses a rerun from config.json on other code.
:func:`kvreplay.hints.testing.check_online` then checks what a static check cannot: that an online plugin is
causal and gives well-formed classes.

A distribution declares its policies as::

    [project.entry-points."kvbed.hints"]
    lru-age = "my_package.policies:LruAge"

and ``kvbed replay --hints lru-age`` finds them.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

from kvbed.core.errors import KvbedError
from kvbed.core.registry import Plugins
from kvreplay import schema as S
from kvreplay.hints.base import HintPolicy

#: the entry-point group installed distributions declare hint policies in
GROUP = "kvbed.hints"


def check_policy_class(spec: str, obj: Any) -> None:
    """Refuse (KvbedError, one line) an object that is not a replayable hint policy."""
    def bad(what: str) -> KvbedError:
        return KvbedError(f"hint policy {spec!r}: {what}")

    if not (isinstance(obj, type) and issubclass(obj, HintPolicy)):
        raise bad(f"{obj!r} is not a subclass of kvreplay.hints.base.HintPolicy")
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(getattr(obj, "__abstractmethods__", ()))) or "?"
        raise bad(f"{obj.__name__} is abstract (it must define {missing})")
    knows = getattr(obj, "knows", None)
    if not isinstance(knows, str) or not knows.strip():
        raise bad(f"{obj.__name__} must say what it may know: a non-empty string class attribute `knows`")
    params = getattr(obj, "Params", None)
    if not (dataclasses.is_dataclass(params) and isinstance(params, type)
            and params.__dataclass_params__.frozen):  # type: ignore[attr-defined]
        raise bad(f"{obj.__name__}.Params must be a frozen dataclass")
    for fld in dataclasses.fields(params):
        if fld.init and fld.default is dataclasses.MISSING and fld.default_factory is dataclasses.MISSING:
            raise bad(f"{obj.__name__}.Params field {fld.name!r} has no default: every parameter needs one "
                      f"(param(default, help)), which --param and study axes then change")
    unknown = [c for c in getattr(obj, "columns", ()) if c not in S.COLUMNS]
    if unknown:
        raise bad(f"{obj.__name__}.columns names no trace column: {', '.join(map(str, unknown))} "
                  f"(columns: {', '.join(S.COLUMNS)})")


PLUGINS = Plugins(GROUP, check_policy_class)
