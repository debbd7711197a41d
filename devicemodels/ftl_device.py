"""Python side of the page-mapped FTL devices (``conv`` and ``fdp``): batch checks,
kernel calls, counters, fio-shaped stats and preconditioning.

Everything per page happens in :mod:`devicemodels.ftl_kernel`; this class only
validates whole batches with numpy (so a bad op is refused before anything
runs) and turns kernel errors into one-line :class:`KvbedError`s.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

import numpy as np
from devicemodels.jit import njit

from devicemodels import ftl_kernel as K
from devicemodels import ftl_state as S
from devicemodels.base import (
    GC_POLICIES, OP_DTYPES, OP_NAMES, OP_READ, OP_RUH_UPDATE, OP_TRIM, OP_WRITE, Completion, DeviceModel,
)
from devicemodels.histogram import LatencyHistogram, clear_rows
from devicemodels.params import FlashParams
from devicemodels.summary import latency_by_op, wear_summary
from kvbed.core.errors import KvbedError



def as_batch(ops: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """The five op columns as contiguous arrays of the contract's dtypes (no copy if already so)."""
    try:
        cols = tuple(np.ascontiguousarray(ops[k], dtype=OP_DTYPES[k]) for k in OP_DTYPES)
    except KeyError as exc:
        raise KvbedError(f"op batch is missing column {exc.args[0]!r} (need {', '.join(OP_DTYPES)})") from None
    n = len(cols[0])
    if any(len(c) != n for c in cols):
        raise KvbedError("op batch columns differ in length: " + ", ".join(f"{k}={len(c)}" for k, c in zip(OP_DTYPES, cols)))
    return cols


@njit
def _scan_batch(op, lba, npages, pid, arrival, logical_pages, allowed, n_pid):
    """First op the device must refuse: (code, index), code 0 = none. One pass, no temporaries."""
    for i in range(op.shape[0]):
        o = op[i]
        if o < 0 or o >= allowed.shape[0] or not allowed[o]:
            return 1, i
        if o == OP_READ or o == OP_WRITE or o == OP_TRIM:
            if npages[i] < 1:
                return 2, i
            if lba[i] < 0:
                return 3, i
            if lba[i] + npages[i] > logical_pages:
                return 4, i
        if n_pid >= 0 and (o == OP_WRITE or o == OP_RUH_UPDATE) and (pid[i] < 0 or pid[i] >= n_pid):
            return 5, i
        if i > 0 and arrival[i] < arrival[i - 1]:
            return 6, i
    return 0, -1


def check_batch(name: str, cols: tuple[np.ndarray, ...], logical_pages: int, allowed_ops: tuple[int, ...],
                n_pid: int | None) -> None:
    """Refuse a batch the device would reject, naming the first bad op (before anything runs)."""
    op, lba, npages, pid, arrival = cols
    if len(op) == 0:
        return
    allowed = np.zeros(len(OP_NAMES), np.bool_)
    allowed[list(allowed_ops)] = True
    code, i = _scan_batch(op, lba, npages, pid, arrival, logical_pages, allowed, -1 if n_pid is None else n_pid)
    if code == 0:
        return
    oname = OP_NAMES[op[i]] if 0 <= op[i] < len(OP_NAMES) else str(int(op[i]))
    msg = {
        1: lambda: f"operation code {int(op[i])} is not supported (supported: "
                   f"{', '.join(OP_NAMES[o] for o in allowed_ops)})",
        2: lambda: f"npages must be >= 1, got {int(npages[i])}",
        3: lambda: f"lba must be >= 0, got {int(lba[i])}",
        4: lambda: f"lba {int(lba[i])} + {int(npages[i])} pages is beyond the device's {logical_pages} logical pages",
        5: lambda: f"invalid placement id {int(pid[i])} (valid: 0..{n_pid - 1})",
        6: lambda: f"arrival_ns {int(arrival[i])} is before the previous op's {int(arrival[i - 1])}",
    }[int(code)]()
    raise KvbedError(msg, where=f"{name} op {int(i)} ({oname})")


