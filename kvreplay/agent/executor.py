"""Run one op batch against the guest's device and measure every op.

An op becomes one or more device commands (split at MDTS, ZASL, the DSM range
limit); its latency is the sum of its commands' times measured around the
ioctl (buffer preparation excluded). After the first refused op the rest of the
batch is not run (status NOT_RUN) unless ``stop_on_error`` is false, so the host
knows exactly which prefix reached the device.
"""

from __future__ import annotations

import array
import errno
import time
import zlib

from .hist import Histogram
from .nvme import ZSA_FINISH, ZSA_RESET, NvmeDevice, NvmeError
from .payload import HEADER_BYTES, MISSING, TORN, Crc32c, classify, page_matches, stamp, write_crc
from .wire import (NOT_RUN, OP_NAMES, OP_READ, OP_RUH_UPDATE, OP_TRIM, OP_WRITE, OP_ZONE_APPEND, OP_ZONE_FINISH,
                   OP_ZONE_RESET, STAMP, FILLER)

_clock = time.perf_counter_ns


_ZERO_HEADER = bytes(HEADER_BYTES)
PROBE_MIN_LBAS = 8  # pages of at least this many LBAs are probed for their stamps before being read whole


def not_run(n: int) -> dict:
    """Completion columns for ``n`` ops that were not run."""
    return {"status": array.array("i", [NOT_RUN]) * n, "lat_ns": array.array("q", [0]) * n,
            "done_ns": array.array("q", [0]) * n, "lba_out": array.array("q", [-1]) * n,
            "ncmds": array.array("i", [0]) * n, "crc": array.array("I", [0]) * n}


class OpRefused(Exception):
    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


