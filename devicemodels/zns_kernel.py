"""ZNS kernel: zone state machine, write pointers, open/active resources and timing.

No device GC and no mapping table: a zone's page ``off`` lives on die
``(z*w + off % w) % dies`` of the zone's own blocks, so a read finds it by
arithmetic. Zone states follow NVMe ZNS (no explicit open command, so opens
are implicit); a write to an empty/closed zone opens it, and when the open limit
is reached the least recently opened implicitly-open zone is closed (if
``implicit_close``) or the write fails with "too many open zones". Timing is the
same next-free model as the FTL kernel (die and channel clocks, write buffer).
"""

from __future__ import annotations


from devicemodels.base import OP_READ, OP_WRITE, OP_ZONE_APPEND, OP_ZONE_FINISH, OP_ZONE_RESET
from devicemodels.ftl_kernel import t_host_prog, t_read, wbuf_take
from devicemodels.ftl_state import OP_COUNTER_NAMES
from devicemodels.histogram import hist_record
from devicemodels.jit import kernel

# zone states (NVMe ZNS names): empty, implicitly opened, closed, full
Z_EMPTY, Z_IOPEN, Z_CLOSED, Z_FULL = 0, 1, 3, 4
ZONE_STATE_NAMES = {Z_EMPTY: "empty", Z_IOPEN: "implicitly_opened", Z_CLOSED: "closed", Z_FULL: "full"}

# misc scalars
ZM_OPEN, ZM_ACTIVE, ZM_SEQ, ZM_BUSY_UNTIL, ZM_WB_POS, ZM_MAX_OPEN, ZM_MAX_ACTIVE = range(7)
ZM_FIELDS = 7

ZNS_COUNTER_NAMES = (
    "host_pages_written",
    "media_pages_written",
    "gc_pages_moved",  # always 0: no device GC
    "gc_runs",  # always 0
    "gc_fg_stall_ns",  # always 0
    "block_erases",
    "zone_resets",
    "zone_resets_empty",
    "zone_finishes",
    "zone_implicit_closes",
    "zone_appends",
    "host_pages_read",
    "host_pages_read_unmapped",
    *OP_COUNTER_NAMES,
)
(ZC_HOST, ZC_MEDIA, _ZC_GCP, _ZC_GCR, _ZC_STALL, ZC_ERASES, ZC_RESETS, ZC_RESETS_EMPTY, ZC_FINISHES,
 ZC_IMPLICIT_CLOSES, ZC_APPENDS, ZC_READ, ZC_READ_UNMAPPED, ZC_OPS) = range(14)

# errors: err = (code, op index, zone, detail)
ZERR_OK, ZERR_WP, ZERR_CAPACITY, ZERR_FULL, ZERR_OPEN, ZERR_ACTIVE, ZERR_NOT_START, ZERR_OP = range(8)


@kernel(inline="always")
def zone_die(zg, z, off):
    return (z * zg.w + off % zg.w) % zg.dies


@kernel
def _open_zone(zst, zg, z, err):
    """Make zone ``z`` implicitly open (it is empty or closed); False and err set if refused."""
    misc = zst.misc
    was = zst.state[z]
    if was == Z_EMPTY and misc[ZM_ACTIVE] >= zg.max_active:
        err[0] = ZERR_ACTIVE
        return False
    if misc[ZM_OPEN] >= zg.max_open:
        if not zg.implicit_close:
            err[0] = ZERR_OPEN
            return False
        victim = -1
        best = 0
        for y in range(zg.nzones):  # least recently opened implicitly-open zone
            if zst.state[y] == Z_IOPEN and (victim < 0 or zst.open_seq[y] < best):
                victim = y
                best = zst.open_seq[y]
        if victim < 0:
            err[0] = ZERR_OPEN
            return False
        zst.state[victim] = Z_CLOSED
        misc[ZM_OPEN] -= 1
        zst.ctr[ZC_IMPLICIT_CLOSES] += 1
    if was == Z_EMPTY:
        misc[ZM_ACTIVE] += 1
        if misc[ZM_ACTIVE] > misc[ZM_MAX_ACTIVE]:
            misc[ZM_MAX_ACTIVE] = misc[ZM_ACTIVE]
    zst.state[z] = Z_IOPEN
    misc[ZM_OPEN] += 1
    if misc[ZM_OPEN] > misc[ZM_MAX_OPEN]:
        misc[ZM_MAX_OPEN] = misc[ZM_OPEN]
    misc[ZM_SEQ] += 1
    zst.open_seq[z] = misc[ZM_SEQ]
    return True


@kernel
def _leave_active(zst, z):
    s = zst.state[z]
    if s == Z_IOPEN:
        zst.misc[ZM_OPEN] -= 1
        zst.misc[ZM_ACTIVE] -= 1
    elif s == Z_CLOSED:
        zst.misc[ZM_ACTIVE] -= 1


