"""The page-mapped FTL kernel shared by ``conv`` and ``fdp``: writes, reads, TRIM,
RUH update, garbage collection and the FEMU-style timing model, all in numba.

Timing (``Geo.timing``): every die and channel has a next-free time. A NAND read
holds its die for ``read_ns`` and then needs ``xfer_ns`` on the channel; a
program needs the channel then holds the die for ``prog_ns``; an erase holds the
die. Reads therefore queue behind programs, erases and GC on the same die. GC
copies a valid page as a read on its source die then a program on the
destination die. Channel time is charged in issue order from the op's issue time
(as FEMU does for programs): the channel is a bandwidth budget that cannot be
reserved far ahead by a die's backlog, which in a next-free model would
otherwise block every later transfer on that channel.

GC triggers. A host write that needs a new line while at most ``fg`` lines are
free runs foreground GC first (until more than ``fg`` are free) and waits for it
(the stall is summed, recorded per stall, and each write command's longest stall is recorded once: a
command's pages may each wait, over the same time). Background GC keeps
at least ``bg`` lines free. By default it uses idle time: before an op that arrives
at ``t``, if no host op has been in flight since ``host_busy <= t``, victims are
collected back to back from then on as long as each starts before ``t`` (host ops
arriving later queue behind their die work). With ``bg_on_write`` (FEMU's trigger)
it runs instead when a host write has opened a line and fewer than ``bg`` are free:
its work is queued on the dies from the write's time, and the write does not wait
for it (only for its own die). With ``bg_per_cmd`` (FEMU's FTL loop) one victim is collected after
every host command while fewer than ``bg`` are free, skipping (deferring) a victim with fewer than
``bg_min_inv`` invalid pages. With ``bg = fg + 1`` the next allocation
then finds its line without stalling. Background GC holds one more line free
while a line fills, so on devices with few lines it raises WAF: the usual trade
of write amplification for fewer stalls. With timing off there is no idle time
and no stall: GC runs only on demand (counted as foreground GC), the
minimal-reserve model that the analytic WAF references assume.

Write buffer (``wbuf`` slots > 0): a host page enters the buffer once the slot
it reuses has been programmed (FIFO flush), completes ``wbuf_ns`` later, and
its program starts from there (after any foreground GC it triggered): only a full
buffer makes GC stalls visible to the host.

Performance notes: kernels are compiled without numba's reference counting (see
:mod:`devicemodels.jit`), so per-line helpers that take the state cost a few ns per
call; the per-page paths (host write, read, TRIM, GC copy) are written out inline,
or call ``inline="always"`` helpers (``_invalidate``, ``t_read``, ...) that take the
arrays themselves, held in locals, so that LLVM keeps them in registers. The L2P
entries of upcoming ops and of the next pages a victim moves are prefetched:
on large devices the maps do not fit in cache and that halves the time.
"""

from __future__ import annotations

from devicemodels.base import OP_READ, OP_RUH_UPDATE, OP_TRIM, OP_WRITE
from devicemodels.ftl_state import (
    C_ERASES, C_GC_BG, C_GC_FG, C_GC_PAGES, C_GC_RUNS, C_HOST, C_LINES_OPENED, C_MEDIA, C_OPS, C_READ,
    C_READ_UNMAPPED, C_RU_NFW, C_RUH_UPDATES, C_STALL_NS, C_TRIM, C_TRIM_MAPPED, H_STALL, H_STALL_WRITE,
    LINE_CLOSED, LINE_FREE, LINE_OPEN, LINE_VICTIM, M_BG_END, M_BUSY_UNTIL, M_CLOCK, M_CMD_STALL, M_HOST_BUSY,
    M_WB_POS, RG_BMIN, RG_CLOSED, RG_FIFO_HEAD, RG_FIFO_TAIL, RG_FREE_HEAD, RG_FREE_TAIL)
from devicemodels.gc_policies import GREEDY, NO_POLICY, select_victim
from devicemodels.histogram import hist_record
from devicemodels.jit import kernel
from devicemodels.prefetch import prefetch

