"""Layouts: where the replayed tier's KV objects live in the device's namespace.

``LAYOUTS`` maps a name to a layout class; :func:`layout_for` picks the one a
device's namespace needs (zones for a zoned device, extents for a flat one). A
layout turns a batch of tier events (object, action, pages, placement id, class)
into device op batches; it never talks to the device itself, so the same layout
can drive an embedded model or a VM target. What the replay must know about a
device (default classes, open streams, how the layout is built, what it adds to
result.json) it asks the layout class (:class:`~kvreplay.layout.common.ObjectLayout`).
"""

from __future__ import annotations

import numpy as np

from kvreplay.layout.common import (
    COUNTER_NAMES, LAYOUTS, OB_EV, OB_LBA, OB_NPAGES, OB_OP, OB_PID, OB_ROWS, OB_SRC, S_BUFFER_FULL, S_DONE,
    S_NO_PROGRESS, S_TOO_BIG, SRC_EVICT, SRC_GC, SRC_NAMES, SRC_USER, ObjectLayout,
)
from kvreplay.layout.extent import ExtentLayout
from kvreplay.layout.params import LayoutParams
from kvreplay.layout.zone import ZoneLayout
from kvbed.core.errors import KvbedError


def layout_for(device_cls: type) -> type[ObjectLayout]:
    """The registered layout for a device class's namespace (``DeviceModel.zoned``)."""
    for name in LAYOUTS:
        layout = LAYOUTS.get(name)
        if layout.zoned == device_cls.zoned:
            return layout
    raise KvbedError(f"no layout places objects on device {device_cls.name!r}")


class OpBuffer:
    """The (OB_ROWS, capacity) int64 array layout kernels emit into, and its view as a device op batch."""

    def __init__(self, capacity: int):
        self.ob = np.zeros((OB_ROWS, int(capacity)), np.int64)

    @property
    def capacity(self) -> int:
        return self.ob.shape[1]

    def ensure(self, capacity: int) -> None:
        if capacity > self.capacity:
            self.ob = np.zeros((OB_ROWS, int(capacity)), np.int64)

    def columns(self, n: int) -> dict[str, np.ndarray]:
        ob = self.ob
        return {
            "op": ob[OB_OP, :n].astype(np.int8),
            "lba": ob[OB_LBA, :n].copy(),
            "npages": ob[OB_NPAGES, :n].astype(np.int32),
            "pid": ob[OB_PID, :n].astype(np.int16),
            "event": ob[OB_EV, :n].copy(),
            "src": ob[OB_SRC, :n].astype(np.int8),
        }


__all__ = [
    "LAYOUTS", "ExtentLayout", "ZoneLayout", "LayoutParams", "ObjectLayout", "OpBuffer", "layout_for", "COUNTER_NAMES",
    "S_DONE", "S_BUFFER_FULL", "S_TOO_BIG", "S_NO_PROGRESS", "SRC_USER", "SRC_GC", "SRC_EVICT", "SRC_NAMES",
]