class Counters:
    """Cumulative per-agent counters (reported by ``hello``/``stats`` and kept across batches)."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.ops = [0] * len(OP_NAMES)
        self.commands = 0
        self.bytes_written = 0
        self.bytes_read = 0
        self.bytes_trimmed = 0
        self.bytes_written_by_pid: dict[int, int] = {}
        self.errors = 0
        self.hists = {name: Histogram() for name in OP_NAMES}

    def to_dict(self) -> dict:
        return {
            "ops": dict(zip(OP_NAMES, self.ops)),
            "commands": self.commands,
            "bytes_written": self.bytes_written,
            "bytes_read": self.bytes_read,
            "bytes_trimmed": self.bytes_trimmed,
            "bytes_written_by_pid": {str(k): v for k, v in sorted(self.bytes_written_by_pid.items())},
            "errors": self.errors,
        }


class BaseExecutor:
    kind = "base"
    page_bytes = 4096
    capacity_pages = 0

    def __init__(self):
        self.counters = Counters()
        self.epoch = _clock()

    def info(self) -> dict:
        raise NotImplementedError

    def run(self, cols: dict, *, stop_on_error: bool = True, stamp: bool = False, crc: bool = False,
            first_index: int = 0) -> tuple[dict, int, str | None]:
        """Run a batch; returns (completion columns, number of ops run, first error or None)."""
        ops, lbas, nps, pids = cols["op"], cols["lba"], cols["npages"], cols["pid"]
        tags = cols.get("tag")
        wids = cols.get("wid")  # object payloads (see payload.py): write id, object, page in the write, pages
        n = len(ops)
        status = array.array("i", [NOT_RUN]) * n
        lat = array.array("q", [0]) * n
        done = array.array("q", [0]) * n
        lba_out = array.array("q", [-1]) * n
        ncmds = array.array("i", [0]) * n
        crcs = array.array("I", [0]) * n
        first_error = None
        ran = 0
        c = self.counters
        for i in range(n):
            op = ops[i]
            try:
                if not 0 <= op < len(OP_NAMES):
                    raise OpRefused(-errno.EINVAL, f"unknown op code {op}")
                tag = tags[i] if tags is not None else 0
                if wids is not None and wids[i] >= 0:
                    pl = (wids[i], cols["obj"][i], cols["wpage"][i], cols["wpages"][i])
                    t, k, out, cr = self.one(op, lbas[i], nps[i], pids[i], tag, stamp, crc, payload=pl)
                else:
                    t, k, out, cr = self.one(op, lbas[i], nps[i], pids[i], tag, stamp, crc)
                status[i] = 0
                lat[i] = t
                lba_out[i] = out
                ncmds[i] = k
                crcs[i] = cr
                c.ops[op] += 1
                c.commands += k
                c.hists[OP_NAMES[op]].add(t)
            except (OpRefused, NvmeError) as exc:
                status[i] = exc.status
                c.errors += 1
                if first_error is None:
                    name = OP_NAMES[op] if 0 <= op < len(OP_NAMES) else f"op {op}"
                    first_error = f"op {first_index + i} ({name} lba={lbas[i]} npages={nps[i]} pid={pids[i]}): {exc}"
            done[i] = _clock() - self.epoch
            ran = i + 1
            if first_error is not None and stop_on_error:
                break
        out = {"status": status, "lat_ns": lat, "done_ns": done, "lba_out": lba_out, "ncmds": ncmds, "crc": crcs}
        return out, ran, first_error

    def one(self, op, lba, npages, pid, tag, stamp, crc, payload=None):  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_range(self, lba: int, npages: int) -> None:
        if npages < 1:
            raise OpRefused(-errno.EINVAL, f"npages must be >= 1, got {npages}")
        if lba < 0 or lba + npages > self.capacity_pages:
            raise OpRefused(-errno.ERANGE, f"pages [{lba}, {lba + npages}) outside the device's {self.capacity_pages} pages")


class NvmeExecutor(BaseExecutor):
    """Ops in pages of ``page_bytes`` (the host's unit, a multiple of the LBA size) -> NVMe commands in LBAs."""

    kind = "nvme"

    def __init__(self, dev: NvmeDevice):
        super().__init__()
        self.dev = dev
        self.ns = dev.info
        self.lba_bytes = self.ns.lba_bytes
        self.buf = dev.buf
        self.buf.mem[:] = bytes([0x5A]) * len(self.buf.mem)
        self.set_page_bytes(self.lba_bytes)
        self.crc32c = Crc32c()
        self._crcs: dict[tuple[int, int], int] = {}  # (write id, page_bytes) -> CRC32C of its payload (recent)
        self._zeroed = False  # the DMA buffer is zeros but for the stamps at self._stamped
        self._stamped: list[int] = []

    def set_page_bytes(self, page_bytes: int) -> None:
        if page_bytes < self.lba_bytes or page_bytes % self.lba_bytes:
            raise OpRefused(-errno.EINVAL, f"page_bytes ({page_bytes}) must be a multiple of the LBA size ({self.lba_bytes})")
        if self.ns.zoned and (self.ns.zone_lbas * self.lba_bytes) % page_bytes:
            raise OpRefused(-errno.EINVAL, f"page_bytes ({page_bytes}) must divide the zone size")
        self.page_bytes = page_bytes
        self.lpp = page_bytes // self.lba_bytes
        self.capacity_pages = self.ns.nlb // self.lpp

    def info(self) -> dict:
        return {"kind": "nvme", "page_bytes": self.page_bytes, "capacity_pages": self.capacity_pages,
                "crc32c": self.crc32c.source, **self.ns.to_dict()}

    def _stamp(self, slba: int, nlb: int, tag: int) -> None:
        """Each LBA-sized block starts with (its LBA, tag)."""
        mem, bs = self.buf.mem, self.lba_bytes
        filler = FILLER(bs)
        for j in range(nlb):
            off = j * bs
            STAMP.pack_into(mem, off, slba + j, tag)
            mem[off + STAMP.size: off + bs] = filler

    def _payload_crc(self, wid: int, obj: int, npages: int) -> int:
        key = (wid, self.page_bytes)
        c = self._crcs.get(key)
        if c is None:
            if len(self._crcs) >= 64:
                self._crcs.pop(next(iter(self._crcs)))
            c = self._crcs[key] = write_crc(obj, wid, 0, npages, self.page_bytes)
        return c

    def _stamp_pages(self, first_lba: int, nlb: int, page0_lba: int, payload: tuple, crc: int) -> None:
        """The buffer for one command of a payload write: zeros, and a stamp where each page starts
        (``page0_lba``: where the op's first page, page ``wpage`` of its write, starts)."""
        mem, bs, pb = self.buf.mem, self.lba_bytes, self.page_bytes
        if not self._zeroed:
            mem[:] = bytes(len(mem))
            self._zeroed, self._stamped = True, []
        for off in self._stamped:
            mem[off: off + HEADER_BYTES] = _ZERO_HEADER
        self._stamped = []
        wid, obj, wpage, wpages = payload
        j = -(-(first_lba - page0_lba) // self.lpp)  # the op's first page that starts in this command
        start = page0_lba + j * self.lpp
        while start < first_lba + nlb:
            off = (start - first_lba) * bs
            stamp(mem, off, obj, wid, 0, wpage + j, wpages, pb, crc)
            self._stamped.append(off)
            j += 1
            start += self.lpp

    def one(self, op, lba, npages, pid, tag, stamp, crc, payload=None):
        if payload is None or op != OP_WRITE:
            self._zeroed = False  # reads, filler and the device's other commands use the buffer
        dev, ns = self.dev, self.ns
        addr = self.buf.addr
        lpp, bs = self.lpp, self.lba_bytes
        spent = 0
        ncmd = 0
        out = -1
        cr = 0
        if op == OP_WRITE or op == OP_READ:
            self._check_range(lba, npages)
            dspec = None
            if op == OP_WRITE and ns.fdp:
                if not 0 <= pid < ns.nruh:
                    raise OpRefused(-errno.EINVAL, f"placement id {pid} outside the namespace's {ns.nruh} handles")
                dspec = pid
            step = ns.max_cmd_lbas
            pos, left = lba * lpp, npages * lpp
            pcrc = None
            if payload is not None and op == OP_WRITE:
                wid, obj, wpage, wpages = payload
                if not 0 <= wpage <= wpage + npages <= wpages:
                    raise OpRefused(-errno.EINVAL, f"payload pages [{wpage}, {wpage + npages}) outside the write's {wpages}")
                pcrc = self._payload_crc(wid, obj, wpages)
            while left:
                k = min(step, left)
                if op == OP_WRITE:
                    if pcrc is not None:
                        self._stamp_pages(pos, k, lba * lpp, payload, pcrc)
                    elif stamp:
                        self._stamp(pos, k, tag)
                    t0 = _clock()
                    dev.write(pos, k, addr, dspec=dspec)
                    spent += _clock() - t0
                else:
                    t0 = _clock()
                    dev.read(pos, k, addr)
                    spent += _clock() - t0
                    if crc:
                        cr = zlib.crc32(self.buf.view[: k * bs], cr)
                ncmd += 1
                pos += k
                left -= k
            nbytes = npages * self.page_bytes
            if op == OP_WRITE:
                self.counters.bytes_written += nbytes
                bp = self.counters.bytes_written_by_pid
                key = pid if ns.fdp else 0
                bp[key] = bp.get(key, 0) + nbytes
            else:
                self.counters.bytes_read += nbytes
        elif op == OP_TRIM:
            self._check_range(lba, npages)
            ranges = []
            pos, left = lba * lpp, npages * lpp
            while left:
                k = min(ns.max_trim_lbas, left)
                ranges.append((pos, k))
                pos += k
                left -= k
            for j in range(0, len(ranges), 256):
                t0 = _clock()
                dev.deallocate(ranges[j: j + 256])
                spent += _clock() - t0
                ncmd += 1
            self.counters.bytes_trimmed += npages * self.page_bytes
        elif op == OP_ZONE_APPEND:
            if not ns.zoned:
                raise OpRefused(-errno.EOPNOTSUPP, "zone append on a namespace that is not zoned")
            self._check_range(lba, npages)
            slba = lba * lpp
            zslba = slba - slba % ns.zone_lbas
            left = npages * lpp
            step = ns.zasl_lbas - ns.zasl_lbas % lpp if ns.zasl_lbas >= lpp else ns.zasl_lbas
            while left:
                k = min(step, left)
                if stamp:  # the LBA is the device's choice: stamp the tag only
                    self._stamp(-1, k, tag)
                t0 = _clock()
                got = dev.zone_append(zslba, k, addr)
                spent += _clock() - t0
                if out < 0:
                    out = got // lpp
                ncmd += 1
                left -= k
            self.counters.bytes_written += npages * self.page_bytes
            bp = self.counters.bytes_written_by_pid
            bp[0] = bp.get(0, 0) + npages * self.page_bytes
        elif op == OP_ZONE_RESET or op == OP_ZONE_FINISH:
            if not ns.zoned:
                raise OpRefused(-errno.EOPNOTSUPP, f"{OP_NAMES[op]} on a namespace that is not zoned")
            if not 0 <= lba < self.capacity_pages:
                raise OpRefused(-errno.ERANGE, f"page {lba} outside the device's {self.capacity_pages} pages")
            slba = lba * lpp
            t0 = _clock()
            dev.zone_action(slba - slba % ns.zone_lbas, ZSA_RESET if op == OP_ZONE_RESET else ZSA_FINISH)
            spent += _clock() - t0
            ncmd = 1
        elif op == OP_RUH_UPDATE:
            if not ns.fdp:
                raise OpRefused(-errno.EOPNOTSUPP, "RUH update on a device without FDP")
            if not 0 <= pid < ns.nruh:
                raise OpRefused(-errno.EINVAL, f"placement id {pid} outside the namespace's {ns.nruh} handles")
            t0 = _clock()
            dev.ruh_update([pid])
            spent += _clock() - t0
            ncmd = 1
        return spent, ncmd, out, cr

    def scan(self, cols: dict) -> tuple[dict, dict]:
        """Read back writes and classify each (payload.classify). ``cols``: one row per extent (wid, obj, lba,
        npages, wpage, wpages), a write's extents consecutive; returns per write (wid, status, present).

        Pages of several LBAs are probed first (their stamp is in the first LBA): a write with a page missing
        is torn or missing without reading the rest of it; one with every page there is read whole for its
        CRC."""
        self._zeroed = False
        wids, objs, lbas, nps = cols["wid"], cols["obj"], cols["lba"], cols["npages"]
        wpage, wpages = cols["wpage"], cols["wpages"]
        pb, lpp, bs = self.page_bytes, self.lpp, self.lba_bytes
        out_wid, out_status, out_present = array.array("q"), array.array("b"), array.array("i")
        pages_read = probes = 0
        read_ns = check_ns = 0
        n = len(wids)
        i = 0
        while i < n:
            wid, obj, total = wids[i], objs[i], wpages[i]
            j = i
            while j < n and wids[j] == wid:
                self._check_range(lbas[j], nps[j])
                if not 0 <= wpage[j] <= wpage[j] + nps[j] <= total:
                    raise OpRefused(-errno.EINVAL, f"scan: write {wid}: pages [{wpage[j]}, {wpage[j] + nps[j]}) "
                                                   f"outside its {total}")
                j += 1
            if lpp >= PROBE_MIN_LBAS:
                present = 0
                t0 = _clock()
                for e in range(i, j):
                    for q in range(nps[e]):
                        self.dev.read((lbas[e] + q) * lpp, 1, self.buf.addr)
                        present += page_matches(self.buf.view, obj, wid, wpage[e] + q)
                read_ns += _clock() - t0
                probes += sum(nps[e] for e in range(i, j))
                if present < total:
                    out_wid.append(wid)
                    out_status.append(TORN if present else MISSING)
                    out_present.append(present)
                    i = j
                    continue
            t0 = _clock()
            data = bytearray(total * pb)
            for e in range(i, j):
                pos, left, dst = lbas[e] * lpp, nps[e] * lpp, wpage[e] * pb
                while left:
                    k = min(self.ns.max_cmd_lbas, left)
                    self.dev.read(pos, k, self.buf.addr)
                    data[dst: dst + k * bs] = self.buf.view[: k * bs]
                    pos += k
                    left -= k
                    dst += k * bs
                pages_read += nps[e]
            t1 = _clock()
            st, present = classify(data, obj, wid, total, pb, self.crc32c)
            read_ns += t1 - t0
            check_ns += _clock() - t1
            out_wid.append(wid)
            out_status.append(st)
            out_present.append(present)
            i = j
        return ({"wid": out_wid, "status": out_status, "present": out_present},
                {"writes": len(out_wid), "pages_read": pages_read, "pages_probed": probes,
                 "bytes_read": pages_read * pb + probes * bs, "crc32c": self.crc32c.source,
                 "read_ns": read_ns, "check_ns": check_ns})

    def log(self, name: str):
        self._zeroed = False
        dev = self.dev
        if name == "smart":
            return dev.smart()
        if name == "zone_report":
            if not self.ns.zoned:
                raise OpRefused(-errno.EOPNOTSUPP, "zone report on a namespace that is not zoned")
            return dev.zone_report()
        if name.startswith("fdp_") or name == "ruh_status":
            if not self.ns.fdp:
                raise OpRefused(-errno.EOPNOTSUPP, f"{name}: the device has no FDP")
            return {"ruh_status": dev.ruh_status, "fdp_configs": dev.fdp_configs, "fdp_stats": dev.fdp_stats,
                    "fdp_usage": dev.fdp_usage, "fdp_events": dev.fdp_events}.get(name, _unknown(name))()
        return _unknown(name)()

    def log_names(self) -> list[str]:
        names = ["smart"]
        if self.ns.zoned:
            names.append("zone_report")
        if self.ns.fdp:
            names += ["fdp_configs", "ruh_status", "fdp_stats", "fdp_usage", "fdp_events"]
        return names


def _unknown(name):
    def f():
        raise OpRefused(-errno.EINVAL, f"unknown log {name!r}")

    return f
