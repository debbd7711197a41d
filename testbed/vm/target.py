"""VmTarget: the replayer's target for a running VM (same shape as a device model).

``submit(ops)`` takes an op batch in the devicemodels.base format, sends it to
the guest agent in chunks of ``batch_ops`` with at most ``inflight`` chunks
outstanding (so the agent always has the next chunk queued while the host
handles a reply), and returns a :class:`VmCompletion`:

- ``lat_ns``: the guest-measured latency of each op (the sum of its NVMe
  commands' ioctl times, or of its CXL load/store);
- ``done_ns = arrival_ns + lat_ns``, so latency = done - arrival exactly as for
  the models (guest wall time and trace time are different clocks);
- ``lba``: the LBA the device assigned to a zone append (-1 for other ops);
- ``status``, ``ncmds``, ``crc``, ``guest_done_ns`` for checks.

If the device refuses an op, the agent stops that stream (later chunks already
queued are skipped, not run) and :class:`VmOpError` carries the completion of
every op that ran, the refused one included. A VM that dies or an agent that
stops answering raises :class:`VmDied` / :class:`AgentTimeout` within the
reply timeout, again with ``partial`` set to what completed before.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from devicemodels.base import OP_DTYPES, OP_NAMES, Completion
from kvreplay.agent.hist import percentiles
from kvreplay.agent.wire import DONE_COLUMNS, NOT_RUN, OP_COLUMNS, PAYLOAD_COLUMNS, SCAN_COLUMNS
from kvbed.core.atomicio import write_json
from kvbed.core.errors import KvbedError
from testbed.vm.client import AgentError, AgentTimeout, VmDied, VmError
from testbed.vm.vm import Vm

FIO_PERCENTILES = (1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 99, 99.5, 99.9, 99.95, 99.99)


@dataclass(frozen=True)
class VmCompletion(Completion):
    lat_ns: np.ndarray  # int64 guest-measured latency per op
    status: np.ndarray  # int32: 0 ok, >0 NVMe status, <0 -errno, NOT_RUN
    ncmds: np.ndarray  # int32 device commands per op
    crc: np.ndarray  # uint32 crc32 of read data (with crc=True)
    guest_done_ns: np.ndarray  # int64 guest monotonic ns at completion (since the agent started)

    def __len__(self) -> int:
        return len(self.done_ns)

    @classmethod
    def empty(cls) -> "VmCompletion":
        z64 = np.zeros(0, np.int64)
        return cls(done_ns=z64, lba=z64, lat_ns=z64, status=np.zeros(0, np.int32), ncmds=np.zeros(0, np.int32),
                   crc=np.zeros(0, np.uint32), guest_done_ns=z64)

    @classmethod
    def concat(cls, parts: list["VmCompletion"]) -> "VmCompletion":
        if not parts:
            return cls.empty()
        return cls(**{f: np.concatenate([getattr(p, f) for p in parts]) for f in
                      ("done_ns", "lba", "lat_ns", "status", "ncmds", "crc", "guest_done_ns")})


class VmOpError(VmError):
    """The device (or the agent's checks) refused an op; ``partial`` = completions up to and including it."""


class VmTarget:
    def __init__(self, vm: Vm | str, *, batch_ops: int = 256, inflight: int = 2, reply_timeout_s: float = 60.0,
                 stamp: bool = False, crc: bool = False, page_bytes: int | None = None):
        if batch_ops < 1 or inflight < 1:
            raise KvbedError("batch_ops and inflight must be >= 1")
        self.vm = Vm.attach(vm) if isinstance(vm, str) else vm
        self.batch_ops = batch_ops
        self.inflight = inflight
        self.reply_timeout_s = reply_timeout_s
        self.stamp = stamp
        self.crc = crc
        self.client = self.vm.client()
        self._group = 0
        self._last_counters: dict[str, Any] = {}
        h, _ = self.client.request("hello", timeout_s=reply_timeout_s)
        token = self.vm.state.token
        if token and h.get("token") != token:
            self.client.close()
            raise AgentError(f"VM {self.vm.name}: port {self.vm.port} answers, but not with this VM's agent "
                             f"(token {h.get('token')!r})")
        if h.get("setup_error"):
            raise AgentError(f"VM {self.vm.name}: device setup failed in the guest: {h['setup_error']}")
        self.hello = h
        self.info: dict[str, Any] = dict(h["info"])
        # ops are in pages of the model's page size (FlashParams.page_bytes the VM was started with); the
        # agent turns pages into LBAs, so a page may span several LBAs
        if page_bytes is None:
            page_bytes = int((self.vm.state.params.get("flash") or {}).get("page_bytes") or 4096)
        if self.info["kind"] == "cxl":
            total = int(self.info["dax_bytes"])
            unit = 64
        else:
            unit = int(self.info["lba_bytes"])
            total = int(self.info["nlb"]) * unit
        if page_bytes < unit or page_bytes % unit:
            raise KvbedError(f"VM {self.vm.name}: page_bytes ({page_bytes}) must be a multiple of {unit}")
        self._extra = {"page_bytes": page_bytes}
        self.info["page_bytes"] = page_bytes
        self.info["capacity_pages"] = total // page_bytes
        self._last_counters = h.get("counters") or {}

    # --- the DeviceModel-like surface the replayer uses ----------------------------------------
    @property
    def name(self) -> str:
        return self.vm.device

    @property
    def page_bytes(self) -> int:
        return int(self.info["page_bytes"])

    @property
    def logical_pages(self) -> int:
        return int(self.info["capacity_pages"])

    @property
    def n_placement_ids(self) -> int:
        return int(self.info.get("nruh") or 1) if self.info.get("fdp") else 1

    @property
    def zone_pages(self) -> int:
        return int(self.info.get("zone_lbas") or 0) * int(self.info.get("lba_bytes") or 1) // self.page_bytes

    def submit(self, ops: dict[str, np.ndarray]) -> VmCompletion:
        cols = _check_ops(ops)
        n = len(cols["op"])
        if n == 0:
            return VmCompletion.empty()
        self._group += 1
        header = {"group": self._group, "stop_on_error": True, "stamp": self.stamp, "crc": self.crc, **self._extra}
        if "tag" in ops:
            cols["tag"] = np.ascontiguousarray(ops["tag"], np.int64)
        op_cols = OP_COLUMNS + ((("tag", "q"),) if "tag" in cols else ())
        if "wid" in ops:  # object payloads (kvreplay.agent.payload) instead of filler
            for k, code in PAYLOAD_COLUMNS:
                cols[k] = np.ascontiguousarray(ops[k], _NP[code])
            op_cols += PAYLOAD_COLUMNS
        parts: list[VmCompletion] = []
        pending: deque[tuple[int, int, int]] = deque()  # (request id, start, end)
        next_start = 0
        failure: VmError | None = None
        arrival = cols["arrival_ns"]
        try:
            while next_start < n or pending:
                while next_start < n and len(pending) < self.inflight and failure is None:
                    a, b = next_start, min(n, next_start + self.batch_ops)
                    chunk = {k: cols[k][a:b] for k, _ in op_cols}
                    rid = self.client.send("ops", dict(header, first_index=a), chunk, op_cols, timeout_s=self.reply_timeout_s)
                    pending.append((rid, a, b))
                    next_start = b
                if not pending:
                    break
                rid, a, b = pending.popleft()
                h, arr = self.client.recv(rid, timeout_s=self.reply_timeout_s, what=f"ops {a}..{b - 1}")
                self._last_counters = h.get("counters") or self._last_counters
                ran = int(h.get("ran", 0))
                if failure is None and ran:
                    parts.append(_completion(arr, arrival[a:a + ran], ran))
                if h.get("error") and failure is None:
                    failure = VmOpError(f"VM {self.vm.name}: {h['error']}")
                if failure is not None:
                    next_start = n  # send nothing more; drain what is queued (the agent skips it)
        except (AgentTimeout, VmDied, AgentError) as exc:
            exc.partial = VmCompletion.concat(parts)
            raise
        if failure is not None:
            failure.partial = VmCompletion.concat(parts)
            raise failure
        return VmCompletion.concat(parts)

    def counters(self) -> dict[str, int]:
        """Cumulative agent counters (as of the last reply): ops per type, commands, bytes."""
        c = self._last_counters or {}
        out = {f"ops_{k}": int(v) for k, v in (c.get("ops") or {}).items()}
        for k in ("commands", "bytes_written", "bytes_read", "bytes_trimmed", "errors"):
            out[k] = int(c.get(k, 0))
        return out

    def stats(self) -> dict[str, Any]:
        """fio-shaped summary from the guest: latency percentiles per op type and the agent's counters."""
        h = self.histograms()
        return {"source": "vm", "vm": self.vm.name, "device": self.vm.device, "accel": self.vm.state.accel,
                "latency": h, "counters": self.counters(), "bytes_written_by_pid": self.bytes_written_by_pid()}

    # --- collectors --------------------------------------------------------------------------------
    def logs(self, names: list[str] | None = None) -> dict[str, Any]:
        h, _ = self.client.request("log", {"names": names} if names else {}, timeout_s=self.reply_timeout_s)
        if h.get("errors"):
            bad = "; ".join(f"{k}: {v}" for k, v in h["errors"].items())
            raise AgentError(f"VM {self.vm.name}: log pages failed: {bad}")
        return h["logs"]

    def histograms(self) -> dict[str, Any]:
        """Guest-side latency histograms per op type, with percentiles at fio's list (ns)."""
        h, _ = self.client.request("hist", timeout_s=self.reply_timeout_s)
        self._last_counters = h.get("counters") or self._last_counters
        out = {}
        for op, d in h["hists"].items():
            out[op] = {
                "n": d["n"], "min_ns": d["min_ns"], "max_ns": d["max_ns"], "sum_ns": d["sum_ns"],
                "mean_ns": d["sum_ns"] // max(1, d["n"]),
                "percentiles_ns": percentiles(d["buckets"], list(FIO_PERCENTILES)),
                "buckets": d["buckets"],
            }
        return out

    def collect(self, run_dir: str | Path | None = None) -> dict[str, Any]:
        """Everything the guest can tell about the run; written as vm.json into ``run_dir`` if given."""
        out = {
            "vm": {"name": self.vm.name, "device": self.vm.device, "accel": self.vm.state.accel,
                   "boot_s": self.vm.state.boot_s, "image": self.vm.state.image, "params": self.vm.state.params,
                   "agent": {k: self.hello.get(k) for k in ("agent_version", "kernel", "python")}},
            "device_info": self.info,
            "logs": self.logs(),
            "latency": self.histograms(),
            "counters": self.counters(),
            "bytes_written_by_pid": self.bytes_written_by_pid(),
        }
        if run_dir is not None:
            write_json(Path(run_dir) / "vm.json", out)
        return out

    def reset_counters(self) -> None:
        self.client.request("reset", timeout_s=self.reply_timeout_s)
        self._last_counters = {}

    def bytes_written_by_pid(self) -> dict[str, int]:
        """Bytes the agent wrote with each placement id (as of the last reply)."""
        return {k: int(v) for k, v in ((self._last_counters or {}).get("bytes_written_by_pid") or {}).items()}

    def scan(self, extents: dict[str, np.ndarray], *, chunk_bytes: int = 256 << 20) -> dict[str, Any]:
        """Read back object payloads (``extents``: SCAN_COLUMNS, one row per extent, a write's rows together)
        and classify each write in the guest; a request holds whole writes of about ``chunk_bytes`` (at least
        one), so each answers well within the reply timeout (about 200 MB/s under TCG)."""
        chunk_pages = max(1, chunk_bytes // self.page_bytes)
        n = len(extents["wid"])
        cols = {k: np.ascontiguousarray(extents[k], _NP[c]) for k, c in SCAN_COLUMNS}
        starts = np.flatnonzero(np.r_[True, cols["wid"][1:] != cols["wid"][:-1]]) if n else np.zeros(0, np.int64)
        bounds = np.r_[starts, n]  # extent index where each write starts, then the end
        cum = np.r_[0, np.cumsum(cols["npages"], dtype=np.int64)][bounds]  # pages before each bound
        parts: dict[str, list[np.ndarray]] = {"wid": [], "status": [], "present": []}
        totals: dict[str, Any] = {"writes": 0, "pages_read": 0, "pages_probed": 0, "bytes_read": 0, "read_ns": 0,
                                  "check_ns": 0, "requests": 0}
        aw = 0
        while aw < len(starts):
            bw = max(aw + 1, int(np.searchsorted(cum, cum[aw] + chunk_pages, side="right")) - 1)
            a, b = int(bounds[aw]), int(bounds[bw])
            chunk = {k: cols[k][a:b] for k, _ in SCAN_COLUMNS}
            h, arr = self.client.request("scan", {"page_bytes": self.page_bytes}, chunk, SCAN_COLUMNS,
                                         timeout_s=self.reply_timeout_s)
            if not h.get("ok", True):
                raise AgentError(f"VM {self.vm.name}: scan failed: {h.get('error')}")
            for k in parts:
                parts[k].append(arr[k])
            for k in ("writes", "pages_read", "pages_probed", "bytes_read", "read_ns", "check_ns"):
                totals[k] += int(h.get(k, 0))
            totals["requests"] += 1
            totals["crc32c"] = h.get("crc32c")
            aw = bw
        out = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in parts.items()}
        return {**out, "totals": totals}

    # --- fault injection (tests) ----------------------------------------------------------------------
    def inject(self, fault: str, **kw) -> None:
        """Ask the agent to ``stall`` (stop answering for kw['seconds']) or ``crash`` (panic the guest)."""
        if fault not in ("stall", "crash"):
            raise KvbedError(f"unknown fault {fault!r}")
        self.client.send(fault, kw)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "VmTarget":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def merge_histograms(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Guest latency histograms of several agent lifetimes (a VM restarted mid-run) as one, per op type."""
    out: dict[str, Any] = {}
    for part in parts:
        for op, d in (part or {}).items():
            m = out.setdefault(op, {"n": 0, "min_ns": None, "max_ns": 0, "sum_ns": 0, "counts": {}})
            if d["n"]:
                m["min_ns"] = d["min_ns"] if m["min_ns"] is None else min(m["min_ns"], d["min_ns"])
            m["n"] += d["n"]
            m["max_ns"] = max(m["max_ns"], d["max_ns"])
            m["sum_ns"] += d["sum_ns"]
            for idx, c in d["buckets"]:
                m["counts"][idx] = m["counts"].get(idx, 0) + c
    for op, m in out.items():
        buckets = sorted(m.pop("counts").items())
        m["min_ns"] = m["min_ns"] or 0
        m["mean_ns"] = m["sum_ns"] // max(1, m["n"])
        m["percentiles_ns"] = percentiles(buckets, list(FIO_PERCENTILES))
        m["buckets"] = buckets
    return out


_NP = {"b": np.int8, "h": np.int16, "i": np.int32, "q": np.int64, "I": np.uint32}


def _check_ops(ops: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    missing = [k for k in ("op", "lba", "npages") if k not in ops]
    if missing:
        raise KvbedError(f"op batch is missing columns: {', '.join(missing)}")
    n = len(ops["op"])
    cols = {}
    for k, dt in OP_DTYPES.items():
        v = ops.get(k)
        if v is None:
            v = np.zeros(n, dt)
        v = np.ascontiguousarray(v, dtype=dt)
        if len(v) != n:
            raise KvbedError(f"op batch column {k} has {len(v)} rows, expected {n}")
        cols[k] = v
    bad = np.flatnonzero((cols["op"] < 0) | (cols["op"] >= len(OP_NAMES)))
    if len(bad):
        raise KvbedError(f"op batch row {bad[0]}: unknown op code {cols['op'][bad[0]]}")
    return cols


def _completion(arr: dict[str, np.ndarray], arrival: np.ndarray, ran: int) -> VmCompletion:
    lat = arr["lat_ns"][:ran].astype(np.int64)
    status = arr["status"][:ran].astype(np.int32)
    assert not np.any(status == NOT_RUN), "agent reported ran ops as not run"
    return VmCompletion(done_ns=arrival[:ran].astype(np.int64) + lat, lba=arr["lba_out"][:ran].astype(np.int64),
                        lat_ns=lat, status=status, ncmds=arr["ncmds"][:ran].astype(np.int32),
                        crc=arr["crc"][:ran].astype(np.uint32), guest_done_ns=arr["done_ns"][:ran].astype(np.int64))


_ = DONE_COLUMNS  # the reply columns _completion reads
