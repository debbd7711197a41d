"""``fill-phase`` (issue 23, a safe cache-aware policy): writes before the first end of a copy on the tier
(evict, invalidate or delete there) get the last class, every later write class 0 - by hand, whatever the
batching, and causal (check_online)."""

from __future__ import annotations

import numpy as np
import pytest

from kvreplay import schema as S
from kvreplay.hints import HINTS
from kvreplay.hints.base import DeviceFacts
from kvreplay.hints.testing import check_online, classes_of

EV = [  # ts, op, obj, tier: 1 and 2 written, 1 evicted from the GPU (not the tier), 2 evicted from the SSD, 3, 4
    (0, S.OP_PERSIST, 1, S.TIER_SSD), (1, S.OP_PERSIST, 2, S.TIER_SSD), (2, S.OP_EVICT, 1, S.TIER_GPU),
    (3, S.OP_PERSIST, 5, S.TIER_SSD), (4, S.OP_EVICT, 2, S.TIER_SSD), (5, S.OP_PERSIST, 3, S.TIER_SSD),
    (6, S.OP_PERSIST, 4, S.TIER_SSD),
]


def _batch(ev=EV):
    ts, op, obj, tier = (np.array(c) for c in zip(*ev))
    return S.make_batch(ts_ns=ts, op=op, obj_id=obj, tier=tier, nbytes=np.full(len(ts), 1 << 20))


@pytest.mark.parametrize("rows", [1, 2, 3, 7])
def test_writes_before_the_tiers_first_eviction_get_the_last_class(rows):
    b = _batch()
    batches = [b.take(slice(i, i + rows)) for i in range(0, b.n, rows)]
    cls = HINTS.get("fill-phase")
    assert classes_of(cls, batches, n_classes=4).tolist() == [3, 3, 3, 0, 0]
    assert classes_of(cls, batches, n_classes=1).tolist() == [0, 0, 0, 0, 0]  # one class: nothing to separate
    pol = cls(4)
    for x in batches:
        from kvreplay.layout.actions import A_WRITE, action_table, select

        act, tidx = select(action_table(S.TIER_SSD), x["op"], x["tier"])
        pol.assign(x, act, tidx[act[tidx] == A_WRITE])
    assert pol.describe() == {"writes_before_first_end": 3, "abstained_writes_share": 0.4,  # 2 of 5 writes
                              "unit_pages": None, "padded_writes": 0, "open_unit_pages_left": None}


@pytest.mark.parametrize("rows", [1, 2, 3, 7])
def test_told_the_drives_unit_it_fills_the_open_unit_after_the_fill(rows):
    # units of 4 pages of 1 MiB: the fill (1, 2, 5) leaves 1 page of its unit unwritten; the next write that fits
    # it takes the last class too, then nothing more
    b = _batch()
    batches = [b.take(slice(i, i + rows)) for i in range(0, b.n, rows)]
    cls = HINTS.get("fill-phase")
    dev = DeviceFacts(page_bytes=1 << 20, unit_pages=4)
    assert classes_of(cls, batches, n_classes=4, device=dev).tolist() == [3, 3, 3, 3, 0]
    # object 3 takes 2 pages (does not fit the 1 left), object 4 one page (fits): first fit, in write order
    big = [(t, o, x, tr) for t, o, x, tr in EV]
    sizes = np.array([1, 1, 1, 1, 1, 2, 1]) << 20
    ts, op, obj, tier = (np.array(c) for c in zip(*big))
    b = S.make_batch(ts_ns=ts, op=op, obj_id=obj, tier=tier, nbytes=sizes)
    batches = [b.take(slice(i, i + rows)) for i in range(0, b.n, rows)]
    assert classes_of(cls, batches, n_classes=4, device=dev).tolist() == [3, 3, 3, 0, 3]
    # a header of 1 MiB per object: each write is 2 pages, the fill 6 pages, 2 left: object 3 (3 pages with
    # its header) does not fit, object 4 (2) does
    hdr = DeviceFacts(page_bytes=1 << 20, unit_pages=4, header_bytes=1 << 20)
    assert classes_of(cls, batches, n_classes=4, device=hdr).tolist() == [3, 3, 3, 0, 3]
    # the fill already ends on a unit boundary: nothing to pad
    assert classes_of(cls, batches, n_classes=4, device=DeviceFacts(1 << 20, 3)).tolist() == [3, 3, 3, 0, 0]


# the application ends copies while the tier fills: 1 deleted in the GPU tier only (not a death on the tier:
# 1's SSD copy stays), then 2 invalidated on the SSD before any eviction - the premise (what the filling tier
# holds stays until eviction) is broken from that event on
APP_END = [
    (0, S.OP_PERSIST, 1, S.TIER_SSD), (1, S.OP_DELETE, 1, S.TIER_GPU), (2, S.OP_PERSIST, 2, S.TIER_SSD),
    (3, S.OP_PERSIST, 5, S.TIER_SSD), (4, S.OP_INVALIDATE, 2, S.TIER_SSD), (5, S.OP_PERSIST, 3, S.TIER_SSD),
    (6, S.OP_DELETE, 5, S.TIER_SSD), (7, S.OP_PERSIST, 4, S.TIER_SSD), (8, S.OP_EVICT, 3, S.TIER_SSD),
]


@pytest.mark.parametrize("rows", [1, 4, 9])
def test_an_invalidate_or_delete_on_the_tier_ends_the_fill_like_an_eviction(rows):
    b = _batch(APP_END)
    batches = [b.take(slice(i, i + rows)) for i in range(0, b.n, rows)]
    assert classes_of(HINTS.get("fill-phase"), batches, n_classes=4).tolist() == [3, 3, 3, 0, 0]


def test_fill_phase_is_online(lifetimes_trace):
    rep = check_online(HINTS.get("fill-phase"), lifetimes_trace(3000))
    assert rep.classes_used == 2
