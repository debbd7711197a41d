"""Synthetic workloads for ``kvbed device run``: op batches for validating and calibrating models.

A workload yields op batches (``devicemodels.base.op_batch`` dicts) covering a
number of host page writes; arrival times are evenly spaced at ``iops``. Each is
one registry entry. ``placement="separate"`` gives every stream its own
placement id (FDP RUH); ``"mixed"`` puts everything on placement id 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from devicemodels.base import OP_READ, OP_WRITE, OP_ZONE_RESET, DeviceModel, op_batch
from kvbed.core.errors import KvbedError
from kvbed.core.registry import Registry

WORKLOADS: Registry[type["Workload"]] = Registry("workload")

CHUNK_OPS = 1 << 20


@dataclass
class WorkloadSpec:
    """What every workload is told: how much to write, op size, read mix, pacing, placement."""

    host_pages: int  # host page writes to issue
    bs_pages: int = 1  # pages per op
    read_frac: float = 0.0  # fraction of ops that are reads of written data
    iops: float = 0.0  # op arrival rate; 0 = all ops arrive at t=0 (no timing meaning)
    placement: str = "mixed"  # "mixed" or "separate"
    seed: int = 0
    hot_lba_frac: float = 0.2  # hotcold: share of the LBA space that is hot
    hot_write_frac: float = 0.8  # hotcold: share of writes that go to it


class Workload:
    """Base: subclasses implement ``_writes(n, rng) -> (lba, pid)`` for ``n`` write ops."""

    name: str

    def __init__(self, dev: DeviceModel, spec: WorkloadSpec):
        if spec.bs_pages < 1:
            raise KvbedError(f"--bs-pages must be >= 1, got {spec.bs_pages}")
        if not 0.0 <= spec.read_frac < 1.0:
            raise KvbedError(f"--read-frac must be in [0, 1), got {spec.read_frac}")
        if spec.placement not in ("mixed", "separate"):
            raise KvbedError(f"placement must be 'mixed' or 'separate', got {spec.placement!r}")
        self.dev, self.spec = dev, spec
        self.span = (dev.logical_pages // spec.bs_pages) * spec.bs_pages  # op-aligned LBA span
        if self.span < spec.bs_pages:
            raise KvbedError(f"--bs-pages {spec.bs_pages} is larger than the device ({dev.logical_pages} pages)")
        self.rng = np.random.default_rng(spec.seed)
        self.t_ns = 0.0
        self.n_pid = dev.n_placement_ids
        # FDP with several reclaim groups: spread data over them (pid = rg * nruh + ruh)
        self.n_rg = getattr(dev, "n_placement_ids_all", self.n_pid) // max(1, self.n_pid)
        if hasattr(dev, "zone_cap_pages") and not isinstance(self, Sequential):
            raise KvbedError(f"{dev.name} only takes sequential writes within zones; use --workload sequential")

    def _writes(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _rg_pid(self, lba: np.ndarray, pid: np.ndarray) -> np.ndarray:
        if self.n_rg <= 1:
            return pid
        return (pid + (lba // self.spec.bs_pages % self.n_rg) * self.n_pid).astype(np.int16)

    def fill_batches(self) -> Iterator[dict[str, np.ndarray]]:
        """A sequential write of the whole span (preconditioning), with this workload's placement."""
        bs = self.spec.bs_pages
        for start in range(0, self.span, CHUNK_OPS * bs):
            lba = np.arange(start, min(self.span, start + CHUNK_OPS * bs), bs, dtype=np.int64)
            yield op_batch(np.full(lba.size, OP_WRITE, np.int8), lba, np.full(lba.size, bs, np.int32),
                           self._rg_pid(lba, self._fill_pid(lba)))

    def _fill_pid(self, lba: np.ndarray) -> np.ndarray:
        return np.zeros(lba.size, np.int16)

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        """The measured phase: writes (and reads) until ``host_pages`` pages are written."""
        spec, rng = self.spec, self.rng
        n_writes = -(-spec.host_pages // spec.bs_pages)
        per_read = spec.read_frac / (1.0 - spec.read_frac)
        dt = 1e9 / spec.iops if spec.iops > 0 else 0.0
        done = 0
        while done < n_writes:
            nw = min(CHUNK_OPS, n_writes - done)
            lba, pid = self._writes(nw, rng)
            pid = self._rg_pid(lba, pid)
            op = np.full(nw, OP_WRITE, np.int8)
            nr = int(round(nw * per_read))
            if nr:
                rl = (rng.integers(0, self.span // spec.bs_pages, nr) * spec.bs_pages).astype(np.int64)
                order = rng.permutation(nw + nr)
                op = np.concatenate((op, np.full(nr, OP_READ, np.int8)))[order]
                lba = np.concatenate((lba, rl))[order]
                pid = np.concatenate((pid, np.zeros(nr, np.int16)))[order]
            n = op.size
            arr = (self.t_ns + dt * np.arange(n)).astype(np.int64)
            self.t_ns += dt * n
            yield op_batch(op, lba, np.full(n, spec.bs_pages, np.int32), pid, arr)
            done += nw


@WORKLOADS.register("uniform")
class Uniform(Workload):
    """Uniform random overwrites of the whole LBA space (the analytic models' workload)."""

    def _writes(self, n, rng):
        bs = self.spec.bs_pages
        return (rng.integers(0, self.span // bs, n) * bs).astype(np.int64), np.zeros(n, np.int16)


@WORKLOADS.register("hotcold")
class HotCold(Workload):
    """``hot_write_frac`` of writes hit the first ``hot_lba_frac`` of the LBAs (default 80/20).
    With ``placement=separate`` hot data uses placement id 0 and cold data id 1."""

    def __init__(self, dev, spec):
        super().__init__(dev, spec)
        if not (0 < spec.hot_lba_frac < 1 and 0 < spec.hot_write_frac < 1):
            raise KvbedError("hot_lba_frac and hot_write_frac must be in (0, 1)")
        if spec.placement == "separate" and self.n_pid < 2:
            raise KvbedError(f"placement 'separate' needs a device with >= 2 placement ids; "
                             f"{dev.name} has {self.n_pid}")
        bs = spec.bs_pages
        self.hot_ops = max(1, int(self.span // bs * spec.hot_lba_frac))
        self.all_ops = self.span // bs

    def _pid_of(self, slot: np.ndarray) -> np.ndarray:
        if self.spec.placement == "separate":
            return (slot >= self.hot_ops).astype(np.int16)
        return np.zeros(slot.size, np.int16)

    def _fill_pid(self, lba):
        return self._pid_of(lba // self.spec.bs_pages)

    def _writes(self, n, rng):
        hot = rng.random(n) < self.spec.hot_write_frac
        slot = np.where(hot, rng.integers(0, self.hot_ops, n), rng.integers(self.hot_ops, self.all_ops, n))
        return (slot * self.spec.bs_pages).astype(np.int64), self._pid_of(slot)


@WORKLOADS.register("sequential")
class Sequential(Workload):
    """Sequential overwrites of the LBA space in a loop. On ZNS: zone by zone, resetting the
    oldest zone when the next one is needed (a host-side log with no copies)."""

    def __init__(self, dev, spec):
        super().__init__(dev, spec)
        self.pos = 0
        self.zoned = hasattr(dev, "zone_cap_pages")

    def _writes(self, n, rng):
        bs = self.spec.bs_pages
        slots = (self.pos + np.arange(n)) % (self.span // bs)
        self.pos = int((self.pos + n) % (self.span // bs))
        return (slots * bs).astype(np.int64), np.zeros(n, np.int16)

    def batches(self):
        if not self.zoned:
            yield from super().batches()
            return
        yield from self._zoned_batches()

    def fill_batches(self):
        if not self.zoned:
            yield from super().fill_batches()
            return
        dev = self.dev
        nz, zp, cap = dev.n_zones, dev.zone_pages, dev.zone_cap_pages
        yield op_batch(np.full(nz, OP_WRITE, np.int8), np.arange(nz, dtype=np.int64) * zp, np.full(nz, cap, np.int32))

    def _zoned_batches(self):
        """Write whole zones in order; a zone that holds data is reset first (log-structured reuse)."""
        dev, spec = self.dev, self.spec
        nz, zp, cap, bs = dev.n_zones, dev.zone_pages, dev.zone_cap_pages, spec.bs_pages
        if cap % bs:
            raise KvbedError(f"--bs-pages {bs} must divide the zone capacity ({cap} pages)")
        per_zone = cap // bs
        written = dev.zones()["wp"] > 0
        z = int(np.argmin(written)) if not written.all() else 0
        dt = 1e9 / spec.iops if spec.iops > 0 else 0.0
        left = -(-spec.host_pages // bs)
        while left > 0:
            ops, lbas, nops = [], [], 0
            while left > 0 and nops < CHUNK_OPS:
                k = min(per_zone, left)
                if written[z]:
                    ops.append(np.array([OP_ZONE_RESET], np.int8))
                    lbas.append(np.array([z * zp], np.int64))
                nops += k + 1
                ops.append(np.full(k, OP_WRITE, np.int8))
                lbas.append(z * zp + np.arange(k, dtype=np.int64) * bs)
                written[z] = True
                left -= k
                z = (z + 1) % nz
            op = np.concatenate(ops)
            lba = np.concatenate(lbas)
            arr = (self.t_ns + dt * np.arange(op.size)).astype(np.int64)
            self.t_ns += dt * op.size
            yield op_batch(op, lba, np.full(op.size, bs, np.int32), None, arr)
