"""Registries for extension points (devices, GC victim policies, hint policies, importers, layouts, ...).

Adding an extension is one file with one ``@REGISTRY.register("name")`` decorator, which also sets the
class's ``name`` (so the name is written once). Names are lowercase; lookups of unknown names raise
KvbedError listing the choices.

Each entry also has a one-line summary (``summary(name)``), so CLI help and docs list the entries from the
registry instead of keeping their own lists: the attribute ``summary_attr`` names, else the entry's own
docstring, else the docstring of the module that defines it when that module is the entry's own file (its
docstring's first paragraph names the entry in double backquotes, as ``"``oracle``: ..."``: the text after
the name).

A registry may also take entries from outside the package (``plugins=Plugins(group, check)``): a spec
``module:Attr`` or ``path/to/file.py:Attr`` names an object to import, and the entry points of ``group``
(``[project.entry-points."group"]`` of an installed distribution) are entries by their names. ``get``
resolves both, ``names`` lists the entry points beside the registered entries, and ``check`` refuses an
object that is not a fit entry (one line, as every other refusal).

Entry points are loaded lazily, one at a time when named: one that cannot load (its distribution is broken)
fails only when it is used, in one line, and listings say it is broken (``load_error``, ``summary``) instead
of failing. Registered names win over entry points: an entry point named like a registered entry is never
loaded by that name; the first lookup of the name warns once on stderr and says the ``module:Class`` spec
that reaches the plugin (``shadowed``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, TypeVar

from kvbed.core.errors import KvbedError

T = TypeVar("T")


@dataclass(frozen=True)
class Plugins:
    """Where a registry finds entries it does not hold."""

    #: the entry-point group of installed distributions (e.g. ``kvbed.hints``)
    group: str
    #: ``check(spec, obj)`` raises KvbedError (one line) when ``obj`` is not a fit entry
    check: Callable[[str, Any], None] | None = None


def is_spec(name: str) -> bool:
    """``module:Attr`` or ``file.py:Attr`` (a name of a registered entry has no colon)."""
    return ":" in name


def _is_path(target: str) -> bool:
    """The module part of a spec names a file (``path/file.py``), not an importable module."""
    return target.endswith(".py") or "/" in target or "\\" in target


def canonical_spec(spec: str) -> str:
    """``spec`` as it names the same object from any working directory: a file's path made absolute
    (``./my_hints.py:C`` -> ``/home/me/my_hints.py:C``); a module spec as given."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr or not _is_path(target):
        return spec
    return f"{Path(target).expanduser().resolve()}:{attr}"


