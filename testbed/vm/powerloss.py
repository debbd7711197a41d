"""``kvbed replay --target vm --fault power-loss@T``: pull the plug on a real guest, start it again on the
same backing, read back what it wrote, and hold the result against the fault model's prediction.

Every user write carries an object payload (:mod:`kvreplay.agent.payload`: per page a stamp with object id,
write id and page index; on page 0 the header with length and CRC32C). The device model is fed every op
first, and its completions (device time) drive the run's clock, as in an embedded replay. The guest gets
what the model has on the media at T: each op that arrived by T, a write cut to the units that had
reached the media (the rule of :func:`kvreplay.faults.model.lose_inflight`: units in order, evenly spread
from arrival to completion, ``flush_ns`` later with a volatile write buffer). Once every such op has been
acknowledged the host SIGKILLs QEMU, starts it again with the same command line on the same disks, and the
agent scans every write issued before T: intact, torn (some of its pages), missing (none) or corrupt (all
pages, bad CRC).

The kill point is the model's instant, so nothing is in flight when QEMU dies: the check is of the media
state, not of a race. QEMU's volatile write cache is the host's page cache, which a SIGKILL of QEMU does
not lose, so the volatile-buffer part of a power loss is what the host does not issue; what it does issue
must come back exactly. Ops after T go to the model only (the fault model's outcomes cover the whole
trace); the guest's figures and cross-checks are of the stream up to the kill.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from devicemodels.base import OP_WRITE
from kvreplay.agent.payload import STATUS_NAMES
from kvreplay.faults.base import Fault
from kvreplay.layout.common import SRC_GC
from kvbed.core.errors import KvbedError

MAX_MISMATCHES = 20


def units_on_media(arr: np.ndarray, done: np.ndarray, npages: np.ndarray, at_ns: int, flush_ns: int) -> np.ndarray:
    """Units of each op on the media at ``at_ns``: unit j of an op is there once
    ``arr + (done - arr) * (j + 1) // npages + flush_ns <= at_ns`` (lose_inflight's rule, in closed form)."""
    arr, done, n = (np.asarray(x, np.int64) for x in (arr, done, npages))
    span = done - arr
    room = at_ns - flush_ns - arr  # floor(span * (j + 1) / n) <= room  <=>  span * (j + 1) < (room + 1) * n
    clipped = np.minimum(room, span)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.where(span > 0, ((clipped + 1) * n - 1) // np.maximum(span, 1), n)
    k = np.where(room < 0, 0, np.minimum(k, n))
    return k.astype(np.int64)


def payload_columns(op: np.ndarray, src: np.ndarray, row: np.ndarray, obj: np.ndarray,
                    npages: np.ndarray) -> dict[str, np.ndarray]:
    """Per op: write id (the write event's trace row; -1 for ops that are not user writes), object, the page
    of its write it starts at, and the pages of the whole write (a write event's ops are in one batch)."""
    w = (op == OP_WRITE) & (src != SRC_GC)
    n = len(op)
    wid = np.where(w, row, -1).astype(np.int64)
    wpage = np.zeros(n, np.int32)
    wpages = np.zeros(n, np.int32)
    idx = np.flatnonzero(w)
    if len(idx):
        order = idx[np.argsort(row[idx], kind="stable")]
        r = row[order]
        npg = npages[order].astype(np.int64)
        starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
        sizes = np.diff(np.r_[starts, len(r)])
        before = np.cumsum(npg) - npg
        wpage[order] = before - np.repeat(before[starts], sizes)
        wpages[order] = np.repeat(np.add.reduceat(npg, starts), sizes)
    return {"wid": wid, "obj": np.asarray(obj, np.int64), "wpage": wpage, "wpages": wpages}


class GuestPowerLoss:
    """The host side of one power-loss fault on a VM: what to send before the kill, the extents to scan."""

    def __init__(self, fault: Fault, time_scale: float):
        p = fault.p
        self.fault = fault
        self.at_ns = int(p.at_ns)  # trace time: a write event belongs before the kill if its time is <= this
        self.device_at_ns = self.at_ns if time_scale == 1.0 else int(np.floor(self.at_ns / time_scale))
        self.flush_ns = int(p.flush_ns)
        self.fired = False
        self.ext: list[dict[str, np.ndarray]] = []
        self.sent = {"ops": 0, "write_ops": 0, "write_ops_cut": 0, "write_ops_dropped": 0,
                     "pages_written": 0, "pages_not_issued": 0}
        self.scan: dict[str, Any] | None = None
        self.cycle: dict[str, Any] = {}

    def before_kill(self, batch: dict[str, np.ndarray], model_done: np.ndarray) -> tuple[dict[str, np.ndarray], bool]:
        """(the ops of ``batch`` the guest gets, whether the kill point falls within or before this batch).

        Ops of events after T are not sent; a write is cut to its units on the media at T (dropped if none).
        Every write of an event by T is recorded for the scan with its whole extent."""
        rel = batch["rel"]
        pre = rel <= self.at_ns
        beyond = bool(len(rel)) and not bool(pre[-1])
        op = batch["op"]
        pl = payload_columns(op, batch["src"], batch["row"], batch["obj"], batch["npages"])
        keep = pre.copy()
        npg = batch["npages"].astype(np.int64).copy()
        is_w = pre & (pl["wid"] >= 0)
        if is_w.any():
            on = units_on_media(batch["arrival_ns"][is_w], model_done[is_w], npg[is_w], self.device_at_ns,
                                self.flush_ns)
            full = npg[is_w]
            self.sent["write_ops"] += int(is_w.sum())
            self.sent["write_ops_cut"] += int(np.count_nonzero((on > 0) & (on < full)))
            self.sent["write_ops_dropped"] += int(np.count_nonzero(on == 0))
            self.sent["pages_not_issued"] += int((full - on).sum())
            self.ext.append({"wid": pl["wid"][is_w], "obj": pl["obj"][is_w], "lba": batch["lba"][is_w].astype(np.int64),
                             "npages": full.astype(np.int32), "wpage": pl["wpage"][is_w], "wpages": pl["wpages"][is_w]})
            npg[is_w] = on
            keep[np.flatnonzero(is_w)[on == 0]] = False
        # writes the layout made for other reasons (none with strict capacity) go out whole, like trims
        out = {k: batch[k][keep] for k in ("op", "lba", "pid", "arrival_ns")}
        out["npages"] = npg[keep].astype(np.int32)
        for k, v in pl.items():
            out[k] = v[keep]
        self.sent["ops"] += int(keep.sum())
        self.sent["pages_written"] += int(out["npages"][out["op"] == OP_WRITE].sum())
        return out, beyond

    def extents(self) -> dict[str, np.ndarray]:
        if not self.ext:
            return {k: np.zeros(0, np.int64) for k in ("wid", "obj", "lba", "npages", "wpage", "wpages")}
        return {k: np.concatenate([e[k] for e in self.ext]) for k in self.ext[0]}

    def compare(self, media: dict[str, np.ndarray] | None) -> dict[str, Any]:
        """The guest's scan against the fault model's media map after the fault, write by write."""
        if self.scan is None:
            raise KvbedError("power-loss: the guest was never scanned (the kill point was not reached)")
        g_wid, g_status, g_present = (np.asarray(self.scan[k], np.int64) for k in ("wid", "status", "present"))
        if media is None:
            raise KvbedError("power-loss: the fault model kept no media map for the fault")
        m_row, m_pages, m_on = media["row"], media["pages"], media["on_media"]
        m_status = np.where(m_on == 0, 2, np.where(m_on < m_pages, 1, 0))  # intact, torn, missing
        order = np.argsort(m_row, kind="stable")
        if len(order):
            pos = np.clip(np.searchsorted(m_row[order], g_wid), 0, len(order) - 1)
            found, mi = m_row[order][pos] == g_wid, order[pos]
        else:
            found, mi = np.zeros(len(g_wid), bool), np.zeros(len(g_wid), np.int64)
        agree = found & (m_status[mi] == g_status) & (m_on[mi] == g_present)
        bad = np.flatnonzero(~agree)
        not_scanned = int(len(m_row) - np.count_nonzero(np.isin(m_row, g_wid)))

        def counts(st: np.ndarray) -> dict[str, int]:
            return {name: int(np.count_nonzero(st == i)) for i, name in enumerate(STATUS_NAMES)}

        mismatches = [{"write_row": int(g_wid[i]), "object": int(media["obj"][mi[i]]) if found[i] else None,
                       "pages": int(m_pages[mi[i]]) if found[i] else None,
                       "model": STATUS_NAMES[int(m_status[mi[i]])] if found[i] else "unknown write",
                       "model_pages_on_media": int(m_on[mi[i]]) if found[i] else None,
                       "guest": STATUS_NAMES[int(g_status[i])], "guest_pages_present": int(g_present[i])}
                      for i in bad[:MAX_MISMATCHES]]
        return {
            "at_ns": self.at_ns, "device_at_ns": self.device_at_ns, "flush_ns": self.flush_ns,
            "issued_before_kill": dict(self.sent), "power_cycle": self.cycle,
            "scan": self.scan.get("totals", {}),
            "writes_scanned": int(len(g_wid)), "writes_predicted": int(len(m_row)),
            "writes_not_scanned": not_scanned,
            "guest": counts(g_status), "model": counts(m_status),
            "pages_present_guest": int(g_present.sum()), "pages_on_media_model": int(m_on[np.isin(m_row, g_wid)].sum()),
            "agree": int(np.count_nonzero(agree)), "disagree": int(len(bad)), "mismatches": mismatches,
            "ok": len(bad) == 0 and not_scanned == 0,
        }
