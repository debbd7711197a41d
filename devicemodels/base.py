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
                     with nrg > 1 reclaim groups, rg * nruh + ruh; ZNS: ignored;
                     conv: ignored). Invalid ids are an error.
  arrival_ns  int64  when the host issued the op (non-decreasing within a batch)

``submit`` returns a :class:`Completion` with ``done_ns`` (int64 per op) and,
for ZONE_APPEND, the LBA the device assigned (``lba``; -1 for other ops).
"""

from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from kvbed.core.registry import Registry

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

    #: a zoned namespace (ZNS): the host writes zones sequentially and resets them; else a flat one
    zoned: ClassVar[bool] = False

    @classmethod
    def placement_classes(cls, params: dict[str, Any]) -> int:
        """How many placement ids a host can address on a device of these parameter groups (1 = none)."""
        return 1

    @property
    def n_placement_ids(self) -> int:
        """How many distinct placement classes the device can separate (1 = none)."""
        return 1

    @property
    def placement_unit_pages(self) -> int:
        """Pages a placement id's stream fills before the device opens its next unit (an FDP reclaim unit, a
        zone's writable capacity), as a host reads it from the drive; 0: no such unit. A unit a stream leaves
        part-written stays open: its unwritten pages are spare space the device cannot use."""
        return 0

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

    @contextlib.contextmanager
    def untimed(self):
        """Run the body without the timing model (fast fill/warm-up); no effect for models
        whose timing is not optional. Die/channel clocks are not reset here."""
        yield self

    # --- construction (additive): one way for every device -------------------------------
    # ``DEVICES.get(name)(**groups)`` takes one frozen params instance per ``param_classes`` group
    # (missing groups get defaults), e.g. ``FdpDevice(flash=FlashParams(...), fdp=FdpParams(...))``;
    # ``from_params`` applies ``k=v`` overrides on the defaults; ``config``/``from_config``
    # round-trip a saved run config.

    @classmethod
    def from_params(cls, overrides: Any = (), **groups: Any) -> "DeviceModel":
        """Build from default params plus overrides: ``["op_ratio=7%", "fdp.nruh=4"]`` or a
        ``{key: value}`` dict (values typed or text), each key routed to the group with that field."""
        return cls(**cls.param_groups(overrides, **groups))

    @classmethod
    def param_groups(cls, overrides: Any = (), **groups: Any) -> dict[str, Any]:
        """The parameter groups ``from_params`` would build the device from (defaults plus overrides),
        without building it."""
        from kvbed.core.params import field_types, split_overrides, with_overrides

        base = {g: groups.get(g) or c() for g, c in cls.param_classes.items()}
        if isinstance(overrides, dict) and any(k.rpartition(".")[2] == "preset" for k in overrides):
            # a preset's group goes first and the dict's own values after it (they win)
            from kvbed.core.params import expand_presets

            pre = [f"{k}={v}" for k, v in overrides.items() if k.rpartition(".")[2] == "preset"]
            for g, kv in split_overrides(expand_presets(pre, cls.param_classes)[:-len(pre)],
                                         cls.param_classes).items():
                base[g] = with_overrides(base[g], kv)
        if isinstance(overrides, dict):
            for key, val in overrides.items():
                g, _, k = key.rpartition(".")
                if not g:
                    owners = [n for n, c in cls.param_classes.items() if k in field_types(c)]
                    g = owners[0] if owners else ""
                if g not in base:
                    split_overrides([f"{key}=0"], cls.param_classes,  # raises the standard unknown-key error
                                    labels={g: f"device {cls.name}" for g in cls.param_classes})
                base[g] = with_overrides(base[g], {k: val})
        else:
            labels = {g: f"device {cls.name}" for g in cls.param_classes}
            for g, kv in split_overrides(list(overrides), cls.param_classes, labels=labels).items():
                base[g] = with_overrides(base[g], kv, label=f"device {cls.name}")
        return base

    def config(self) -> dict[str, Any]:
        """``{"device": name, group: {field: value}}``: enough to rebuild the device."""
        from kvbed.core.params import to_dict

        return {"device": self.name, **{g: to_dict(p) for g, p in self.params.items()}}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "DeviceModel":
        from kvbed.core.params import from_dict

        return cls(**{g: from_dict(c, cfg.get(g, {}), where=f"config.{g}") for g, c in cls.param_classes.items()})

    #: the params instances this device was built from, by group (set by subclasses)
    params: dict[str, Any]


DEVICES: Registry[type[DeviceModel]] = Registry("device")
GC_POLICIES: Registry[Any] = Registry("GC victim policy", summary_attr="summary")
PRESETS: Registry[Any] = Registry("parameter preset", summary_attr="summary")  # FlashParams.preset (devicemodels.presets)
