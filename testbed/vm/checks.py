"""Cross-checks between what the agent issued and what the emulated device reports.

QEMU models the NVMe protocol, not flash, so its FDP counters follow simple
rules that can be predicted exactly from the command stream (hw/nvme/ctrl.c,
QEMU 10): every write adds its bytes to host and media bytes written (HBMW,
MBMW) and takes them from its handle's reclaim unit's available media writes
(RUAMW); a write that reaches the end of the RU (nlb >= RUAMW) swaps in a fresh
RU, and the swap adds the old RUAMW to MBMW (QEMU counts it as the GC overhead
of a prematurely closed unit); a RUH Update does the same swap. The checks
recompute that per device command (the agent splits ops at MDTS, and the split
changes the arithmetic) and compare with the log pages read before and after.

Each check is ``{"check": name, "ok": bool, "expected": .., "observed": ..}`` so
the replayer can put them in result.json as they are.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from devicemodels.jit import njit

from devicemodels.base import OP_RUH_UPDATE, OP_TRIM, OP_WRITE, OP_ZONE_APPEND, OP_ZONE_FINISH, OP_ZONE_RESET
from kvreplay.agent.wire import expected_crc


@njit
def fdp_predict(op, npages, pid, ok, ruamw, ru_lbas, max_cmd_lbas, lbas_per_page):
    """Replay QEMU's FDP accounting; updates ``ruamw`` (per pid, in LBAs) in place.

    Returns (host LBAs written, extra media LBAs written by RU swaps, RU swaps).
    """
    host = 0
    extra = 0
    swaps = 0
    for i in range(op.shape[0]):
        if not ok[i]:
            continue
        p = pid[i]
        if op[i] == OP_WRITE:
            left = np.int64(npages[i]) * lbas_per_page
            while left > 0:
                nlb = min(left, max_cmd_lbas)  # one NVMe command
                left -= nlb
                host += nlb
                while nlb > 0:
                    if nlb < ruamw[p]:
                        ruamw[p] -= nlb
                        nlb = 0
                    else:
                        nlb -= ruamw[p]
                        extra += ruamw[p]
                        ruamw[p] = ru_lbas
                        swaps += 1
        elif op[i] == OP_RUH_UPDATE:
            if ruamw[p] > 0:
                extra += ruamw[p]
            ruamw[p] = ru_lbas
            swaps += 1
    return host, extra, swaps


@njit
def zns_predict(op, lba, npages, ok, assigned, wp, zcap, zone_lbas, lbas_per_page):
    """Replay zone write-pointer movement (LBAs, in place on ``wp``); returns the number of zone
    appends whose assigned LBA (``assigned``, in pages) was not the zone's write pointer."""
    bad = 0
    for i in range(op.shape[0]):
        if not ok[i]:
            continue
        s = lba[i] * lbas_per_page
        z = s // zone_lbas
        start = z * zone_lbas
        if op[i] == OP_WRITE:
            wp[z] = s + npages[i] * lbas_per_page
        elif op[i] == OP_ZONE_APPEND:
            if assigned[i] * lbas_per_page != wp[z]:
                bad += 1
            wp[z] += npages[i] * lbas_per_page
        elif op[i] == OP_ZONE_RESET:
            wp[z] = start
        elif op[i] == OP_ZONE_FINISH:
            wp[z] = start + zcap[z]
        if wp[z] > start + zcap[z]:
            wp[z] = start + zcap[z]
    return bad


def _ok(completion) -> np.ndarray:
    return np.asarray(completion.status) == 0


def _head(ops: dict[str, np.ndarray], n: int, key: str, dtype=np.int64) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(ops[key])[:n], dtype=dtype)


