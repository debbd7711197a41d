"""Zone allocator with host-side GC for ZNS namespaces.

A ZNS drive does no GC of its own: the host writes each zone sequentially and
must reset it to reuse it. The layout here does what a zoned KV store (ZenFS,
a log-structured cache) does:

- one open zone per placement class (a "stream"); an object is appended to its
  class's zone at the write pointer and may continue in a fresh zone when the
  current one fills, so zones fill exactly to their writable capacity;
- an object's death (evict/delete/invalidate, or a rewrite) only lowers its
  zones' valid counts; a full zone whose valid count reaches zero is reset;
- when fewer than ``gc_free_zones`` zones are empty, host GC picks the full zone
  with the fewest valid units (greedy), reads its live extents and appends them
  to a GC stream (one shared stream, or one per class), then resets the victim.
  Those relocations are host-level write amplification:
  ``host_waf = (user units + relocated units) / user units``;
- one empty zone is always held back for the GC stream, so a GC round can
  always finish; when no full zone has reclaimable space (everything live), the
  layout evicts resident objects by the tier's policy until GC can progress.
"""

from __future__ import annotations

import numpy as np

from devicemodels.base import OP_READ, OP_WRITE, OP_ZONE_RESET
from devicemodels.jit import kernel
from kvreplay.layout.actions import A_DROP, A_FREE, A_READ, A_WRITE
from kvreplay.layout.common import (
    COUNTER_NAMES,
    EX_LBA,
    EX_LEN,
    EX_NEXT,
    LAYOUTS,
    LC_FORCED,
    LC_FORCED_PAGES,
    LC_GC_PAGES,
    LC_GC_RUNS,
    LC_OPS_READ,
    LC_OPS_RESET,
    LC_OPS_WRITE,
    LC_REWRITES,
    LC_ZONE_RESETS,
    LC_ZONES_OPENED,
    OC_HEAD,
    OC_NPAGES,
    S_DONE,
    S_NO_PROGRESS,
    S_TOO_BIG,
    SRC_EVICT,
    SRC_GC,
    SRC_USER,
    ST_COMMON,
    ST_LRU_HEAD,
    LayoutState,
    ObjectLayout,
    emit,
    ex_new,
    ex_release,
    find_freed,
    forget_obj,
    new_obj,
    note_written,
    read_obj,
    room_status,
)
from kvreplay.layout.objtable import ot_find
from kvreplay.layout.state import (
    ZONE_STATE_NAMES,
    ZS_RESETS,
    ZS_STATE,
    ZS_STREAM,
    ZS_VALID,
    ZS_WP,
    Z_EMPTY,
    Z_FULL,
    Z_OPEN,
    ZoneConfig,
    grow_ext_cls,
    new_zones,
)
from kvbed.core.errors import KvbedError

# Per-stream counters follow the shared ones in the layout's counter array ``lc``:
# lc[LC_STREAM0 + SC_N * stream + SC_*] (zones opened, zones reset, pages relocated out by host GC).
SC_OPENED, SC_RESETS, SC_RELOCATED, SC_N = range(4)
LC_STREAM0 = len(COUNTER_NAMES)
# extra scalar state
ST_Q_HEAD = ST_COMMON  # empty-zone FIFO ring
ST_Q_COUNT = ST_COMMON + 1
ST_N = ST_COMMON + 2

_MAX_GC_ROUNDS = 1 << 20
DEFAULT_CLASSES = 8  # zone groups a hint policy gets by default (if the open-zone limit allows)


@kernel
def _q_pop(zq, st):
    z = zq[st[ST_Q_HEAD]]
    st[ST_Q_HEAD] = (st[ST_Q_HEAD] + 1) % len(zq)
    st[ST_Q_COUNT] -= 1
    return z


@kernel
def _q_push(zq, st, z):
    zq[(st[ST_Q_HEAD] + st[ST_Q_COUNT]) % len(zq)] = z
    st[ST_Q_COUNT] += 1


# The kernels below take the state as the NamedTuples of kvreplay.layout.state: ``objs`` (ObjectState),
# ``zones`` (Zones), ``cfg`` (ZoneConfig); ``ob``/``n``: the op buffer and the ops in it so far,
# ``ev``/``src``: the event index and origin (SRC_*) the ops they emit are tagged with.