def load_spec(spec: str, kind: str = "entry") -> Any:
    """The object ``module:Attr`` or ``path/file.py:Attr`` names (dotted Attr allowed); KvbedError (one line)
    naming what failed otherwise."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise KvbedError(f"{kind} {spec!r}: expected module:Class or path/file.py:Class")
    try:
        if _is_path(target):
            path = Path(target).expanduser()
            if not path.is_file():
                raise KvbedError(f"{kind} {spec!r}: no such file {target!r}")
            modname = "kvbed_plugin_" + re.sub(r"\W", "_", str(path.resolve()))
            mod = sys.modules.get(modname)
            if mod is None:
                loader = importlib.util.spec_from_file_location(modname, path)
                if loader is None or loader.loader is None:
                    raise KvbedError(f"{kind} {spec!r}: {target!r} is not a Python file")
                mod = importlib.util.module_from_spec(loader)
                sys.modules[modname] = mod  # dataclasses and pickling look their module up here
                try:
                    loader.loader.exec_module(mod)
                except BaseException:
                    del sys.modules[modname]
                    raise
        else:
            mod = importlib.import_module(target)
    except KvbedError:
        raise
    except Exception as exc:  # the user's module failed to import: one line naming it and why
        msg = " ".join(str(exc).split()) or type(exc).__name__
        raise KvbedError(f"{kind} {spec!r}: cannot import {target!r}: {type(exc).__name__}: {msg}") from None
    obj: Any = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise KvbedError(f"{kind} {spec!r}: {target!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    def __init__(self, kind: str, summary_attr: str | None = None, plugins: Plugins | None = None):
        self.kind = kind
        #: the attribute of an entry holding its one-line summary (None: its docstring)
        self.summary_attr = summary_attr
        self.plugins = plugins
        self._items: dict[str, T] = {}
        self._loaded: dict[str, T] = {}  # plugin entries by spec or entry-point name, once loaded
        self._eps: dict[str, importlib.metadata.EntryPoint] | None = None
        self._shadowed: dict[str, importlib.metadata.EntryPoint] = {}  # entry points named like a registered entry
        self._warned: set[str] = set()

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

    def get(self, name: str, *, warn: bool = True) -> T:
        """The entry ``name`` (KvbedError, one line, naming the choices when there is none). ``warn``: a name that
        both a registered entry and an entry point have warns once (listings, which name every entry, pass
        False)."""
        try:
            obj = self._items[name.lower()]
        except KeyError:
            pass
        else:
            if warn and self.plugins is not None and name.lower() not in self._warned:
                self._warn_shadowed(name.lower())
            return obj
        if self.plugins is not None:
            if name in self._loaded:
                return self._loaded[name]
            if is_spec(name):
                return self._adopt(name, load_spec(name, self.kind))
            ep = self.entry_points().get(name.lower())
            if ep is not None:
                try:
                    obj = ep.load()
                except Exception as exc:
                    msg = " ".join(str(exc).split()) or type(exc).__name__
                    raise KvbedError(f"{self.kind} {name!r} (entry point {ep.value!r} of group "
                                     f"{self.plugins.group!r}): cannot load: {type(exc).__name__}: {msg}") from None
                return self._adopt(name.lower(), obj)
        more = " or module:Class, path/file.py:Class" if self.plugins is not None else ""
        raise KvbedError(f"unknown {self.kind} {name!r} (choose from: {', '.join(self.names())}{more})") from None

    def is_registered(self, name: str) -> bool:
        """``name`` is an entry of the package itself (registered), not a plugin."""
        return name.lower() in self._items

    def _adopt(self, name: str, obj: Any) -> T:
        """A plugin object, checked, named by how it was asked for, kept for the next lookup."""
        assert self.plugins is not None
        if self.plugins.check is not None:
            self.plugins.check(name, obj)
        if isinstance(obj, type):
            obj.name = name
        self._loaded[name] = obj
        return obj

    def entry_points(self) -> dict[str, importlib.metadata.EntryPoint]:
        """The entry points of the plugin group by lowercase name (read once, none loaded; registered names
        win: an entry point named like one is in :meth:`shadowed` instead)."""
        if self.plugins is None:
            return {}
        if self._eps is None:
            eps = importlib.metadata.entry_points(group=self.plugins.group)
            self._eps = {ep.name.lower(): ep for ep in eps if ep.name.lower() not in self._items}
            self._shadowed = {ep.name.lower(): ep for ep in eps if ep.name.lower() in self._items}
        return self._eps

    def shadowed(self) -> dict[str, importlib.metadata.EntryPoint]:
        """Entry points of the plugin group named like a registered entry, which wins: by lowercase name."""
        self.entry_points()
        return dict(self._shadowed)

    def _warn_shadowed(self, name: str) -> None:
        """Once per name: an entry point of this name exists and is not what the name gives."""
        self._warned.add(name)
        ep = self.shadowed().get(name)
        if ep is not None:
            dist = getattr(getattr(ep, "dist", None), "name", None)
            print(f"kvbed: warning: {self.kind} {name!r} is kvbed's own; the entry point {ep.name!r} = {ep.value!r} "
                  f"of group {self.plugins.group!r}{f' (distribution {dist})' if dist else ''} has the same name and "
                  f"is not used (give it as {ep.value} to use it)", file=sys.stderr)

    def load_error(self, name: str) -> str | None:
        """Why entry point ``name`` cannot be used (the one line :meth:`get` would raise), or None when it loads
        or ``name`` is not an entry point: how listings mark a broken one instead of failing."""
        if name.lower() in self._items or name.lower() not in self.entry_points():
            return None
        try:
            self.get(name, warn=False)
        except KvbedError as exc:
            return str(exc)
        return None

    def forget_plugins(self) -> None:
        """Read the entry points again on the next lookup (after installing a distribution; tests)."""
        self._eps = None
        self._shadowed = {}
        self._warned.clear()
        self._loaded.clear()

    def names(self) -> list[str]:
        return sorted({*self._items, *self.entry_points()})

    def summary(self, name: str) -> str:
        """One line saying what entry ``name`` is ("" when it documents nothing)."""
        if not is_spec(name):
            name = name.lower()
        try:
            obj = self.get(name, warn=False)
        except KvbedError as exc:
            if name in self._items or name not in self.entry_points():
                raise
            return f"BROKEN: {exc}"  # an entry point that does not load: listed, failing only when used
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
        """A registered name, or (with plugins) an entry point or a spec that loads and passes the check."""
        if name.lower() in self._items:
            return True
        if self.plugins is None:
            return False
        try:
            self.get(name, warn=False)
        except KvbedError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def _one_line(doc: str) -> str:
    """The first paragraph of a docstring, on one line."""
    para = doc.strip().split("\n\n", 1)[0]
    return " ".join(para.split())
