"""Geometry and state arrays of the page-mapped FTL shared by ``conv`` and ``fdp``.

Why a NamedTuple of flat arrays: numba kernels take it as one argument, it is
cached by ``@njit`` (jitclasses are not), and every field is a plain
numpy array whose ``nbytes`` adds up to the device's memory footprint. The
per-page state is two ``int32`` maps (L2P per logical page, P2L per physical
page: ~8 bytes per physical page); everything else is per line.

Layout. Lines (superblocks; FDP reclaim units) are the unit of allocation and
GC. Reclaim group ``rg`` owns lines ``[rg*lpr, (rg+1)*lpr)`` and dies
``[rg*dpr, (rg+1)*dpr)``. Page ``p`` of line ``l`` sits on die
``rg*dpr + ((l - rg*lpr)*w + p % w) % dpr`` where ``w = min(blocks_per_line, dpr)``:
consecutive pages go to consecutive dies (die ``d`` is on channel ``d % channels``),
and lines narrower than the group rotate over its dies.

Write frontiers (open lines) per reclaim group: one per RUH for host data
(``conv`` has one), then the GC destination(s): one shared frontier
("initially isolated", and ``conv``), or one per RUH ("persistently isolated").
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from devicemodels import histogram, rng
from devicemodels.base import GC_POLICIES, OP_NAMES
from devicemodels.params import FdpParams, FlashParams
from kvbed.core.errors import KvbedError

# line states
LINE_FREE, LINE_OPEN, LINE_CLOSED, LINE_VICTIM = 0, 1, 2, 3

# per-reclaim-group bookkeeping (rows of State.rgm)
RG_FREE_HEAD, RG_FREE_TAIL, RG_FIFO_HEAD, RG_FIFO_TAIL, RG_CLOSED, RG_BMIN = range(6)
RG_FIELDS = 6

# misc scalars (State.misc)
M_CLOCK, M_BUSY_UNTIL, M_WB_POS, M_HOST_BUSY, M_BG_END, M_CMD_STALL = range(6)
M_FIELDS = 6  # M_CMD_STALL: the longest foreground-GC stall of the write command being served

# one op counter per op code (``ctr[C_OPS + op]``), the same in every flash device's counters
OP_COUNTER_NAMES = tuple(f"ops_{name}" for name in OP_NAMES)

# cumulative counters (State.ctr); names are the keys of counters()
COUNTER_NAMES = (
    "host_pages_written",
    "media_pages_written",
    "gc_pages_moved",
    "gc_runs",
    "gc_fg_runs",
    "gc_bg_runs",
    "gc_fg_stall_ns",
    "block_erases",
    "host_pages_read",
    "host_pages_read_unmapped",
    "host_pages_trimmed",
    "host_pages_trimmed_mapped",
    "ruh_updates",
    "ru_not_fully_written",
    "lines_opened",
    *OP_COUNTER_NAMES,
)
(C_HOST, C_MEDIA, C_GC_PAGES, C_GC_RUNS, C_GC_FG, C_GC_BG, C_STALL_NS, C_ERASES, C_READ, C_READ_UNMAPPED,
 C_TRIM, C_TRIM_MAPPED, C_RUH_UPDATES, C_RU_NFW, C_LINES_OPENED, C_OPS) = range(16)
N_COUNTERS = len(COUNTER_NAMES)
assert C_OPS + len(OP_NAMES) == N_COUNTERS

# latency histogram rows: one per op code, then one for foreground-GC stalls (a value per stall: a host page that
# waited for GC to free a line), then one per host write command that waited for foreground GC (its longest
# stall: the stalls of one command's pages overlap in time, each counted from when its page was ready)
H_STALL = len(OP_NAMES)
H_STALL_WRITE = H_STALL + 1
N_HIST = H_STALL + 2


class Geo(NamedTuple):
    """Scalar geometry and config (numba passes a tuple of ints by value: no reloads in loops)."""

    L: int  # logical pages
    P: int  # physical pages
    N: int  # lines
    ppl: int  # pages per line
    ppb: int  # pages per block
    bpl: int  # blocks per line
    nrg: int  # reclaim groups
    lpr: int  # lines per reclaim group
    dpr: int  # dies per reclaim group
    w: int  # dies a line is striped over
    bpd: int  # blocks of one line on one die
    F: int  # write frontiers per reclaim group
    nruh: int  # host frontiers (RUHs) per reclaim group
    pi: int  # 1: GC data stays in its RUH (persistently isolated)
    policy: int  # GC policy code
    d: int  # d-choices sample size
    fg: int  # foreground GC threshold (free lines)
    bg: int  # background GC threshold (free lines)
    bg_on_write: int  # 1: background GC runs when a host write opens a line short of bg (else in idle gaps)
    bg_per_cmd: int  # 1: one background GC victim after every host command while short of bg (FEMU)
    bg_min_inv: int  # background GC defers a victim with fewer invalid pages (and some valid ones)
    last_ii: int  # 1: the last RUH is initially isolated, the others persistently (FEMU isolation_mode=1)
    ii_host: int  # 1: GC copies of initially isolated data go into the last RUH's host frontier (FEMU)
    gc_block_ch: int  # 0: GC copies a victim's pages in write order; else block by block over this many channels
    timing: int
    read_ns: int  # per mapping unit
    prog_ns: int  # per mapping unit
    erase_ns: int  # per block
    xfer_ns: int  # channel time per mapping unit
    channels: int
    dies: int
    wbuf: int  # write buffer slots (pages); 0 = write-through
    wbuf_ns: int
    use_buckets: int
    use_fifo: int
    gc_shared: int  # 1: GC copies go to host frontier 0 (one write frontier)
    ppl_shift: int  # log2(ppl) if a power of two, else -1 (division by shift)
    w_mask: int  # w - 1 if a power of two, else -1
    ch_mask: int  # channels - 1 if a power of two, else -1


class State(NamedTuple):
    l2p: np.ndarray  # int32[L]   physical page of each logical page, -1 unmapped
    p2l: np.ndarray  # int32[P]   logical page of each physical page, -1 invalid or unwritten
    vc: np.ndarray  # int32[N]    valid pages per line
    wp: np.ndarray  # int32[N]    pages written in the line
    lstate: np.ndarray  # int8[N]
    owner: np.ndarray  # int16[N] RUH that wrote the line (nruh = shared GC destination)
    erase: np.ndarray  # int32[N] erase count of the line's blocks
    close_seq: np.ndarray  # int64[N] media-page clock when the line was closed (age)
    bhead: np.ndarray  # int32[nrg*(ppl+1)] greedy buckets: first closed line with that valid count
    bnext: np.ndarray  # int32[N]
    bprev: np.ndarray  # int32[N]
    fifo: np.ndarray  # int32[N] per-RG ring of closed lines in close order (FIFO policy)
    free_q: np.ndarray  # int32[N] per-RG ring of free lines (oldest freed first: wear rotates)
    closed: np.ndarray  # int32[N] per-RG dense list of closed lines (random picks, scans)
    closed_pos: np.ndarray  # int32[N] index of a line in ``closed``
    rgm: np.ndarray  # int64[nrg, RG_FIELDS]
    fr_line: np.ndarray  # int32[nrg*F] open line of each frontier, -1 none
    fr_pages: np.ndarray  # int64[nrg*F] media pages written through each frontier
    die_free: np.ndarray  # int64[dies] next-free time (ns)
    ch_free: np.ndarray  # int64[channels]
    wbuf: np.ndarray  # int64[max(1, wbuf)] program-completion time of each buffer slot
    misc: np.ndarray  # int64[M_FIELDS]
    ctr: np.ndarray  # int64[N_COUNTERS]
    hist: np.ndarray  # int64[N_HIST, histogram.NSLOTS]
    rng: np.ndarray  # uint64[1]
    gc_rdone: np.ndarray  # int64[ppl] scratch: read-completion time of each page a GC victim moves
    die0: np.ndarray  # int32[N] die offset (within its reclaim group) of each line's page 0
    tmp: np.ndarray  # int64[2] scratch for kernels (they never allocate)


class LineBudget(NamedTuple):
    """The lines of one reclaim group against what GC needs there to make progress. ``build`` refuses a
    layout that is short, and the replay's sizing (kvreplay.replay.sizing) raises the capacity only while
    it is short: one rule, so that a setting the kernel runs as asked (e.g. ``ruh_type=persistently`` with
    its frontier per RUH) is not run on a bigger device than the setting it is compared with."""

    lines: int  # lines per reclaim group
    live: int  # lines the group's even share of the logical space fills
    frontiers: int  # write frontiers per group (F), each may hold an open line
    reserved: int  # free lines GC may keep when it has to run: max(fg, bg - 1)

    @property
    def short(self) -> int:
        """Lines missing (<= 0: none). GC runs with up to ``reserved`` lines free and every frontier
        open; some closed line must then hold an invalid page, which holds whenever the live data fits
        in the remaining lines."""
        return self.live + self.frontiers + self.reserved + 1 - self.lines


def _placement(flash: FlashParams, fdp: FdpParams | None) -> tuple[int, int, int, int]:
    """(blocks per line, reclaim groups, host frontiers, 1 if a GC frontier per RUH) of the layout."""
    if fdp is None:
        return flash.line_blocks, 1, 1, 0
    return fdp.ru_blocks(flash), fdp.nrg, fdp.nruh, int(fdp.ruh_type in ("persistently", "last-initially"))


def line_budget(flash: FlashParams, fdp: FdpParams | None = None) -> LineBudget:
    """Lines per reclaim group, live lines, frontiers and GC reserve of the layout ``build`` makes."""
    bpl, nrg, nruh, pi = _placement(flash, fdp)
    ppl = flash.pages_per_block * bpl
    L = flash.logical_pages
    want_phys = math.ceil(L * (1.0 + flash.op_ratio) - 1e-9)
    lpr = math.ceil(want_phys / ppl / nrg)
    fg, bg = flash.gc_free_lines(lpr)
    return LineBudget(lines=lpr, live=math.ceil(L / nrg / ppl), frontiers=nruh + (nruh if pi else 1),
                      reserved=max(fg, bg - 1))


def build(flash: FlashParams, fdp: FdpParams | None = None) -> tuple[Geo, State]:
    """Lay out lines, check that GC can always make progress (``line_budget``), allocate the state."""
    flash.validate()
    policy = GC_POLICIES.get(flash.gc_policy)
    if fdp is not None:
        fdp.validate_with(flash)
        if not flash.gc_separate_frontier:
            raise KvbedError("gc_separate_frontier=false is only for conv (FDP GC destinations follow ruh_type)")
        last_ii, ii_host = int(fdp.ruh_type == "last-initially"), int(fdp.ii_gc_dest == "last-ruh")
    else:
        last_ii = ii_host = 0
    bpl, nrg, nruh, pi = _placement(flash, fdp)
    dies = flash.dies
    dpr = dies // nrg
    w = min(bpl, dpr)
    if bpl > dpr and bpl % dpr:
        what = "ru_bytes / block size" if fdp is not None else "blocks_per_line"
        raise KvbedError(f"{what} ({bpl} blocks) must be a multiple of the dies per reclaim group ({dpr}) when larger")
    ppb = flash.pages_per_block
    ppl = ppb * bpl
    L = flash.logical_pages
    budget = line_budget(flash, fdp)
    F, lpr = budget.frontiers, budget.lines
    N = lpr * nrg
    P = N * ppl
    if P >= 2**31 - 1:
        raise KvbedError(f"too many physical pages ({P}) for 32-bit maps; raise page_bytes")
    fg, bg = flash.gc_free_lines(lpr)
    if budget.short > 0:
        need = budget.lines + budget.short
        min_op = need * nrg * ppl / L - 1.0
        unit = "reclaim unit" if fdp is not None else "line"
        raise KvbedError(
            f"op_ratio={flash.op_ratio:g} is too small for GC to make progress: a reclaim group has {lpr} "
            f"{unit}s of {ppl} pages, live data fills {budget.live}, and {F} open frontiers plus "
            f"{budget.reserved} free lines kept by GC need {F + budget.reserved + 1} more; "
            f"use op_ratio >= {min_op:.4f} or smaller {unit}s")
    gc_block_ch = 0
    if flash.gc_copy_order == "block":
        gc_block_ch = min(flash.channels, w)
        if w % gc_block_ch:
            raise KvbedError(f"gc_copy_order=block needs a line stripe ({w} dies) that is whole channels "
                             f"({flash.channels}); use gc_copy_order=page")
    k = flash.nand_pages_per_page
    wbuf = flash.write_buffer_bytes // flash.page_bytes
    geo = Geo(
        L=L, P=P, N=N, ppl=ppl, ppb=ppb, bpl=bpl, nrg=nrg, lpr=lpr, dpr=dpr, w=w, bpd=-(-bpl // w), F=F,
        nruh=nruh, pi=pi, policy=policy.code, d=flash.gc_d_choices, fg=fg,
        bg=bg, bg_on_write=int(flash.gc_bg_trigger == "threshold"),
        bg_per_cmd=int(flash.gc_bg_trigger == "per-command"),
        bg_min_inv=int(flash.gc_bg_min_invalid_ratio * ppl + 1e-9), last_ii=last_ii, ii_host=ii_host,
        gc_block_ch=gc_block_ch,
        timing=int(flash.timing), read_ns=flash.page_read_ns * k,
        prog_ns=flash.page_program_ns * k, erase_ns=flash.block_erase_ns * flash.nand_blocks_per_block, xfer_ns=flash.page_xfer_ns,
        channels=flash.channels, dies=dies, wbuf=wbuf, wbuf_ns=flash.write_buffer_ns,
        use_buckets=int(policy.needs_buckets), use_fifo=int(policy.needs_fifo),
        gc_shared=int(not flash.gc_separate_frontier),
        ppl_shift=pow2_shift(ppl), w_mask=pow2_mask(w), ch_mask=pow2_mask(flash.channels),
    )
    st = State(
        l2p=np.full(L, -1, np.int32),
        p2l=np.full(P, -1, np.int32),
        vc=np.zeros(N, np.int32),
        wp=np.zeros(N, np.int32),
        lstate=np.zeros(N, np.int8),
        owner=np.full(N, -1, np.int16),
        erase=np.zeros(N, np.int32),
        close_seq=np.zeros(N, np.int64),
        bhead=np.full(nrg * (ppl + 1), -1, np.int32),
        bnext=np.full(N, -1, np.int32),
        bprev=np.full(N, -1, np.int32),
        fifo=np.full(N, -1, np.int32),
        free_q=np.arange(N, dtype=np.int32),  # segment rg holds lines rg*lpr .. in order
        closed=np.full(N, -1, np.int32),
        closed_pos=np.full(N, -1, np.int32),
        rgm=np.zeros((nrg, RG_FIELDS), np.int64),
        fr_line=np.full(nrg * F, -1, np.int32),
        fr_pages=np.zeros(nrg * F, np.int64),
        die_free=np.zeros(dies, np.int64),
        ch_free=np.zeros(flash.channels, np.int64),
        wbuf=np.zeros(max(1, wbuf), np.int64),
        misc=np.zeros(M_FIELDS, np.int64),
        ctr=np.zeros(N_COUNTERS, np.int64),
        hist=histogram.new_rows(N_HIST),
        rng=rng.new_state(flash.seed),
        gc_rdone=np.zeros(ppl if flash.timing else 1, np.int64),
        die0=((np.arange(N, dtype=np.int64) % lpr) * w % dpr).astype(np.int32),
        tmp=np.zeros(2, np.int64),
    )
    st.rgm[:, RG_FREE_TAIL] = lpr  # every line starts free
    st.rgm[:, RG_BMIN] = ppl + 1
    if fdp is not None and fdp.ru_open_at_start:
        open_every_ruh(geo, st)
    return geo, st


def open_every_ruh(geo: Geo, st: State) -> None:
    """Give every RUH of every reclaim group an open line now, in FEMU's order (RUH by RUH, each in
    every group: ftl-fdp.c femu_fdp_ssd_init_ru_handles), as the kernel's ``_open`` would."""
    for h in range(geo.nruh):
        for rg in range(geo.nrg):
            head = st.rgm[rg, RG_FREE_HEAD]
            line = st.free_q[rg * geo.lpr + head % geo.lpr]
            st.rgm[rg, RG_FREE_HEAD] = head + 1
            st.lstate[line] = LINE_OPEN
            st.owner[line] = h
            st.fr_line[rg * geo.F + h] = line
            st.ctr[C_LINES_OPENED] += 1


def pow2_shift(n: int) -> int:
    return n.bit_length() - 1 if n > 0 and n & (n - 1) == 0 else -1


def pow2_mask(n: int) -> int:
    return n - 1 if n > 0 and n & (n - 1) == 0 else -1


def state_nbytes(st: State) -> int:
    return int(sum(a.nbytes for a in st))