@kernel
def _reset(objs, zones, cfg, ob, n, z, ev, src):
    zone_pages, zs, st, lc = cfg.zone_pages, zones.zs, objs.st, objs.lc
    n = emit(ob, n, OP_ZONE_RESET, z * zone_pages, zone_pages, 0, ev, src)
    if zs[z, ZS_STREAM] >= 0:
        lc[LC_STREAM0 + SC_N * zs[z, ZS_STREAM] + SC_RESETS] += 1
    zs[z, ZS_WP] = 0
    zs[z, ZS_VALID] = 0
    zs[z, ZS_STATE] = Z_EMPTY
    zs[z, ZS_STREAM] = -1
    zs[z, ZS_RESETS] += 1
    _q_push(zones.zq, st, z)
    lc[LC_ZONE_RESETS] += 1
    lc[LC_OPS_RESET] += 1
    return n


@kernel
def _invalidate(objs, zones, cfg, ob, n, e, ev, src):
    """The units of extent ``e`` become invalid; a full zone left without valid units is reset."""
    zone_pages, cap, zs, owner = cfg.zone_pages, cfg.cap, zones.zs, zones.owner
    lba = objs.ex[e, EX_LBA]
    ln = objs.ex[e, EX_LEN]
    z = lba // zone_pages
    off = lba - z * zone_pages
    for k in range(z * cap + off, z * cap + off + ln):
        owner[k] = -1
    zs[z, ZS_VALID] -= ln
    if zs[z, ZS_VALID] == 0 and zs[z, ZS_STATE] == Z_FULL:
        n = _reset(objs, zones, cfg, ob, n, z, ev, src)
    return n


@kernel
def _drop_obj(objs, zones, cfg, ob, n, s, ev, src):
    """Forget object ``s``: its units become invalid, emptied full zones are reset."""
    ex = objs.ex
    e = objs.oc[s, OC_HEAD]
    while e >= 0:
        n = _invalidate(objs, zones, cfg, ob, n, e, ev, src)
        nxt = ex[e, EX_NEXT]
        ex_release(objs, e)
        e = nxt
    forget_obj(objs, s)
    return n


@kernel
def _open(objs, zones, stream):
    zs, lc = zones.zs, objs.lc
    z = _q_pop(zones.zq, objs.st)
    zs[z, ZS_STATE] = Z_OPEN
    zs[z, ZS_STREAM] = stream
    zs[z, ZS_WP] = 0
    zones.sz[stream] = z
    lc[LC_ZONES_OPENED] += 1
    lc[LC_STREAM0 + SC_N * stream + SC_OPENED] += 1
    return z


@kernel
def _append(zones, cfg, stream, e, length):
    """Place ``length`` units at ``stream``'s write pointer (caller made sure they fit); owner = extent e.
    Returns their lba (the caller emits the write)."""
    zone_pages, cap, zs, sz, owner = cfg.zone_pages, cfg.cap, zones.zs, zones.sz, zones.owner
    z = sz[stream]
    off = zs[z, ZS_WP]
    lba = z * zone_pages + off
    for k in range(z * cap + off, z * cap + off + length):
        owner[k] = e
    zs[z, ZS_WP] += length
    zs[z, ZS_VALID] += length
    if zs[z, ZS_WP] == cap:
        zs[z, ZS_STATE] = Z_FULL
        sz[stream] = -1
    return lba


@kernel
def _victim(zs):
    best = -1
    best_valid = np.iinfo(np.int64).max
    for z in range(zs.shape[0]):
        if zs[z, ZS_STATE] == Z_FULL and zs[z, ZS_VALID] < best_valid:
            best = z
            best_valid = zs[z, ZS_VALID]
    return best


