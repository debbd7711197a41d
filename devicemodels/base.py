"""The contract every device model keeps (conv, fdp, zns, cxl, ...).

A device consumes *batches* of operations as flat numpy arrays and returns the
completion time of each. Device time is integer nanoseconds; there is no event
queue: each channel and die keeps its next-free time (FEMU's model), and the
per-op loop runs inside a numba kernel.

Op batch columns (all the same length):
  op          int8   one of the OP_* codes below
  lba         int64  first logical page (unit: the device's page_bytes)
  npages      int32  number of logical pages (>= 1; ignored by ZONE_RESET/FINISH)
  pid         int16  placement id (FDP: index into the namespace's RUH list;
                     ZNS: ignored; conv: ignored). Invalid ids are an error.
  arrival_ns  int64  when the host issued the op (non-decreasing within a batch)

``submit`` returns a :class:`Completion` with ``done_ns`` (int64 per op) and,
for ZONE_APPEND, the LBA the device assigned (``lba``; -1 for other ops).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from testbed.registry import Registry

OP_READ = 0
OP_WRITE = 1
OP_TRIM = 2  # NVMe dataset management, deallocate
OP_ZONE_APPEND = 3
OP_ZONE_RESET = 4
OP_ZONE_FINISH = 5
OP_RUH_UPDATE = 6  # FDP: close the RU under this placement id's RUH, open a new one
OP_NAMES = ("read", "write", "trim", "zone_append", "zone_reset", "zone_finish", "ruh_update")

OP_DTYPES = {
    "op": np.int8,
    "lba": np.int64,
    "npages": np.int32,
    "pid": np.int16,
    "arrival_ns": np.int64,
}


@dataclass(frozen=True)
class Completion:
    done_ns: np.ndarray  # int64, per op
    lba: np.ndarray  # int64, per op: the assigned LBA for ZONE_APPEND, else -1


def op_batch(op, lba, npages, pid=None, arrival_ns=None) -> dict[str, np.ndarray]:
    """Build a contiguous op batch with the contract's dtypes."""
    n = len(op)
    cols = {
        "op": op,
        "lba": lba,
        "npages": npages,
        "pid": np.zeros(n, np.int16) if pid is None else pid,
        "arrival_ns": np.zeros(n, np.int64) if arrival_ns is None else arrival_ns,
    }
    return {k: np.ascontiguousarray(v, dtype=OP_DTYPES[k]) for k, v in cols.items()}


class DeviceModel(abc.ABC):
    """Base class; subclasses register themselves in DEVICES under a lowercase name."""

    name: ClassVar[str]
    #: the frozen parameter dataclasses this device is built from, by group name
    #: (e.g. {"flash": FlashParams, "fdp": FdpParams}); CLI ``--param`` routes keys by field name.
    param_classes: ClassVar[dict[str, type]]

    @property
    @abc.abstractmethod
    def page_bytes(self) -> int: ...

    @property
    @abc.abstractmethod
    def logical_pages(self) -> int: ...

    @property
    def n_placement_ids(self) -> int:
        """How many distinct placement classes the device can separate (1 = none)."""
        return 1

    @abc.abstractmethod
    def submit(self, ops: dict[str, np.ndarray]) -> Completion:
        """Run a batch; raises KvbedError for an op the real device would refuse."""

    @abc.abstractmethod
    def counters(self) -> dict[str, int]:
        """Cheap snapshot of cumulative integer counters (host/media pages, GC, erases, stall ns...)."""

    @abc.abstractmethod
    def stats(self) -> dict[str, Any]:
        """fio-shaped summary: WAF, GC, wear, latency percentiles per op type, per-RUH/zone usage."""

    def precondition(self, fill_ratio: float, *, overwrite_x: float = 0.0, seed: int = 0) -> dict[str, Any]:
        """Fill and optionally randomly overwrite the device; counted apart (counters reset after)."""
        raise NotImplementedError(f"{self.name} has no preconditioning")


DEVICES: Registry[type[DeviceModel]] = Registry("device")
GC_POLICIES: Registry[Any] = Registry("GC victim policy")