def checked_batch(dev: DeviceModel, ops: dict[str, np.ndarray], n_pid: int | None = None) -> tuple[np.ndarray, ...]:
    """``ops`` as the contract's five columns, refused (naming the first bad op) where ``dev`` would
    reject it: an op it does not support, a range beyond its logical pages, time going backwards."""
    cols = as_batch(ops)
    check_batch(dev.name, cols, dev.logical_pages, dev.supported_ops, n_pid)
    return cols


def stall_stats(total_ns: int, per_stall: np.ndarray, per_write: np.ndarray, write_cmds: int) -> dict[str, Any]:
    """Foreground-GC stalls as a total and per write command, each figure named for what it is:

    - ``fg_stall_ns``: the SUM of every stall (a host page waiting for GC to free a line), not a duration of
      the run: stalls of different commands overlap in time, so it can exceed the run's span;
    - ``fg_stall_lat_ns``: the distribution of those stalls (one value per stall);
    - ``write_cmds``: the host write commands the device served (the denominator);
    - ``fg_stalled_write_cmds`` and ``fg_stalled_write_cmds_ratio`` (of ``write_cmds``): how many waited;
    - ``fg_stall_per_write_cmd_ns``: the wait of each command that waited (its longest stall), so its
      percentiles are among the stalled commands only.
    """
    h = LatencyHistogram(per_write)
    return {"fg_stall_ns": total_ns, "fg_stall_lat_ns": LatencyHistogram(per_stall).to_dict(),
            "write_cmds": int(write_cmds), "fg_stalled_write_cmds": h.n,
            "fg_stalled_write_cmds_ratio": h.n / write_cmds if write_cmds else 0.0,
            "fg_stall_per_write_cmd_ns": h.to_dict()}