@kernel
def _gc_zone(objs, zones, cfg, ob, n, victim, ev):
    """Relocate the live extents of ``victim`` to the GC stream and reset it."""
    ex, st, lc = objs.ex, objs.st, objs.lc
    zs, owner, sz, ext_cls = zones.zs, zones.owner, zones.sz, zones.ext_cls
    cap, n_user, per_class = cfg.cap, cfg.n_user, cfg.per_class
    gc_stream0 = n_user  # the GC streams follow the user streams
    base = victim * cap
    off = 0
    while off < cap:
        e = owner[base + off]
        if e < 0:
            off += 1
            continue
        ln = ex[e, EX_LEN]
        src_lba = ex[e, EX_LBA]
        n = emit(ob, n, OP_READ, src_lba, ln, 0, ev, SRC_GC)
        lc[LC_OPS_READ] += 1
        for k in range(base + off, base + off + ln):
            owner[k] = -1
        zs[victim, ZS_VALID] -= ln
        gs = gc_stream0 + (ext_cls[e] % n_user if per_class else 0)
        rem = ln
        cur = e
        first = True
        while rem > 0:
            if sz[gs] < 0:
                if st[ST_Q_COUNT] == 0:
                    return n, False
                _open(objs, zones, gs)
            z = sz[gs]
            take = min(rem, cap - zs[z, ZS_WP])
            if not first:  # the extent continues in a new zone: split it
                e2 = ex_new(objs, 0, take)
                ex[e2, EX_NEXT] = ex[cur, EX_NEXT]
                ex[cur, EX_NEXT] = e2
                ext_cls[e2] = ext_cls[e]
                cur = e2
            lba = _append(zones, cfg, gs, cur, take)
            n = emit(ob, n, OP_WRITE, lba, take, 0, ev, SRC_GC)
            lc[LC_OPS_WRITE] += 1
            ex[cur, EX_LBA] = lba
            ex[cur, EX_LEN] = take
            rem -= take
            first = False
        lc[LC_GC_PAGES] += ln
        lc[LC_STREAM0 + SC_N * zs[victim, ZS_STREAM] + SC_RELOCATED] += ln
        off += ln
    lc[LC_GC_RUNS] += 1
    n = _reset(objs, zones, cfg, ob, n, victim, ev, SRC_GC)
    return n, True


@kernel
def _make_room(objs, zones, cfg, ob, n, ev):
    """Before a user zone is opened: GC (and evict if nothing is reclaimable) so that an
    empty zone is available beyond the one held back for GC. Returns (n, ok)."""
    oc, st, lc, zs = objs.oc, objs.st, objs.lc, zones.zs
    rounds = 0
    while st[ST_Q_COUNT] < cfg.gc_free:
        rounds += 1
        if rounds > _MAX_GC_ROUNDS:
            return n, False
        v = _victim(zs)
        if v >= 0 and zs[v, ZS_VALID] < cfg.cap:
            n, ok = _gc_zone(objs, zones, cfg, ob, n, v, ev)
            if not ok:
                return n, False
            continue
        if st[ST_Q_COUNT] >= 2:
            break  # nothing reclaimable now, but the reserve allows one more user zone
        s = st[ST_LRU_HEAD]
        if s < 0:
            return n, False
        lc[LC_FORCED] += 1
        lc[LC_FORCED_PAGES] += oc[s, OC_NPAGES]
        n = _drop_obj(objs, zones, cfg, ob, n, s, ev, SRC_EVICT)
    return n, True


@kernel(nogil=True)
def zone_kernel(events, start, end, objs, zones, cfg, ob, ob_bound):
    """Map tier events [start, end) to zone ops. Returns (next event, ops emitted, status).

    ``events``: LayoutEvents; ``ob``: the (OB_ROWS, capacity) op buffer, ``ob_bound``: ops one event may emit."""
    ev_obj, ev_act, ev_pages, ev_cls = events.obj, events.act, events.pages, events.cls
    oc, ex, st, lc = objs.oc, objs.ex, objs.st, objs.lc
    zs, sz, ext_cls = zones.zs, zones.sz, zones.ext_cls
    cap, n_user, writable_pages, lru = cfg.cap, cfg.n_user, cfg.writable_pages, cfg.lru
    n = 0
    ob_cap = ob.shape[1]
    i = start
    while i < end:
        a = ev_act[i]
        key = ev_obj[i]
        stop = room_status(objs, n, ob_cap, ob_bound, a)
        if stop >= 0:
            return i, n, stop
        if a == A_WRITE:
            need = ev_pages[i]
            c = ev_cls[i] % n_user
            s = ot_find(objs.kv, key)
            if s >= 0:  # a rewrite: zones are append-only, the old copy just dies
                lc[LC_REWRITES] += 1
                n = _drop_obj(objs, zones, cfg, ob, n, s, i, SRC_USER)
            if need > writable_pages:
                return i, n, S_TOO_BIG
            s = new_obj(objs, key, need, c)
            oc[s, OC_HEAD] = -1
            rem = need
            while rem > 0:
                if sz[c] < 0:
                    n, ok = _make_room(objs, zones, cfg, ob, n, i)
                    if not ok or st[ST_Q_COUNT] < 2:
                        return i, n, S_NO_PROGRESS
                    _open(objs, zones, c)
                z = sz[c]
                take = min(rem, cap - zs[z, ZS_WP])
                e = ex_new(objs, 0, take)
                ext_cls[e] = c
                lba = _append(zones, cfg, c, e, take)
                n = emit(ob, n, OP_WRITE, lba, take, 0, i, SRC_USER)
                lc[LC_OPS_WRITE] += 1
                ex[e, EX_LBA] = lba
                # chain at the end (GC may have split extents of this object meanwhile)
                t = oc[s, OC_HEAD]
                if t < 0:
                    oc[s, OC_HEAD] = e
                else:
                    while ex[t, EX_NEXT] >= 0:
                        t = ex[t, EX_NEXT]
                    ex[t, EX_NEXT] = e
                rem -= take
            note_written(objs, s, need)
        elif a == A_READ:
            n = read_obj(objs, ob, n, key, i, lru)
        elif a == A_FREE or a == A_DROP:
            s = find_freed(objs, key, a)
            if s >= 0:
                n = _drop_obj(objs, zones, cfg, ob, n, s, i, SRC_USER)
        i += 1
    return i, n, S_DONE


