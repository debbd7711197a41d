"""``zns``: an NVMe Zoned Namespace SSD (no device GC, host resets zones).

The LBA space is ``logical_bytes / zone_bytes`` zones of ``zone_bytes``; only the
first ``zone_cap_bytes`` of each are writable and backed by flash (blocks striped
over ``min(blocks, dies)`` dies). ``op_ratio`` does not apply: the host does the
garbage collection, so media writes equal host writes (WAF 1) and the cost shows
up as host-side copies and zone resets instead.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, NamedTuple

import numpy as np

from devicemodels import histogram
from devicemodels import zns_kernel as ZK
from devicemodels.base import (DEVICES, OP_NAMES, OP_READ, OP_WRITE, OP_ZONE_APPEND, OP_ZONE_FINISH,
                               OP_ZONE_RESET, Completion, DeviceModel)
from devicemodels.ftl_device import checked_batch
from devicemodels.ftl_state import pow2_mask
from devicemodels.histogram import clear_rows
from devicemodels.params import FlashParams, ZnsParams
from devicemodels.summary import latency_by_op, wear_summary
from kvbed.core.errors import KvbedError


class ZGeo(NamedTuple):
    nzones: int
    zsize: int  # LBA pages per zone
    cap: int  # writable pages per zone
    ppb: int
    w: int  # dies a zone is striped over
    dies: int
    channels: int
    max_open: int
    max_active: int
    implicit_close: int
    timing: int
    read_ns: int
    prog_ns: int
    erase_ns: int
    xfer_ns: int
    wbuf: int
    wbuf_ns: int
    ch_mask: int  # channels - 1 if a power of two, else -1


class ZState(NamedTuple):
    wp: np.ndarray  # int64[nzones] pages written
    state: np.ndarray  # int8[nzones]
    open_seq: np.ndarray  # int64[nzones] when implicitly opened (LRU implicit close)
    erase: np.ndarray  # int32[nzones] resets that erased data (per block of the zone)
    die_free: np.ndarray
    ch_free: np.ndarray
    wbuf: np.ndarray
    misc: np.ndarray
    ctr: np.ndarray
    hist: np.ndarray


_ERRORS = {
    ZK.ZERR_WP: "write is not at the zone's write pointer (NVMe: Zone Invalid Write); write pointer is at offset {d}",
    ZK.ZERR_CAPACITY: "write crosses the zone's writable capacity (NVMe: Zone Boundary Error); {d} pages left",
    ZK.ZERR_FULL: "zone is full (NVMe: Zone Is Full); reset it first",
    ZK.ZERR_OPEN: "too many open zones (max_open_zones reached and no implicitly opened zone to close)",
    ZK.ZERR_ACTIVE: "too many active zones (max_active_zones reached); finish or reset a zone first",
    ZK.ZERR_NOT_START: "zone append/reset/finish must address the zone start LBA",
    ZK.ZERR_OP: "operation code {d} is not supported",
}


@DEVICES.register("zns")
class ZnsDevice(DeviceModel):
    zoned = True
    param_classes = {"flash": FlashParams, "zns": ZnsParams}
    supported_ops = (OP_READ, OP_WRITE, OP_ZONE_APPEND, OP_ZONE_RESET, OP_ZONE_FINISH)

    def __init__(self, flash: FlashParams | None = None, zns: ZnsParams | None = None):
        self.flash = (flash or FlashParams()).validate()
        self.zns = (zns or ZnsParams()).validate_with(self.flash)
        self.params = {"flash": self.flash, "zns": self.zns}
        f, z = self.flash, self.zns
        zsize = z.zone_bytes // f.page_bytes
        cap = z.zone_cap_bytes // f.page_bytes
        nzones = f.logical_bytes // z.zone_bytes
        if nzones < z.max_active_zones:
            raise KvbedError(f"the device has {nzones} zones, fewer than max_active_zones={z.max_active_zones}")
        blocks = math.ceil(cap / f.pages_per_block)
        k = f.nand_pages_per_page
        self.zg = ZGeo(
            nzones=nzones, zsize=zsize, cap=cap, ppb=f.pages_per_block, w=min(blocks, f.dies), dies=f.dies,
            channels=f.channels, max_open=z.max_open_zones, max_active=z.max_active_zones,
            implicit_close=int(z.implicit_close), timing=int(f.timing), read_ns=f.page_read_ns * k,
            prog_ns=f.page_program_ns * k, erase_ns=f.block_erase_ns * f.nand_blocks_per_block, xfer_ns=f.page_xfer_ns,
            wbuf=f.write_buffer_bytes // f.page_bytes, wbuf_ns=f.write_buffer_ns,
            ch_mask=pow2_mask(f.channels),
        )
        self.blocks_per_zone = blocks
        self.zst = ZState(
            wp=np.zeros(nzones, np.int64), state=np.zeros(nzones, np.int8), open_seq=np.zeros(nzones, np.int64),
            erase=np.zeros(nzones, np.int32), die_free=np.zeros(f.dies, np.int64),
            ch_free=np.zeros(f.channels, np.int64), wbuf=np.zeros(max(1, self.zg.wbuf), np.int64),
            misc=np.zeros(ZK.ZM_FIELDS, np.int64), ctr=np.zeros(len(ZK.ZNS_COUNTER_NAMES), np.int64),
            hist=histogram.new_rows(len(OP_NAMES)),
        )
        self._err = np.zeros(4, np.int64)

    @property
    def page_bytes(self) -> int:
        return self.flash.page_bytes

    @property
    def logical_pages(self) -> int:
        return self.zg.nzones * self.zg.zsize

    @property
    def write_dies(self) -> int:
        """Dies one zone spreads its pages over."""
        return self.zg.w

    @property
    def zone_pages(self) -> int:
        return self.zg.zsize

    @property
    def zone_cap_pages(self) -> int:
        return self.zg.cap

    @property
    def placement_unit_pages(self) -> int:
        return self.zg.cap

    @property
    def n_zones(self) -> int:
        return self.zg.nzones

    def submit(self, ops: dict[str, np.ndarray]) -> Completion:
        op, lba, npages, pid, arrival = checked_batch(self, ops)
        n = len(op)
        done = np.empty(n, np.int64)
        out_lba = np.full(n, -1, np.int64)
        if n:
            err = self._err
            err[:] = 0
            ZK.zns_submit(self.zst, self.zg, op, lba, npages, arrival, done, out_lba, err)
            if err[0]:
                code, i, z, d = (int(x) for x in err)
                raise KvbedError(_ERRORS[code].format(d=d), where=f"{self.name} op {i} ({OP_NAMES[op[i]]}, zone {z})")
        return Completion(done_ns=done, lba=out_lba)

    def counters(self) -> dict[str, int]:
        return dict(zip(ZK.ZNS_COUNTER_NAMES, self.zst.ctr.tolist()))

    def reset_counters(self) -> None:
        z = self.zst
        z.ctr[:] = 0
        clear_rows(z.hist)
        z.die_free[:] = 0
        z.ch_free[:] = 0
        z.wbuf[:] = 0
        z.misc[ZK.ZM_BUSY_UNTIL] = 0
        z.misc[ZK.ZM_WB_POS] = 0
        z.misc[ZK.ZM_MAX_OPEN] = z.misc[ZK.ZM_OPEN]
        z.misc[ZK.ZM_MAX_ACTIVE] = z.misc[ZK.ZM_ACTIVE]

    def precondition(self, fill_ratio: float, *, overwrite_x: float = 0.0, seed: int = 0) -> dict[str, Any]:
        """Fill the first ``fill_ratio`` of the zones to capacity (sequentially, no timing; each
        zone ends full). Random overwrites do not exist on ZNS, so ``overwrite_x`` must be 0."""
        if not (0.0 < fill_ratio <= 1.0):
            raise KvbedError(f"precondition fill ratio must be in (0, 1], got {fill_ratio}")
        if overwrite_x:
            raise KvbedError("zns cannot be preconditioned with random overwrites (writes must be sequential)")
        nz = max(1, int(round(fill_ratio * self.zg.nzones)))
        starts = np.arange(nz, dtype=np.int64) * self.zg.zsize
        empty = self.zst.state[:nz] == ZK.Z_EMPTY
        if not empty.all():
            raise KvbedError("precondition needs empty zones; reset them first")
        with self.untimed():
            self.submit({"op": np.full(nz, OP_WRITE, np.int8), "lba": starts,
                         "npages": np.full(nz, self.zg.cap, np.int32),
                         "pid": np.zeros(nz, np.int16), "arrival_ns": np.zeros(nz, np.int64)})
        c = self.counters()
        out = {"fill_ratio": fill_ratio, "zones_filled": nz, "host_pages_written": c["host_pages_written"],
               "media_pages_written": c["media_pages_written"], "waf": 1.0}
        self.reset_counters()
        return out

    @contextlib.contextmanager
    def untimed(self):
        zg = self.zg
        self.zg = zg._replace(timing=0)
        try:
            yield self
        finally:
            self.zg = zg

    def zones(self) -> dict[str, np.ndarray]:
        """Per-zone arrays (copies): state code, write pointer (pages), resets that erased data."""
        return {"state": self.zst.state.copy(), "wp": self.zst.wp.copy(), "erase": self.zst.erase.copy()}

    def stats(self) -> dict[str, Any]:
        c = self.counters()
        zg, zst, pb = self.zg, self.zst, self.page_bytes
        states = {name: int((zst.state == code).sum()) for code, name in ZK.ZONE_STATE_NAMES.items()}
        host = c["host_pages_written"]
        return {
            "device": self.name,
            "config": self.config(),
            "geometry": {
                "zones": zg.nzones, "zone_bytes": zg.zsize * pb, "zone_cap_bytes": zg.cap * pb,
                "logical_pages": self.logical_pages, "writable_bytes": zg.nzones * zg.cap * pb,
                "blocks_per_zone": self.blocks_per_zone, "dies_per_zone": zg.w, "dies": zg.dies,
                "memory_bytes": int(sum(a.nbytes for a in zst)),
            },
            "waf": (c["media_pages_written"] / host) if host else 0.0,
            "host_bytes_written": host * pb,
            "media_bytes_written": c["media_pages_written"] * pb,
            "counters": c,
            "zones": {
                "states": states,
                "open": int(zst.misc[ZK.ZM_OPEN]), "active": int(zst.misc[ZK.ZM_ACTIVE]),
                "max_open_seen": int(zst.misc[ZK.ZM_MAX_OPEN]), "max_active_seen": int(zst.misc[ZK.ZM_MAX_ACTIVE]),
                "resets": c["zone_resets"], "finishes": c["zone_finishes"],
                "implicit_closes": c["zone_implicit_closes"],
                "written_bytes": int(zst.wp.sum()) * pb,
                "utilisation": float(zst.wp.sum()) / (zg.nzones * zg.cap),
            },
            "latency": latency_by_op(zst.hist, pb, {"read": c["host_pages_read"], "write": host}),
            "wear": wear_summary(zst.erase, self.blocks_per_zone, self.flash.pe_cycles_rated),
            "timing": bool(zg.timing),
            "device_busy_until_ns": int(zst.misc[ZK.ZM_BUSY_UNTIL]),
        }

    def check_invariants(self) -> None:
        zst, zg = self.zst, self.zg
        assert ((zst.wp >= 0) & (zst.wp <= zg.cap)).all()
        assert ((zst.state != ZK.Z_EMPTY) | (zst.wp == 0)).all(), "an empty zone has data"
        is_open = zst.state == ZK.Z_IOPEN
        active = is_open | (zst.state == ZK.Z_CLOSED)
        assert int(is_open.sum()) == zst.misc[ZK.ZM_OPEN] <= zg.max_open
        assert int(active.sum()) == zst.misc[ZK.ZM_ACTIVE] <= zg.max_active
        assert zst.ctr[ZK.ZC_MEDIA] == zst.ctr[ZK.ZC_HOST]