# error codes returned in err[0]; err[1] = op index, err[2] = reclaim group / op code / GC policy code
ERR_OK, ERR_STUCK, ERR_NO_DEST, ERR_OP, ERR_POLICY = 0, 1, 2, 3, 4
# what _gc_one reports in out[0] instead of the pages it gained
GC_NO_VICTIM, GC_NO_DEST, GC_NO_POLICY, GC_DEFERRED = -1, -2, -3, -4
PF_OPS = 16  # prefetch the L2P entry of the op this many ahead
PF_GC = 32  # ... and of the victim page this many ahead


# ----------------------------------------------------------------------------- geometry and timing
@kernel(inline="always")
def line_die(g, d0, line, p):
    """Die of page ``p`` of ``line`` whose page 0 is on die ``d0`` of its reclaim group."""
    j = (p & g.w_mask) if g.w_mask >= 0 else p % g.w
    x = d0 + j
    if x >= g.dpr:
        x -= g.dpr
    if g.nrg == 1:
        return x
    return (line // g.lpr) * g.dpr + x


@kernel(inline="always")
def line_of(g, ppa):
    if g.ppl_shift >= 0:
        return ppa >> g.ppl_shift
    return ppa // g.ppl


@kernel(inline="always")
def channel_of(g, die):
    if g.ch_mask >= 0:
        return die & g.ch_mask
    return die % g.channels


@kernel(inline="always")
def _rg_of(g, line):
    if g.nrg == 1:
        return 0
    return line // g.lpr


@kernel(inline="always")
def t_read(die_free, ch_free, g, die, t):
    """NAND read on ``die`` issued at ``t``; returns when the data is out over the channel."""
    s = die_free[die]
    if s < t:
        s = t
    e = s + g.read_ns
    die_free[die] = e
    c = channel_of(g, die)
    cs = ch_free[c]
    if cs < t:
        cs = t
    ch_free[c] = cs + g.xfer_ns
    if e > cs:
        cs = e
    return cs + g.xfer_ns


@kernel(inline="always")
def t_prog(die_free, ch_free, g, die, t, t_data):
    """Program on ``die`` issued at ``t`` with its data available at ``t_data`` (>= t).

    The channel transfer is charged from the issue time (bandwidth accounting in issue
    order); the die starts once both the transfer and ``t_data`` are done."""
    c = channel_of(g, die)
    cs = ch_free[c]
    if cs < t:
        cs = t
    cs += g.xfer_ns
    ch_free[c] = cs
    s = die_free[die]
    if s < cs:
        s = cs
    if s < t_data:
        s = t_data
    e = s + g.prog_ns
    die_free[die] = e
    return e


@kernel(inline="always")
def wbuf_take(wbuf, misc, g, pos_at, t):
    """A host page arriving at ``t`` takes the oldest write-buffer slot (``misc[pos_at]``) once that
    slot's page has been programmed: returns (slot, time the page is in the buffer)."""
    if g.wbuf > 0:
        pos = misc[pos_at]
        return pos, max(t, wbuf[pos])
    return 0, t


@kernel(inline="always")
def t_host_prog(die_free, ch_free, wbuf, misc, g, die, pos, t_buf, t_ready, busy_at, pos_at):
    """Program a host page (in buffer slot ``pos`` from ``t_buf``) on ``die`` from ``t_ready``
    (>= ``t_buf``: later if foreground GC ran first); the slot is busy until the program ends.
    Returns when the host sees the write done: ``wbuf_ns`` after the page entered the buffer
    (a GC stall delays only the program), or at the program's end without a buffer."""
    e = t_prog(die_free, ch_free, g, die, t_ready, t_ready)
    if e > misc[busy_at]:
        misc[busy_at] = e
    if g.wbuf > 0:
        wbuf[pos] = e
        misc[pos_at] = pos + 1 if pos + 1 < g.wbuf else 0
        e = t_buf + g.wbuf_ns
    return e


# ----------------------------------------------------------------------------- per-line bookkeeping
@kernel
def free_count(st, rg):
    return st.rgm[rg, RG_FREE_TAIL] - st.rgm[rg, RG_FREE_HEAD]


@kernel
def _open(st, g, rg, f, owner):
    """Take the oldest free line of group ``rg`` as the open line of frontier ``f``."""
    h = st.rgm[rg, RG_FREE_HEAD]
    line = st.free_q[rg * g.lpr + h % g.lpr]
    st.rgm[rg, RG_FREE_HEAD] = h + 1
    st.lstate[line] = LINE_OPEN
    st.owner[line] = owner
    st.wp[line] = 0
    st.vc[line] = 0
    st.fr_line[f] = line
    st.ctr[C_LINES_OPENED] += 1
    return line


@kernel
def _close(st, g, line):
    """A full (or RUH-updated) line becomes a GC candidate."""
    rg = _rg_of(g, line)
    st.lstate[line] = LINE_CLOSED
    st.close_seq[line] = st.misc[M_CLOCK]
    if g.use_buckets:
        c = st.vc[line]
        k = rg * (g.ppl + 1) + c
        h = st.bhead[k]
        st.bnext[line] = h
        st.bprev[line] = -1
        if h >= 0:
            st.bprev[h] = line
        st.bhead[k] = line
        if c < st.rgm[rg, RG_BMIN]:
            st.rgm[rg, RG_BMIN] = c
    if g.use_fifo:
        t = st.rgm[rg, RG_FIFO_TAIL]
        st.fifo[rg * g.lpr + t % g.lpr] = line
        st.rgm[rg, RG_FIFO_TAIL] = t + 1
    n = st.rgm[rg, RG_CLOSED]
    st.closed[rg * g.lpr + n] = line
    st.closed_pos[line] = n
    st.rgm[rg, RG_CLOSED] = n + 1


@kernel
def _unclose(st, g, rg, line):
    """Take a chosen victim out of the closed-line structures (FIFO already popped it)."""
    if g.use_buckets:
        nx = st.bnext[line]
        pv = st.bprev[line]
        if pv >= 0:
            st.bnext[pv] = nx
        else:
            st.bhead[rg * (g.ppl + 1) + st.vc[line]] = nx
        if nx >= 0:
            st.bprev[nx] = pv
    n = st.rgm[rg, RG_CLOSED] - 1
    pos = st.closed_pos[line]
    last = st.closed[rg * g.lpr + n]
    st.closed[rg * g.lpr + pos] = last
    st.closed_pos[last] = pos
    st.closed[rg * g.lpr + n] = -1
    st.closed_pos[line] = -1
    st.rgm[rg, RG_CLOSED] = n


@kernel(inline="always")
def _invalidate(p2l, vc, lstate, bhead, bnext, bprev, rgm, g, ppa):
    """Drop physical page ``ppa``; a closed line moves down one valid-count bucket."""
    line = line_of(g, ppa)
    p2l[ppa] = -1
    c = vc[line] - 1
    vc[line] = c
    if g.use_buckets and lstate[line] == LINE_CLOSED:
        rg = _rg_of(g, line)
        nx = bnext[line]
        pv = bprev[line]
        if pv >= 0:
            bnext[pv] = nx
        else:
            bhead[rg * (g.ppl + 1) + c + 1] = nx
        if nx >= 0:
            bprev[nx] = pv
        k = rg * (g.ppl + 1) + c
        h = bhead[k]
        bnext[line] = h
        bprev[line] = -1
        if h >= 0:
            bprev[h] = line
        bhead[k] = line
        if c < rgm[rg, RG_BMIN]:
            rgm[rg, RG_BMIN] = c


# ----------------------------------------------------------------------------- garbage collection
@kernel(inline="always")
def _gc_die(g, jj):
    """The ``jj``-th die (within the line's stripe) block-order GC cleans: channel-major, as FEMU's
    clean loop (ftl-fdp.c:991-1001: for ch, for lun); die ``j`` of the stripe is on channel
    ``j % C`` (C = ``gc_block_ch``). Page order has one pseudo die: 0."""
    if g.gc_block_ch == 0:
        return 0
    lw = g.w // g.gc_block_ch
    return (jj // lw) + (jj - (jj // lw) * lw) * g.gc_block_ch


@kernel(inline="always")
def _gc_src(g, i):
    """The ``i``-th page of a victim line that GC copies (``_gc_one`` walks the same order as nested
    loops). Page order (``gc_block_ch`` 0): ``i``, the order written. Block order: block by block,
    each block's pages in order; the line's page ``p`` is on its die ``p % w``, so die ``j``'s pages
    are ``j, j + w, ...``. It scatters an object written across the stripe over the GC destination."""
    if g.gc_block_ch == 0:
        return i
    per = g.ppl // g.w
    jj = i // per
    return _gc_die(g, jj) + (i - jj * per) * g.w


@kernel
def _gc_one(st, g, rg, t0, out, min_inv):
    """Collect one victim of group ``rg``: copies and erase start at ``t0``.

    out[0] = pages gained (ppl - moved), or GC_NO_VICTIM, GC_NO_DEST, GC_NO_POLICY (unknown policy
    code: nothing changed), GC_DEFERRED (the victim holds valid pages and fewer than ``min_inv``
    invalid ones: left for later, nothing changed, as FEMU's non-forced GC puts it back);
    out[1] = end time.

    Where the copies go: one frontier for everything (``gc_shared``, conv); the victim RUH's own GC
    frontier (persistently isolated data); else, for initially isolated data, the shared GC frontier,
    or the last RUH's host frontier with ``ii_host`` (FEMU). ``fa`` is the frontier whose page count
    the copies are charged to (per-RUH GC bytes), the GC frontier even when the copies land in a host
    line.
    """
    out[1] = t0
    v = select_victim(st, g, rg)
    if v < 0:
        out[0] = GC_NO_POLICY if v == NO_POLICY else GC_NO_VICTIM
        return
    if min_inv > 0 and st.vc[v] > 0 and st.wp[v] - st.vc[v] < min_inv:
        if g.use_fifo:  # the FIFO selector popped its ring: put the victim back at its head
            st.rgm[rg, RG_FIFO_HEAD] -= 1
        out[0] = GC_DEFERRED
        return
    _unclose(st, g, rg, v)
    st.lstate[v] = LINE_VICTIM
    ow = st.owner[v]
    if g.gc_shared:
        f = rg * g.F
        gc_owner = 0
        fa = f
    elif g.pi and 0 <= ow < g.nruh and not (g.last_ii and ow == g.nruh - 1):
        f = rg * g.F + g.nruh + ow
        gc_owner = ow
        fa = f
    else:
        fa = rg * g.F + g.nruh + (ow if g.last_ii else 0)
        if g.ii_host:
            f = rg * g.F + g.nruh - 1
            gc_owner = g.nruh - 1
        else:
            f = fa
            gc_owner = ow if g.last_ii else g.nruh
    l2p, p2l, vc, wpa, ctr, misc = st.l2p, st.p2l, st.vc, st.wp, st.ctr, st.misc
    die_free, ch_free = st.die_free, st.ch_free
    ppl = g.ppl
    base = v * ppl
    n = wpa[v]
    t_end = t0
    # the destination's write position, valid count and the clock live in locals (no aliasing
    # reloads); they are written back before any call and at the end
    clock0 = misc[M_CLOCK]
    clock = clock0
    dst = st.fr_line[f]
    q = 0
    added = 0
    if dst >= 0:
        q = wpa[dst]
    dbase = dst * ppl
    rdone = st.gc_rdone
    die0 = st.die0
    d0v = die0[v]
    d0d = die0[dst] if dst >= 0 else 0
    # the copy order as nested loops (no per-page branch on it): dies of the stripe, then each die's
    # pages p = j + k * step (page order: one pseudo die, step 1, the n written pages)
    nd, step, cnt = 1, 1, n
    if g.gc_block_ch:
        nd, step, cnt = g.w, g.w, ppl // g.w
    if g.timing:  # read every valid page first (a read must not queue behind this victim's programs)
        k = 0
        for jj in range(nd):
            j = _gc_die(g, jj)
            for kk in range(cnt):
                p = j + kk * step
                if p < n and p2l[base + p] >= 0:
                    rdone[k] = t_read(die_free, ch_free, g, line_die(g, d0v, v, p), t0)
                    k += 1
    for jj in range(nd):
        j = _gc_die(g, jj)
        for kk in range(cnt):
            p = j + kk * step
            if p >= n:
                break  # block order: the rest of this die's pages are unwritten
            pn = p + PF_GC * step
            if pn < n:
                nxt = p2l[base + pn]
                prefetch(l2p, nxt if nxt > 0 else 0)
            lba = p2l[base + p]
            if lba < 0:
                continue
            if dst < 0:
                if free_count(st, rg) == 0:
                    out[0] = GC_NO_DEST
                    return
                dst = _open(st, g, rg, f, gc_owner)
                q = 0
                added = 0
                dbase = dst * ppl
                d0d = die0[dst]
            ppa = dbase + q
            p2l[ppa] = lba
            l2p[lba] = ppa
            clock += 1
            added += 1
            if g.timing:
                e = t_prog(die_free, ch_free, g, line_die(g, d0d, dst, q), t0, rdone[clock - clock0 - 1])
                if e > t_end:
                    t_end = e
            q += 1
            if q == ppl:
                wpa[dst] = q
                vc[dst] += added
                misc[M_CLOCK] = clock
                _close(st, g, dst)
                st.fr_line[f] = -1
                dst = -1
    if dst >= 0:
        wpa[dst] = q
        vc[dst] += added
    misc[M_CLOCK] = clock
    moved = clock - clock0
    p2l[base:base + n] = -1
    ctr[C_MEDIA] += moved
    ctr[C_GC_PAGES] += moved
    st.fr_pages[fa] += moved
    vc[v] = 0
    wpa[v] = 0
    st.erase[v] += 1
    st.lstate[v] = LINE_FREE
    st.owner[v] = -1
    t = st.rgm[rg, RG_FREE_TAIL]
    st.free_q[rg * g.lpr + t % g.lpr] = v
    st.rgm[rg, RG_FREE_TAIL] = t + 1
    ctr[C_GC_RUNS] += 1
    ctr[C_ERASES] += g.bpl
    if g.timing:
        for j in range(g.w):
            d = line_die(g, d0v, v, j)
            s = die_free[d]
            if s < t0:
                s = t0
            e = s + g.erase_ns * g.bpd
            die_free[d] = e
            if e > t_end:
                t_end = e
    out[0] = ppl - moved
    out[1] = t_end


@kernel(inline="always")
def _gc_failed(g, rg, code, err):
    """Report a failed ``_gc_one`` (``code`` < 0) in ``err``."""
    if code == GC_NO_POLICY:
        err[0] = ERR_POLICY
        err[2] = g.policy
    else:
        err[0] = ERR_STUCK if code == GC_NO_VICTIM else ERR_NO_DEST
        err[2] = rg


@kernel
def _make_room(st, g, rg, thr, t0, which, err, tmp):
    """GC until more than ``thr`` lines are free; returns the end time, or -1 (err set)."""
    t_end = t0
    zero = 0
    while free_count(st, rg) <= thr:
        _gc_one(st, g, rg, t0, tmp, 0)
        if tmp[0] < 0:
            _gc_failed(g, rg, tmp[0], err)
            return -1
        st.ctr[which] += 1
        if tmp[1] > t_end:
            t_end = tmp[1]
        if tmp[0] == 0:  # the victim was full of valid data
            zero += 1
            if g.policy == GREEDY or zero > st.rgm[rg, RG_CLOSED] + 1:
                err[0] = ERR_STUCK
                err[2] = rg
                return -1
        else:
            zero = 0
    return t_end


@kernel
def _bg_gc_on_write(st, g, rg, t, tmp):
    """With ``bg_on_write``: background GC from ``t`` until ``bg`` lines are free (FEMU's trigger, after
    a host write opened a line); nobody waits for it. Lacking a victim or a destination, or with a policy
    code select_victim does not dispatch, it stops: foreground GC, which then runs when free lines run
    out, reports the error. (Reporting it here too cost ~10% of timed throughput: bench_devicemodels.)"""
    if not (g.bg_on_write and g.timing):
        return
    while free_count(st, rg) < g.bg:
        _gc_one(st, g, rg, t, tmp, g.bg_min_inv)
        if tmp[0] < 0:
            break
        st.ctr[C_GC_BG] += 1
        if tmp[1] > st.misc[M_BUSY_UNTIL]:
            st.misc[M_BUSY_UNTIL] = tmp[1]
        if tmp[0] == 0:  # a victim full of valid data: leave the rest to foreground GC
            break


@kernel
def _new_user_line(st, g, rg, f, ruh, t_ready, err, tmp):
    """Open a new line for host frontier ``f`` and keep at least ``thr`` lines free.

    With a separate GC frontier, GC runs first (until more than ``thr`` are free) so it always
    has a destination. With one shared frontier (``gc_shared``) the line is opened first and GC
    copies into it (the textbook single-frontier model: each new line starts with the copies of
    one victim). Returns when the host page may be programmed (later than ``t_ready`` if
    foreground GC stalled it), or -1 on error (err set).
    """
    thr = g.fg
    if g.gc_shared:
        if st.fr_line[f] < 0:
            _open(st, g, rg, f, ruh)
        if free_count(st, rg) >= thr:
            return t_ready
        thr -= 1
    elif free_count(st, rg) > thr:
        _open(st, g, rg, f, ruh)
        _bg_gc_on_write(st, g, rg, t_ready, tmp)
        return t_ready
    t_gc = _make_room(st, g, rg, thr, t_ready, C_GC_FG, err, tmp)
    if t_gc < 0:
        return -1
    if g.timing:
        if t_gc > st.misc[M_BUSY_UNTIL]:
            st.misc[M_BUSY_UNTIL] = t_gc
        if t_gc > t_ready:
            stall = t_gc - t_ready
            st.ctr[C_STALL_NS] += stall
            hist_record(st.hist[H_STALL], stall)
            if stall > st.misc[M_CMD_STALL]:
                st.misc[M_CMD_STALL] = stall
            t_ready = t_gc
    if st.fr_line[f] < 0:
        _open(st, g, rg, f, ruh)
    if not g.gc_shared:
        _bg_gc_on_write(st, g, rg, t_ready, tmp)
    return t_ready


@kernel
def _bg_gc(st, g, t, tmp):
    """Background GC in the idle gap before ``t``: no host op has been in flight since
    ``host_busy``; victims are collected back to back from then while they start before ``t``.
    Lacking a victim or a destination, or with an undispatched policy code, it stops (as above)."""
    misc = st.misc
    for rg in range(g.nrg):
        start = misc[M_HOST_BUSY]
        if misc[M_BG_END] > start:
            start = misc[M_BG_END]
        while free_count(st, rg) < g.bg and start <= t:
            _gc_one(st, g, rg, start, tmp, g.bg_min_inv)
            if tmp[0] < 0:
                break
            st.ctr[C_GC_BG] += 1
            start = tmp[1]
            misc[M_BG_END] = start
            if start > misc[M_BUSY_UNTIL]:
                misc[M_BUSY_UNTIL] = start
            if tmp[0] == 0:
                break


@kernel
def _bg_gc_per_cmd(st, g, t, tmp):
    """With ``bg_per_cmd`` (FEMU's FTL loop, ftl.c bb_ftl_process_req): after a host command, one
    background victim of the first reclaim group short of ``bg`` free lines, its work queued on the
    dies from ``t``; nobody waits for it. A deferred victim (too few invalid pages), a missing victim
    or destination ends it quietly: foreground GC reports errors. Runs with timing off too: it decides
    how much space is held free, hence WAF."""
    for rg in range(g.nrg):
        if free_count(st, rg) < g.bg:
            _gc_one(st, g, rg, t, tmp, g.bg_min_inv)
            if tmp[0] >= 0:
                st.ctr[C_GC_BG] += 1
                if g.timing and tmp[1] > st.misc[M_BUSY_UNTIL]:
                    st.misc[M_BUSY_UNTIL] = tmp[1]
            return


@kernel
def _ruh_update(st, g, rg, ruh):
    f = rg * g.F + ruh
    line = st.fr_line[f]
    if line >= 0 and st.wp[line] > 0:
        if st.wp[line] < g.ppl:
            st.ctr[C_RU_NFW] += 1
        _close(st, g, line)
        st.fr_line[f] = -1
    st.ctr[C_RUH_UPDATES] += 1


# ----------------------------------------------------------------------------- the batch kernel
@kernel(nogil=True)  # the replay produces the next ops on the other core meanwhile
def ftl_submit(st, g, op, lba, npages, pid, arrival, done, err):
    """Run a batch; stops at the first failing op with err = (code, op index, detail)."""
    tmp = st.tmp
    l2p, p2l, vc, wpa, lstate = st.l2p, st.p2l, st.vc, st.wp, st.lstate
    bhead, bnext, bprev, rgm = st.bhead, st.bnext, st.bprev, st.rgm
    ctr, misc, fr_line, fr_pages = st.ctr, st.misc, st.fr_line, st.fr_pages
    die_free, ch_free, wbuf, hist, die0 = st.die_free, st.ch_free, st.wbuf, st.hist, st.die0
    ppl = g.ppl
    timing = g.timing
    nops = op.shape[0]
    for i in range(nops):
        if i + PF_OPS < nops:  # (a prefetch never faults; the load below is bounds-checked: RUH
            prefetch(l2p, lba[i + PF_OPS])  # update ops carry an unchecked lba)
            x = lba[i + PF_OPS // 2]
            if 0 <= x < g.L:
                ahead = l2p[x]  # prefetched PF_OPS/2 ops ago: where that overwrite lands
                prefetch(p2l, ahead if ahead > 0 else 0)
        t = arrival[i]
        if timing and not g.bg_on_write and not g.bg_per_cmd and misc[M_HOST_BUSY] <= t and misc[M_BG_END] <= t:  # idle: bg GC if short
            short = False
            for rg in range(g.nrg):
                if rgm[rg, RG_FREE_TAIL] - rgm[rg, RG_FREE_HEAD] < g.bg:
                    short = True
            if short:
                _bg_gc(st, g, t, tmp)
        o = op[i]
        ctr[C_OPS + o] += 1
        d = t
        if o == OP_WRITE:
            p = pid[i]
            rg = 0 if g.nrg == 1 else p // g.nruh
            ruh = p - rg * g.nruh
            f = rg * g.F + ruh
            x0 = lba[i]
            for k in range(npages[i]):
                x = x0 + k
                old = l2p[x]
                if old >= 0:  # invalidate the old copy
                    _invalidate(p2l, vc, lstate, bhead, bnext, bprev, rgm, g, old)
                t_buf = t
                pos = 0
                if timing:
                    pos, t_buf = wbuf_take(wbuf, misc, g, M_WB_POS, t)
                t_ready = t_buf
                line = fr_line[f]
                if line < 0:
                    t_ready = _new_user_line(st, g, rg, f, ruh, t_ready, err, tmp)
                    if t_ready < 0:
                        err[1] = i
                        return
                    line = fr_line[f]
                q = wpa[line]
                ppa = line * ppl + q
                wpa[line] = q + 1
                p2l[ppa] = x
                l2p[x] = ppa
                vc[line] += 1
                misc[M_CLOCK] += 1
                fr_pages[f] += 1
                if q + 1 == ppl:
                    _close(st, g, line)
                    fr_line[f] = -1
                if timing:
                    e = t_host_prog(die_free, ch_free, wbuf, misc, g, line_die(g, die0[line], line, q), pos, t_buf,
                                    t_ready, M_BUSY_UNTIL, M_WB_POS)
                    if e > d:
                        d = e
            if misc[M_CMD_STALL]:  # the command waited for foreground GC: its longest stall, once
                hist_record(hist[H_STALL_WRITE], misc[M_CMD_STALL])
                misc[M_CMD_STALL] = 0
            ctr[C_HOST] += npages[i]
            ctr[C_MEDIA] += npages[i]
        elif o == OP_READ:
            x0 = lba[i]
            for k in range(npages[i]):
                ppa = l2p[x0 + k]
                if ppa < 0:
                    ctr[C_READ_UNMAPPED] += 1
                    continue
                if timing:
                    line = line_of(g, ppa)
                    e = t_read(die_free, ch_free, g, line_die(g, die0[line], line, ppa - line * ppl), t)
                    if e > misc[M_BUSY_UNTIL]:
                        misc[M_BUSY_UNTIL] = e
                    if e > d:
                        d = e
            ctr[C_READ] += npages[i]
        elif o == OP_TRIM:
            x0 = lba[i]
            mapped = 0
            for k in range(npages[i]):
                ppa = l2p[x0 + k]
                if ppa >= 0:
                    _invalidate(p2l, vc, lstate, bhead, bnext, bprev, rgm, g, ppa)
                    l2p[x0 + k] = -1
                    mapped += 1
            ctr[C_TRIM] += npages[i]
            ctr[C_TRIM_MAPPED] += mapped
        elif o == OP_RUH_UPDATE:
            p = pid[i]
            rg = 0 if g.nrg == 1 else p // g.nruh
            _ruh_update(st, g, rg, p - rg * g.nruh)
        else:
            err[0] = ERR_OP
            err[1] = i
            err[2] = o
            return
        if g.bg_per_cmd:
            _bg_gc_per_cmd(st, g, t, tmp)
        done[i] = d
        if timing:
            hist_record(hist[o], d - t)
            if d > misc[M_HOST_BUSY]:
                misc[M_HOST_BUSY] = d