class FdpTracker:
    """Predicts QEMU's FDP counters batch by batch, for a replay that checks them at the end.

    ``before``: the logs (fdp_configs, fdp_stats, ruh_status) read before the first batch;
    ``info``: VmTarget.info. Feed each submitted batch with its (possibly partial) completion.
    """

    def __init__(self, before: dict[str, Any], info: dict[str, Any]):
        self.before = before
        self.lba_bytes = int(info["lba_bytes"])
        self.page_bytes = int(info["page_bytes"])
        self.lpp = self.page_bytes // self.lba_bytes
        self.max_cmd = int(info["max_cmd_lbas"])
        self.ru_lbas = int(before["fdp_configs"]["configs"][0]["ru_bytes"]) // self.lba_bytes
        self.ruamw = np.array([r["ruamw_lbas"] for r in before["ruh_status"]], np.int64)
        self.ruamw_one = self.ruamw.copy()  # the same stream with every write on placement id 0
        self.host = self.extra = self.swaps = 0
        self.bytes_by_pid = np.zeros(len(self.ruamw), np.int64)

    def feed(self, ops: dict[str, np.ndarray], completion) -> None:
        n = len(completion.status)
        op, pid, npg = _head(ops, n, "op", np.int8), _head(ops, n, "pid"), _head(ops, n, "npages")
        ok = _ok(completion)
        h, e, s = fdp_predict(op, npg, pid, ok, self.ruamw, self.ru_lbas, self.max_cmd, self.lpp)
        fdp_predict(op, npg, np.zeros_like(pid), ok, self.ruamw_one, self.ru_lbas, self.max_cmd, self.lpp)
        self.host += int(h)
        self.extra += int(e)
        self.swaps += int(s)
        w = ok & (op == OP_WRITE)
        self.bytes_by_pid += np.bincount(pid[w], weights=npg[w], minlength=len(self.ruamw)).astype(np.int64)[
            : len(self.ruamw)] * self.page_bytes

    def checks(self, after: dict[str, Any]) -> list[dict[str, Any]]:
        b = self.before
        d_hbmw = after["fdp_stats"]["host_bytes_written"] - b["fdp_stats"]["host_bytes_written"]
        d_mbmw = after["fdp_stats"]["media_bytes_written"] - b["fdp_stats"]["media_bytes_written"]
        host_bytes = int(self.bytes_by_pid.sum())
        media = (self.host + self.extra) * self.lba_bytes
        expected_ruamw = [int(x) for x in self.ruamw]
        observed_ruamw = [int(r["ruamw_lbas"]) for r in after["ruh_status"]]
        one = [int(x) for x in self.ruamw_one]
        return [
            {"check": "fdp_host_bytes_written", "ok": d_hbmw == host_bytes, "expected": host_bytes,
             "observed": d_hbmw, "note": "FDP statistics log HBMW delta vs bytes the agent wrote"},
            {"check": "fdp_media_bytes_written", "ok": d_mbmw == media, "expected": media, "observed": d_mbmw,
             "note": f"QEMU adds an RU's remaining bytes at each of the {self.swaps} RU swaps (RU full or RUH update)"},
            {"check": "ruh_available_media_writes", "ok": expected_ruamw == observed_ruamw,
             "expected": expected_ruamw, "observed": observed_ruamw,
             "bytes_written_by_pid": {str(p): int(v) for p, v in enumerate(self.bytes_by_pid)},
             "single_handle_would_give": one, "distinguishes_placement_ids": one != expected_ruamw,
             "note": "RUH status RUAMW (LBAs) per placement id after the stream, predicted from it; "
                     "distinguishes_placement_ids: the same stream on one handle would have left another status"},
        ]


def _zone_wps(report: list[dict]) -> np.ndarray:
    # a full zone's write pointer is undefined (QEMU reports all ones): use zslba + capacity
    return np.array([z["zslba"] + z["zcap_lbas"] if z["state"] == "full" else z["wp"] for z in report], np.int64)