def gc_reserve_zones(n_zones: int, gc_free_zones: int = 0) -> int:
    """Empty zones host GC keeps: ``gc_free_zones``, or max(2, zones / 20) when 0; never fewer than 2
    (one for the GC stream, one for the next user zone). The sizing holds the same number back."""
    return max(2, int(gc_free_zones) if gc_free_zones else int(n_zones) // 20)


@LAYOUTS.register("zone")
class ZoneLayout(ObjectLayout):
    """Objects -> zones grouped by placement class, with host GC and zone resets.

    It places on a ZNS device (the ``zns`` parameter group): the open-zone limit bounds the classes
    and streams, and zone size and writable capacity come from it."""

    zoned = True
    precondition_refusal = ("--precondition: on zns the host owns every zone's state, and a prefilled zone "
                            "would be one the layout does not know about; use --fill-ratio to load the device "
                            "instead")

    @staticmethod
    def stream_count(n_classes: int, per_class: bool) -> int:
        """Open streams: one user stream per class, plus one shared GC stream or one GC stream per class."""
        n = max(1, int(n_classes))
        return n * (2 if per_class else 1) + (0 if per_class else 1)

    @classmethod
    def default_classes(cls, device_cls, groups, params):
        """As many classes as the open-zone limit leaves room for beside the GC stream(s), at most 8."""
        zns = groups["zns"]
        room = zns.max_open_zones // 2 if params.gc_stream == "per-class" else zns.max_open_zones - 1
        return max(1, min(DEFAULT_CLASSES, room))

    @classmethod
    def open_streams(cls, n_classes, groups, params):
        n = cls.stream_count(n_classes, params.gc_stream == "per-class")
        if n > groups["zns"].max_open_zones:
            raise KvbedError(
                f"zns: {n_classes} classes need {n} open zones (with GC) but max_open_zones is "
                f"{groups['zns'].max_open_zones}; lower classes or raise max_open_zones")
        return n

    @classmethod
    def for_device(cls, device, groups, n_classes, params, evict_policy):
        z, pb = groups["zns"], device.page_bytes
        zp, cp = z.zone_bytes // pb, z.zone_cap_bytes // pb
        try:
            return cls(device.logical_pages // zp, zp, cp, n_classes, evict_policy=evict_policy,
                       gc_free_zones=params.gc_free_zones, gc_per_class=params.gc_stream == "per-class")
        except ValueError as exc:
            raise KvbedError(f"zns layout: {exc}") from None

    def job_fields(self, stats, page_bytes):
        zones = {k: stats[k] for k in ("zones", "zone_pages", "zone_cap_pages", "streams", "gc_free_zones",
                                       "gc_stream", "zones_by_state", "zone_resets_max")}
        zones["per_group"] = [  # the zones of each stream, like per_ruh on FDP
            {**{k: v for k, v in g.items() if not k.endswith("_pages")},
             "valid_bytes": g["valid_pages"] * page_bytes, "relocated_bytes": g["relocated_pages"] * page_bytes}
            for g in stats["per_stream"]]
        return {"zones": zones}

    def __init__(self, n_zones: int, zone_pages: int, cap_pages: int, n_classes: int, *,
                 evict_policy: str = "lru", gc_free_zones: int = 0, gc_per_class: bool = False):
        if not (0 < cap_pages <= zone_pages):
            raise ValueError("need 0 < cap_pages <= zone_pages")
        self.n_zones = int(n_zones)
        self.zone_pages = int(zone_pages)
        self.cap_pages = int(cap_pages)
        self.n_user = max(1, int(n_classes))
        self.per_class = bool(gc_per_class)
        self.n_streams = self.stream_count(self.n_user, self.per_class)
        self.gc_free_zones = gc_reserve_zones(self.n_zones, gc_free_zones)
        need = self.n_streams + self.gc_free_zones
        if self.n_zones < need:
            raise ValueError(
                f"{self.n_zones} zones are too few: {self.n_streams} open streams "
                f"({self.n_user} classes + GC) and {self.gc_free_zones} free zones for GC need {need}"
            )
        self.lru = evict_policy == "lru"
        self.state = LayoutState(ST_N)
        self.state.lc = np.zeros(LC_STREAM0 + SC_N * self.n_streams, np.int64)
        self.zones = new_zones(self.n_zones, self.cap_pages, self.n_streams, len(self.state.ex))
        self.state.st[ST_Q_COUNT] = self.n_zones  # every zone is on the empty-zone ring
        self.cfg = ZoneConfig(zone_pages=self.zone_pages, cap=self.cap_pages, n_user=self.n_user,
                              per_class=self.per_class, gc_free=self.gc_free_zones,
                              writable_pages=self.writable_pages, lru=self.lru)

    @property
    def zs(self) -> np.ndarray:
        """Per-zone rows (Zones.zs: write pointer, valid units, state, stream, resets)."""
        return self.zones.zs

    @property
    def owner(self) -> np.ndarray:
        """Extent owning each writable unit (Zones.owner), -1 invalid."""
        return self.zones.owner

    @property
    def writable_pages(self) -> int:
        return self.n_zones * self.cap_pages

    def op_bound(self, max_obj_pages: int) -> int:
        """Most ops one event can emit: its writes, resets of the zones it empties, and the GC
        rounds of each zone it opens (a read, up to two writes per relocated extent, a reset)."""
        zones_touched = max_obj_pages // self.cap_pages + 2
        gc = zones_touched * (3 * self.cap_pages + 2) * 2
        return 4 * int(max_obj_pages) + gc + 8

    def _kernel(self, events, start, end, ob, ob_bound):
        self.zones = grow_ext_cls(self.zones, len(self.state.ex))
        return zone_kernel(events, start, end, self.state.arrays(), self.zones, self.cfg, ob, ob_bound)

    def host_waf(self) -> float:
        c = self.counters()
        user = c["pages_written"]
        return (user + c["gc_relocated_pages"]) / user if user else 1.0

    def stats(self) -> dict:
        c = self.counters()
        states = np.bincount(self.zs[:, ZS_STATE], minlength=3)
        return {
            "layout": self.name,
            "zones": self.n_zones,
            "zone_pages": self.zone_pages,
            "zone_cap_pages": self.cap_pages,
            "streams": self.n_streams,
            "gc_free_zones": self.gc_free_zones,
            "gc_stream": "per-class" if self.per_class else "shared",
            "resident_pages": self.resident_pages,
            "resident_objects": self.resident_objects,
            "zones_by_state": {name: int(states[k]) for k, name in enumerate(ZONE_STATE_NAMES)},
            "zone_resets_max": int(self.zs[:, ZS_RESETS].max()) if self.n_zones else 0,
            "host_waf": self.host_waf(),
            "per_stream": self.per_stream(),
            **c,
        }

    def per_stream(self) -> list[dict]:
        """One row per zone group (a class's user stream, or a GC stream): its zones now, the zones it
        opened, the resets of its zones and the pages host GC relocated out of them."""
        held = self.zs[:, ZS_STREAM] >= 0
        owner = self.zs[held, ZS_STREAM]
        n = self.n_streams
        by_state = [np.bincount(owner[self.zs[held, ZS_STATE] == z], minlength=n) for z in (Z_OPEN, Z_FULL)]
        valid = np.bincount(owner, weights=self.zs[held, ZS_VALID], minlength=n)
        sc = self.state.lc[LC_STREAM0:].reshape(n, SC_N)
        rows = []
        for k in range(n):
            gc = k >= self.n_user
            rows.append({
                "stream": k, "role": "gc" if gc else "user",
                "class": (k - self.n_user if self.per_class else None) if gc else k,
                "zones_open": int(by_state[0][k]), "zones_full": int(by_state[1][k]), "valid_pages": int(valid[k]),
                "zones_opened": int(sc[k, SC_OPENED]), "zone_resets": int(sc[k, SC_RESETS]),
                "relocated_pages": int(sc[k, SC_RELOCATED]),
            })
        return rows
