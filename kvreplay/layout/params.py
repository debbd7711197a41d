"""Parameters of the layouts (how the replayed tier's objects are placed in the device's namespace)."""

from __future__ import annotations

from dataclasses import dataclass

from kvbed.core.errors import KvbedError
from kvbed.core.params import check_fields, param


@dataclass(frozen=True)
class LayoutParams:
    evict_policy: str = param("tier", "what the layout evicts when the namespace is full: lru, fifo, or tier "
                                      "(the replayed tier's policy from the trace metadata; lru-like policies "
                                      "map to lru, fifo-like ones to fifo)", choices=("tier", "lru", "fifo"))
    rewrite_in_place: bool = param(True, "conv/fdp: a rewrite of a resident object of the same size overwrites "
                                         "its extents")
    gc_free_zones: int = param(0, "zns: host GC keeps this many zones empty (at least 2); 0 = max(2, zones / 20)")
    gc_stream: str = param("shared", "zns: relocated data goes to one shared GC zone, or one per class",
                           choices=("shared", "per-class"))

    def validate(self) -> "LayoutParams":
        check_fields(self)
        if self.gc_free_zones < 0:
            raise KvbedError(f"gc_free_zones must be >= 0, got {self.gc_free_zones}")
        return self