class ZnsTracker:
    """Predicts every zone's write pointer batch by batch; compare with a zone report at the end."""

    def __init__(self, before: list[dict], info: dict[str, Any]):
        self.zone_lbas = int(info["zone_lbas"])
        self.lpp = int(info["page_bytes"]) // int(info["lba_bytes"])
        self.zslba = np.array([z["zslba"] for z in before], np.int64)
        self.zcap = np.array([z["zcap_lbas"] for z in before], np.int64)
        self.wp = _zone_wps(before)
        self.bad_appends = 0

    def feed(self, ops: dict[str, np.ndarray], completion) -> None:
        n = len(completion.status)
        self.bad_appends += int(zns_predict(_head(ops, n, "op", np.int8), _head(ops, n, "lba"), _head(ops, n, "npages"),
                                            _ok(completion), np.asarray(completion.lba, np.int64), self.wp, self.zcap,
                                            self.zone_lbas, self.lpp))

    def checks(self, after: list[dict]) -> list[dict[str, Any]]:
        observed = _zone_wps(after)
        bad = np.flatnonzero(observed != self.wp)
        diff = {str(int(self.zslba[i])): {"expected": int(self.wp[i]), "observed": int(observed[i])} for i in bad[:20]}
        return [
            {"check": "zone_write_pointers", "ok": len(bad) == 0, "expected": len(self.wp),
             "observed": len(self.wp) - len(bad), "mismatches": diff,
             "note": "zones whose reported write pointer equals the one the ops imply"},
            {"check": "zone_append_lbas", "ok": self.bad_appends == 0, "expected": 0, "observed": self.bad_appends,
             "note": "appends whose assigned LBA was not the zone's write pointer at the time"},
        ]


def check_fdp(before: dict[str, Any], after: dict[str, Any], ops: dict[str, np.ndarray], completion,
              info: dict[str, Any]) -> list[dict[str, Any]]:
    """One-shot form of :class:`FdpTracker` for a single stream."""
    t = FdpTracker(before, info)
    t.feed(ops, completion)
    return t.checks(after)


def check_zns(before: list[dict], after: list[dict], ops: dict[str, np.ndarray], completion,
              info: dict[str, Any]) -> list[dict[str, Any]]:
    """One-shot form of :class:`ZnsTracker` for a single stream."""
    t = ZnsTracker(before, info)
    t.feed(ops, completion)
    return t.checks(after)


def expected_read_crcs(ops: dict[str, np.ndarray], tags: np.ndarray, page_bytes: int, n: int,
                       lba_bytes: int | None = None) -> np.ndarray:
    """crc32 each read among the first ``n`` ops must return, given stamped writes with ``tags``
    (-1 where a read touches a page never written in this stream: not checkable). The agent stamps
    every LBA-sized block, so a page of ``page_bytes`` is ``page_bytes // lba_bytes`` stamped blocks."""
    lba_bytes = lba_bytes or page_bytes
    lpp = page_bytes // lba_bytes
    last: dict[int, int] = {}
    out = np.full(n, -1, np.int64)
    op = np.asarray(ops["op"])
    for i in range(n):
        lba, k = int(ops["lba"][i]), int(ops["npages"][i])
        if op[i] == OP_WRITE:
            for p in range(lba, lba + k):
                last[p] = int(tags[i])
        elif op[i] == OP_TRIM:
            for p in range(lba, lba + k):
                last.pop(p, None)
        elif op[i] == 0:  # read
            ts = [last.get(p) for p in range(lba, lba + k)]
            if all(t is not None for t in ts) and len(set(ts)) == 1:
                out[i] = expected_crc(lba * lpp, k * lpp, lba_bytes, ts[0])
    return out


def check_roundtrip(ops: dict[str, np.ndarray], tags: np.ndarray, completion, page_bytes: int,
                    lba_bytes: int | None = None) -> dict[str, Any]:
    n = len(completion.status)
    exp = expected_read_crcs(ops, tags, page_bytes, n, lba_bytes)
    m = exp >= 0
    got = np.asarray(completion.crc[:n], np.int64)
    bad = np.flatnonzero(m & (got != exp))
    return {"check": "read_roundtrip", "ok": bool(m.any()) and len(bad) == 0, "expected": int(m.sum()),
            "observed": int(m.sum() - len(bad)), "first_bad_op": int(bad[0]) if len(bad) else None,
            "note": "reads whose crc32 equals that of the stamped data last written there"}


