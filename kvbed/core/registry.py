"""Registries for extension points (devices, GC victim policies, hint policies, importers, layouts, ...).

Adding an extension is one file with one ``@REGISTRY.register("name")`` decorator, which also sets the
class's ``name`` (so the name is written once). Names are lowercase; lookups of unknown names raise
KvbedError listing the choices.

Each entry also has a one-line summary (``summary(name)``), so CLI help and docs list the entries from the
registry instead of keeping their own lists: the attribute ``summary_attr`` names, else the entry's own
docstring, else the docstring of the module that defines it when that module is the entry's own file (its
docstring's first paragraph names the entry in double backquotes, as ``"``oracle``: ..."``: the text after
the name).
"""

from __future__ import annotations

import sys
from typing import Callable, Generic, Iterator, TypeVar

from kvbed.core.errors import KvbedError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, summary_attr: str | None = None):
        self.kind = kind
        #: the attribute of an entry holding its one-line summary (None: its docstring)
        self.summary_attr = summary_attr
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        if name != name.lower() or not name:
            raise ValueError(f"{self.kind} name must be lowercase and non-empty: {name!r}")

        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            if isinstance(obj, type):
                obj.name = name
            elif getattr(obj, "name", name) != name:
                raise ValueError(f"{self.kind} {obj.name!r} registered as {name!r}")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name.lower()]
        except KeyError:
            raise KvbedError(
                f"unknown {self.kind} {name!r} (choose from: {', '.join(sorted(self._items))})"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def summary(self, name: str) -> str:
        """One line saying what entry ``name`` is ("" when it documents nothing)."""
        name = name.lower()
        obj = self.get(name)
        if self.summary_attr is not None:
            return _one_line(str(getattr(obj, self.summary_attr, "") or ""))
        if not (isinstance(obj, type) or callable(obj) and hasattr(obj, "__code__")):
            return ""  # an instance: its __doc__ is its class's, not its own
        own = obj.__dict__.get("__doc__") if isinstance(obj, type) else obj.__doc__
        if own and own.strip():
            return _one_line(own)
        mod = sys.modules.get(getattr(obj, "__module__", "") or "")
        doc = (getattr(mod, "__doc__", None) or "").strip()
        tag = f"``{name}``"
        first = _one_line(doc)
        if tag not in first:
            return ""  # a module of several entries: its docstring is about none of them alone
        return first.partition(tag)[2].lstrip(":").strip() or first

    def summaries(self) -> dict[str, str]:
        """name -> one-line summary, sorted by name."""
        return {n: self.summary(n) for n in self.names()}

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def _one_line(doc: str) -> str:
    """The first paragraph of a docstring, on one line."""
    para = doc.strip().split("\n\n", 1)[0]
    return " ".join(para.split())