class FtlDevice(DeviceModel):
    """A page-mapped FTL with lines, GC and timing; ``conv`` and ``fdp`` configure it."""

    param_classes: ClassVar[dict[str, type]]
    supported_ops: ClassVar[tuple[int, ...]] = (OP_READ, OP_WRITE, OP_TRIM)

    def __init__(self, flash: FlashParams | None = None, fdp=None):
        self.flash = (flash or FlashParams()).validate()
        self.geo, self.st = S.build(self.flash, fdp)
        self._err = np.zeros(3, np.int64)

    # ---------------------------------------------------------------- contract
    @property
    def page_bytes(self) -> int:
        return self.flash.page_bytes

    @property
    def logical_pages(self) -> int:
        return self.geo.L

    @property
    def physical_pages(self) -> int:
        return self.geo.P

    @property
    def write_dies(self) -> int:
        """Dies one write frontier (an open line) spreads its pages over."""
        return self.geo.w

    @property
    def placement_unit_pages(self) -> int:
        """A line: an FDP reclaim unit (``ru_bytes``), the unit a host write frontier fills."""
        return self.geo.ppl

    def _pid_column(self, pid: np.ndarray) -> tuple[np.ndarray, int | None]:
        """Placement ids as the kernel wants them, and how many are valid (None: ignored)."""
        return np.zeros_like(pid), None

    def submit(self, ops: dict[str, np.ndarray]) -> Completion:
        cols = as_batch(ops)
        op, lba, npages, pid, arrival = cols
        pid_k, n_pid = self._pid_column(pid)
        check_batch(self.name, cols, self.geo.L, self.supported_ops, n_pid)
        n = len(op)
        done = np.empty(n, np.int64)
        if n:
            self._run(K.ftl_submit, op, lba, npages, pid_k, arrival, done)
        return Completion(done_ns=done, lba=np.full(n, -1, np.int64))

    def _run(self, kernel, *args) -> None:
        err = self._err
        err[:] = 0
        kernel(self.st, self.geo, *args, err)
        if err[0]:
            code, i, detail = (int(x) for x in err)
            where = f"{self.name} op {i}"
            if code == K.ERR_OP:
                raise KvbedError(f"operation code {detail} is not supported", where=where)
            if code == K.ERR_POLICY:
                known = ", ".join(f"{n}={GC_POLICIES.get(n).code}" for n in GC_POLICIES.names())
                raise KvbedError(f"GC victim policy code {detail} is not one the FTL kernel dispatches "
                                 f"(registered: {known})", where=where)
            if code == K.ERR_STUCK:
                raise KvbedError(
                    f"garbage collection cannot free space in reclaim group {detail}: every closed line is "
                    f"full of valid data (the host placed more live data there than it holds; "
                    f"raise op_ratio or spread writes over reclaim groups)", where=where)
            raise KvbedError(f"internal error: no GC destination line in reclaim group {detail}", where=where)

    def counters(self) -> dict[str, int]:
        return dict(zip(S.COUNTER_NAMES, self.st.ctr.tolist()))

    # ---------------------------------------------------------------- preconditioning
    def precondition(self, fill_ratio: float, *, overwrite_x: float = 0.0, seed: int = 0) -> dict[str, Any]:
        """Sequentially fill ``fill_ratio`` of the logical space, then ``overwrite_x`` times that many
        uniform random overwrites within it; runs without timing and is counted apart: counters,
        histograms and die/channel clocks are reset afterwards (wear and mapping state stay)."""
        if not (0.0 < fill_ratio <= 1.0):
            raise KvbedError(f"precondition fill ratio must be in (0, 1], got {fill_ratio}")
        if overwrite_x < 0:
            raise KvbedError(f"precondition overwrite_x must be >= 0, got {overwrite_x}")
        n_fill = max(1, int(round(fill_ratio * self.geo.L)))
        n_rand = int(round(overwrite_x * n_fill))
        rng = np.random.default_rng(seed)
        chunk = 1 << 20
        for start in range(0, n_fill + n_rand, chunk):
            stop = min(start + chunk, n_fill + n_rand)
            seq = np.arange(start, min(stop, n_fill), dtype=np.int64)
            rnd = rng.integers(0, n_fill, stop - start - seq.size, dtype=np.int64)
            lbas = np.concatenate((seq, rnd))
            self._precondition_chunk(lbas)
        c = self.counters()
        out = {"fill_ratio": fill_ratio, "overwrite_x": overwrite_x, "seed": seed,
               "host_pages_written": c["host_pages_written"], "media_pages_written": c["media_pages_written"],
               "gc_pages_moved": c["gc_pages_moved"], "block_erases": c["block_erases"],
               "waf": c["media_pages_written"] / max(1, c["host_pages_written"])}
        self.reset_counters()
        return out

    def _precondition_chunk(self, lbas: np.ndarray) -> None:
        """Single-page writes without timing; reclaim group ``lba % nrg``, its first RUH."""
        n = lbas.size
        pid = ((lbas % self.geo.nrg) * self.geo.nruh).astype(np.int16)
        with self.untimed():
            self._run(K.ftl_submit, np.full(n, OP_WRITE, np.int8), lbas, np.ones(n, np.int32), pid,
                      np.zeros(n, np.int64), np.empty(n, np.int64))

    @contextlib.contextmanager
    def untimed(self):
        geo = self.geo
        self.geo = geo._replace(timing=0)
        try:
            yield self
        finally:
            self.geo = geo

    def reset_counters(self) -> None:
        """Zero counters, latency histograms and device clocks (state, wear and clock-age stay)."""
        st = self.st
        st.ctr[:] = 0
        st.fr_pages[:] = 0
        clear_rows(st.hist)
        st.die_free[:] = 0
        st.ch_free[:] = 0
        st.wbuf[:] = 0
        st.misc[S.M_BUSY_UNTIL] = 0
        st.misc[S.M_WB_POS] = 0
        st.misc[S.M_HOST_BUSY] = 0
        st.misc[S.M_BG_END] = 0
        st.misc[S.M_CMD_STALL] = 0

    # ---------------------------------------------------------------- stats
    def memory_bytes(self) -> int:
        return S.state_nbytes(self.st)

    def waf(self) -> float:
        c = self.st.ctr
        return float(c[S.C_MEDIA]) / c[S.C_HOST] if c[S.C_HOST] else 0.0

    def geometry(self) -> dict[str, Any]:
        g, f = self.geo, self.flash
        return {
            "logical_pages": g.L, "physical_pages": g.P, "page_bytes": f.page_bytes,
            "logical_bytes": g.L * f.page_bytes, "physical_bytes": g.P * f.page_bytes,
            "op_ratio_effective": (g.P - g.L) / g.L, "lines": g.N, "pages_per_line": g.ppl,
            "blocks_per_line": g.bpl, "line_bytes": g.ppl * f.page_bytes, "dies_per_line": g.w,
            "reclaim_groups": g.nrg, "lines_per_reclaim_group": g.lpr, "dies": g.dies,
            "memory_bytes": self.memory_bytes(),
            "memory_bytes_per_physical_page": self.memory_bytes() / g.P,
        }

    def stats(self) -> dict[str, Any]:
        c = self.counters()
        pb = self.page_bytes
        st = self.st
        free = [int(K.free_count(st, rg)) for rg in range(self.geo.nrg)]
        out: dict[str, Any] = {
            "device": self.name,
            "config": self.config(),
            "geometry": self.geometry(),
            "waf": self.waf(),
            "host_bytes_written": c["host_pages_written"] * pb,
            "media_bytes_written": c["media_pages_written"] * pb,
            "gc": {
                "policy": self.flash.gc_policy,
                "runs": c["gc_runs"], "fg_runs": c["gc_fg_runs"], "bg_runs": c["gc_bg_runs"],
                "pages_moved": c["gc_pages_moved"], "bytes_moved": c["gc_pages_moved"] * pb,
                **stall_stats(c["gc_fg_stall_ns"], st.hist[S.H_STALL], st.hist[S.H_STALL_WRITE], c["ops_write"]),
                "valid_pages_per_victim_mean": (c["gc_pages_moved"] / c["gc_runs"]) if c["gc_runs"] else 0.0,
                "free_lines": free,
            },
            "counters": c,
            "latency": latency_by_op(st.hist, pb, {"read": c["host_pages_read"], "write": c["host_pages_written"],
                                                    "trim": c["host_pages_trimmed"]}),
            "wear": wear_summary(st.erase, self.geo.bpl, self.flash.pe_cycles_rated),
            "timing": bool(self.geo.timing),
        }
        busy = int(st.misc[S.M_BUSY_UNTIL])
        out["device_busy_until_ns"] = busy
        return out

    # ---------------------------------------------------------------- invariants (tests, debugging)
    def check_invariants(self) -> None:
        """Raise AssertionError if the mapping and line bookkeeping disagree (O(pages); tests only)."""
        st, g = self.st, self.geo
        mapped = np.nonzero(st.l2p >= 0)[0]
        ppa = st.l2p[mapped]
        assert np.array_equal(st.p2l[ppa], mapped), "L2P and P2L disagree"
        valid = st.p2l >= 0
        assert int(valid.sum()) == mapped.size, "a physical page is valid without a logical page pointing at it"
        per_line = valid.reshape(g.N, g.ppl).sum(axis=1)
        assert np.array_equal(per_line, st.vc), "valid counts do not match P2L"
        assert (st.vc >= 0).all() and (st.vc <= st.wp).all() and (st.wp <= g.ppl).all()
        free_lines = st.lstate == S.LINE_FREE
        assert (st.vc[free_lines] == 0).all() and (st.wp[free_lines] == 0).all()
        for rg in range(g.nrg):
            nfree = int(st.rgm[rg, S.RG_FREE_TAIL] - st.rgm[rg, S.RG_FREE_HEAD])
            lines = slice(rg * g.lpr, (rg + 1) * g.lpr)
            assert nfree >= 0 and nfree == int(free_lines[lines].sum()), "free pool accounting"
            nclosed = int(st.rgm[rg, S.RG_CLOSED])
            assert nclosed == int((st.lstate[lines] == S.LINE_CLOSED).sum()), "closed list accounting"
        assert int((st.lstate == S.LINE_OPEN).sum()) == int((st.fr_line >= 0).sum()), "open lines vs frontiers"
        c = st.ctr
        assert c[S.C_MEDIA] >= c[S.C_HOST] and c[S.C_MEDIA] == c[S.C_HOST] + c[S.C_GC_PAGES]
        if g.use_buckets:
            for rg in range(g.nrg):
                base = rg * (g.ppl + 1)
                seen = 0
                for v in range(g.ppl + 1):
                    line = st.bhead[base + v]
                    while line >= 0:
                        assert st.vc[line] == v and st.lstate[line] == S.LINE_CLOSED, "bucket holds a wrong line"
                        seen += 1
                        line = st.bnext[line]
                assert seen == int(st.rgm[rg, S.RG_CLOSED]), "bucket membership"