class FemuFdpTracker:
    """What FEMU's FDP log pages must show after a stream (hw/femu/bbssd/ftl-fdp.c).

    FEMU counts flash: host bytes written (HBMW) rise by each write's bytes, media bytes (MBMW) by those
    plus GC copies, media bytes erased (MBE) by erased reclaim units. Its RUH status RUAMW starts at
    ``ru_bytes / LBA size`` and drops by one per *page* written into the handle's reclaim unit (FEMU's
    own accounting). So exactly predictable: HBMW = bytes the agent wrote; MBMW >= HBMW; and, while no
    handle fills its reclaim unit and no GC ran (MBE unchanged), RUAMW(pid) falls by the pages written
    with that placement id and by nothing else. With GC or RU switches the RUAMW check is left out
    (``skipped`` says why) rather than guessed.
    """

    def __init__(self, before: dict[str, Any], info: dict[str, Any]):
        self.before = before
        self.page_bytes = int(info["page_bytes"])
        self.lba_bytes = int(info["lba_bytes"])
        self.ru_bytes = int(before["fdp_configs"]["configs"][0]["ru_bytes"])
        self.ruamw0 = np.array([r["ruamw_lbas"] for r in before["ruh_status"]], np.int64)
        self.init = self.ru_bytes // self.lba_bytes
        self.ru_pages = self.ru_bytes // self.page_bytes
        self.pages_by_pid = np.zeros(len(self.ruamw0), np.int64)
        self.bytes_by_pid = np.zeros(len(self.ruamw0), np.int64)
        self.skipped: str | None = None

    def feed(self, ops: dict[str, np.ndarray], completion) -> None:
        n = len(completion.status)
        op, pid, npg = _head(ops, n, "op", np.int8), _head(ops, n, "pid"), _head(ops, n, "npages")
        w = _ok(completion) & (op == OP_WRITE)
        pages = np.bincount(pid[w], weights=npg[w], minlength=len(self.ruamw0)).astype(np.int64)[: len(self.ruamw0)]
        self.pages_by_pid += pages
        self.bytes_by_pid += pages * self.page_bytes

    def checks(self, after: dict[str, Any]) -> list[dict[str, Any]]:
        b, a = self.before["fdp_stats"], after["fdp_stats"]
        d_h = a["host_bytes_written"] - b["host_bytes_written"]
        d_m = a["media_bytes_written"] - b["media_bytes_written"]
        d_e = a["media_bytes_erased"] - b["media_bytes_erased"]
        host = int(self.bytes_by_pid.sum())
        out = [
            {"check": "fdp_host_bytes_written", "ok": d_h == host, "expected": host, "observed": d_h,
             "note": "FEMU's FDP statistics HBMW delta vs bytes the agent wrote"},
            {"check": "fdp_media_covers_host", "ok": d_m >= d_h, "expected": f">= {d_h}", "observed": d_m,
             "note": "FEMU's MBMW delta (host writes plus GC copies) is at least its HBMW delta"},
        ]
        used0 = self.init - self.ruamw0  # pages already in each handle's open RU
        fills = used0 + self.pages_by_pid >= self.ru_pages
        if d_e:
            self.skipped = f"GC erased {d_e} bytes during the stream: RUAMW depends on FEMU's GC, not predicted"
        elif fills.any():
            self.skipped = (f"placement ids {[int(i) for i in np.flatnonzero(fills)]} filled a reclaim unit: "
                            f"RUAMW after an RU switch is not predicted")
        else:
            expected = [int(x) for x in self.ruamw0 - self.pages_by_pid]
            observed = [int(r["ruamw_lbas"]) for r in after["ruh_status"]]
            out.append({"check": "ruh_available_media_writes", "ok": expected == observed, "expected": expected,
                        "observed": observed,
                        "pages_written_by_pid": {str(p): int(v) for p, v in enumerate(self.pages_by_pid)},
                        "distinguishes_placement_ids": len(set(self.pages_by_pid.tolist())) > 1,
                        "note": "FEMU's RUH status RUAMW per placement id: its value before minus the pages "
                                "written with that id (FEMU decrements RUAMW by one per page)"})
        return out