@kernel
def _reset_zone(zst, zg, z, t):
    s = zst.state[z]
    wp = zst.wp[z]
    done = t
    if s == Z_EMPTY:
        zst.ctr[ZC_RESETS_EMPTY] += 1
        return done
    _leave_active(zst, z)
    if wp > 0:
        # blocks holding data: pages are striped over w dies, each die fills its blocks in order
        ndies = wp if wp < zg.w else zg.w
        per_die = (wp + zg.w - 1) // zg.w
        blocks = (per_die + zg.ppb - 1) // zg.ppb
        zst.ctr[ZC_ERASES] += blocks * ndies
        zst.erase[z] += 1
        if zg.timing:
            for j in range(ndies):
                d = zone_die(zg, z, j)
                st0 = zst.die_free[d]
                if st0 < t:
                    st0 = t
                e = st0 + zg.erase_ns * blocks
                zst.die_free[d] = e
                if e > done:
                    done = e
            if done > zst.misc[ZM_BUSY_UNTIL]:
                zst.misc[ZM_BUSY_UNTIL] = done
    zst.wp[z] = 0
    zst.state[z] = Z_EMPTY
    zst.ctr[ZC_RESETS] += 1
    return done


@kernel(nogil=True)  # the replay produces the next ops on the other core meanwhile
def zns_submit(zst, zg, op, lba, npages, arrival, done, out_lba, err):
    misc, die_free, ch_free, hist, wbuf, ctr = zst.misc, zst.die_free, zst.ch_free, zst.hist, zst.wbuf, zst.ctr
    for i in range(op.shape[0]):
        t = arrival[i]
        o = op[i]
        ctr[ZC_OPS + o] += 1
        x = lba[i]
        z = x // zg.zsize
        off = x - z * zg.zsize
        n = npages[i]
        d = t
        out_lba[i] = -1
        if o == OP_WRITE or o == OP_ZONE_APPEND:
            # written out inline (a per-op call taking the state costs ~250 ns in numba)
            s = zst.state[z]
            wp = zst.wp[z]
            code = ZERR_OK
            if o == OP_ZONE_APPEND:
                if off != 0:
                    code = ZERR_NOT_START
                off = wp
            if code == ZERR_OK:
                if s == Z_FULL:
                    code = ZERR_FULL
                elif off != wp:
                    code = ZERR_WP
                    err[3] = wp
                elif wp + n > zg.cap:
                    code = ZERR_CAPACITY
                    err[3] = zg.cap - wp
                elif s != Z_IOPEN and not _open_zone(zst, zg, z, err):
                    code = err[0]
            if code != ZERR_OK:
                err[0] = code
                err[1] = i
                err[2] = z
                return
            if zg.timing:
                for k in range(n):
                    pos, t_ready = wbuf_take(wbuf, misc, zg, ZM_WB_POS, t)
                    e = t_host_prog(die_free, ch_free, wbuf, misc, zg, zone_die(zg, z, wp + k), pos, t_ready,
                                    t_ready, ZM_BUSY_UNTIL, ZM_WB_POS)
                    if e > d:
                        d = e
            wp += n
            zst.wp[z] = wp
            ctr[ZC_HOST] += n
            ctr[ZC_MEDIA] += n
            if wp == zg.cap:
                _leave_active(zst, z)
                zst.state[z] = Z_FULL
            if o == OP_ZONE_APPEND:
                out_lba[i] = z * zg.zsize + off
                ctr[ZC_APPENDS] += 1
        elif o == OP_READ:
            for k in range(n):
                y = x + k
                zz = y // zg.zsize
                oo = y - zz * zg.zsize
                if oo >= zst.wp[zz]:
                    zst.ctr[ZC_READ_UNMAPPED] += 1
                    continue
                if zg.timing:
                    e = t_read(die_free, ch_free, zg, zone_die(zg, zz, oo), t)
                    if e > misc[ZM_BUSY_UNTIL]:
                        misc[ZM_BUSY_UNTIL] = e
                    if e > d:
                        d = e
            zst.ctr[ZC_READ] += n
        elif o == OP_ZONE_RESET or o == OP_ZONE_FINISH:
            if off != 0:
                err[0] = ZERR_NOT_START
                err[1] = i
                err[2] = z
                return
            if o == OP_ZONE_RESET:
                d = _reset_zone(zst, zg, z, t)
            else:
                if zst.state[z] != Z_FULL:
                    _leave_active(zst, z)
                    zst.state[z] = Z_FULL
                zst.ctr[ZC_FINISHES] += 1
        else:
            err[0] = ZERR_OP
            err[1] = i
            err[3] = o
            return
        done[i] = d
        if zg.timing:
            hist_record(hist[o], d - t)


