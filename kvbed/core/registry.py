"""Registries for extension points (devices, GC victim policies, hint policies, importers, layouts, ...).

Adding an extension is one file with one ``@REGISTRY.register("name")`` decorator, which also sets the
class's ``name`` (so the name is written once). Names are lowercase; lookups of unknown names raise
KvbedError listing the choices.
"""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from kvbed.core.errors import KvbedError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
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

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
