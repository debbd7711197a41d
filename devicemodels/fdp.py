"""``fdp``: NVMe Flexible Data Placement on the page-mapped FTL.

A reclaim unit (RU) is a line of ``ru_bytes``; each reclaim group (RG) owns an
equal share of the dies and lines. A write's placement id selects
``rg = pid // nruh`` and RUH ``pid % nruh``; with one RG (the default) the pid
is the RUH index. Each (RG, RUH) has its own open RU; a write to a full RU opens
a new one; OP_RUH_UPDATE closes the current RU early (an "RU not fully written"
event if it had room left). GC picks victims across all RUs of a group; valid
data goes to one shared GC RU per group ("initially isolated", so GC mixes
RUHs) or to a GC RU of the victim's own RUH ("persistently isolated"). With one RUH written (hints
``none``) the two types run the same GC (same victims, same pages moved, one host and one GC RU open):
only the owner label of the GC RUs differs. They differ in what the layout must hold back: every RUH's
GC frontier may hold an open RU, so persistently isolated needs ``nruh - 1`` more spare RUs
(``ftl_state.line_budget``), which decides whether a small-OP layout is accepted, never its WAF.

``stats()["fdp"]`` reports the NVMe log pages by their spec field names: FDP
Statistics (log 0x22: HBMW, MBMW, MBE in bytes), Reclaim Unit Handle Usage
(log 0x21: NRUH and RUHA per handle) and the RUH Status descriptors of I/O
Management Receive (PID, RUHID, EARUTR, RUAMW in logical blocks = pages).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from devicemodels import ftl_state as S
from devicemodels.base import DEVICES, OP_READ, OP_RUH_UPDATE, OP_TRIM, OP_WRITE
from devicemodels.ftl_device import FtlDevice
from devicemodels.params import FdpParams, FlashParams

# RUH attributes of log 0x21 (namespace association). The model's one namespace lists every RUH
# as a placement handle (placement ids 0..nruh-1, as the VM testbed's ``fdp.ruhs=0-(nruh-1)``),
# so each RUH is host specified whether or not data has been written through it yet.
RUHA_UNUSED, RUHA_HOST = 0, 1


@DEVICES.register("fdp")
class FdpDevice(FtlDevice):
    param_classes = {"flash": FlashParams, "fdp": FdpParams}
    supported_ops = (OP_READ, OP_WRITE, OP_TRIM, OP_RUH_UPDATE)

    def __init__(self, flash: FlashParams | None = None, fdp: FdpParams | None = None):
        self.fdp = (fdp or FdpParams()).validate()
        super().__init__(flash, self.fdp)
        self.params = {"flash": self.flash, "fdp": self.fdp}

    @classmethod
    def placement_classes(cls, params: dict[str, Any]) -> int:
        return params["fdp"].nruh * params["fdp"].nrg

    @property
    def n_placement_ids(self) -> int:
        return self.fdp.nruh

    @property
    def n_placement_ids_all(self) -> int:
        """Valid placement ids including the reclaim group: ``pid = rg * nruh + ruh`` (nruh x nrg)."""
        return self.fdp.nruh * self.fdp.nrg

    def _pid_column(self, pid: np.ndarray) -> tuple[np.ndarray, int | None]:
        return pid, self.fdp.nruh * self.fdp.nrg

    def per_ruh(self) -> list[dict[str, Any]]:
        """Per RUH (summed over reclaim groups): host/media bytes, live bytes, RUs held."""
        g, st, pb = self.geo, self.st, self.page_bytes
        fr = st.fr_pages.reshape(g.nrg, g.F).sum(axis=0)
        used = (st.lstate != S.LINE_FREE) & (st.owner >= 0)
        own = st.owner[used].astype(np.int64)
        live = np.bincount(own, weights=st.vc[used], minlength=g.nruh + 1)
        rus = np.bincount(own, minlength=g.nruh + 1)
        out = []
        for h in range(g.nruh):
            gc_pages = int(fr[g.nruh + h]) if g.pi else 0
            out.append({
                "ruh": h,
                "host_bytes_written": int(fr[h]) * pb,
                "media_bytes_written": (int(fr[h]) + gc_pages) * pb,
                "gc_bytes_written": gc_pages * pb,
                "live_bytes": int(live[h]) * pb,
                "reclaim_units_held": int(rus[h]),
            })
        if not g.pi:
            out.append({"ruh": "gc-shared", "gc_bytes_written": int(fr[g.nruh]) * pb,
                        "media_bytes_written": int(fr[g.nruh]) * pb,
                        "live_bytes": int(live[g.nruh]) * pb, "reclaim_units_held": int(rus[g.nruh])})
        return out

    def ruh_status(self) -> list[dict[str, int]]:
        g, st = self.geo, self.st
        out = []
        for rg in range(g.nrg):
            for h in range(g.nruh):
                line = int(st.fr_line[rg * g.F + h])
                ruamw = g.ppl - int(st.wp[line]) if line >= 0 else g.ppl
                out.append({"pid": rg * g.nruh + h, "rgid": rg, "ruhid": h, "earutr": 0, "ruamw": ruamw})
        return out

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        c, g, pb = self.counters(), self.geo, self.page_bytes
        out["fdp"] = {
            "ruh_type": self.fdp.ruh_type,
            "ru_bytes": self.fdp.ru_bytes,
            "stats_log": {  # FDP Statistics log page (0x22)
                "hbmw": c["host_pages_written"] * pb,
                "mbmw": c["media_pages_written"] * pb,
                "mbe": c["block_erases"] * self.flash.block_bytes,
            },
            "ruh_usage_log": {  # Reclaim Unit Handle Usage log page (0x21)
                "nruh": g.nruh,
                "ruhus": [{"ruha": RUHA_HOST} for _ in range(g.nruh)],
            },
            "ruh_status": {"nruhsd": g.nruh * g.nrg, "ruhss": self.ruh_status()},
            "events": {"ru_not_fully_written": c["ru_not_fully_written"], "ruh_updates": c["ruh_updates"]},
            "per_ruh": self.per_ruh(),
        }
        return out
