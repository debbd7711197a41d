"""Zone allocator with host GC (ZNS): a hand-computed case, and random streams the real ZNS model accepts."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devicemodels import DEVICES
from devicemodels.base import OP_READ, OP_WRITE, OP_ZONE_RESET
from devicemodels.params import FlashParams, ZnsParams
from kvreplay.layout import ZoneLayout
from kvreplay.layout.actions import A_FREE, A_READ, A_WRITE
from kvreplay.layout.common import SRC_GC, SRC_USER
from kvreplay.layout.zone import ZS_STATE, ZS_VALID, Z_FULL
from tests.support.replay_fixtures import layout_ops as run

MiB = 1 << 20
W = A_WRITE


def zns_device(n_zones: int, zone_pages: int, cap_pages: int, max_open: int = 3):
    flash = FlashParams(logical_bytes=n_zones * zone_pages * MiB, page_bytes=MiB, pages_per_block=1, timing=False)
    zns = ZnsParams(zone_bytes=zone_pages * MiB, zone_cap_bytes=cap_pages * MiB, max_open_zones=max_open,
                    max_active_zones=max_open, implicit_close=False)
    return DEVICES.get("zns")(flash=flash, zns=zns)


def submit(dev, ops):
    """Send the layout's ops to the device model; it raises on anything a ZNS drive would refuse."""
    if not ops:
        return
    a = np.array(ops, np.int64)
    dev.submit({"op": a[:, 0], "lba": a[:, 1], "npages": a[:, 2], "pid": np.zeros(len(a)), "arrival_ns": np.zeros(len(a))})


# Hand-computed: 6 zones of 4 units (all writable), one class, a shared GC stream, GC keeps 2 zones empty.
# Objects 1..11 are 2 units each.
#  writes 1-6 fill zones 0,1,2 ([1 1 2 2] [3 3 4 4] [5 5 6 6]); frees of 1,3,5 leave each half valid;
#  7,8 fill zone 3; 9 opens zone 4 (3 empty -> 2); 10 fills it;
#  11 needs a zone with only 1 empty (< 2): GC picks zone 0 (2 valid, lowest index among the
#    half-valid ones): read 2 at lba 2, append it to a GC zone (zone 5: lba 20), reset zone 0;
#    still < 2 empty: GC zone 1: read 4 at lba 6, append at lba 22 (zone 5 now full), reset zone 1;
#    11 goes to zone 0 (lba 0);
#  freeing 6 empties full zone 2: reset.
# Host writes 22 user units + 4 relocated: host WAF = 26 / 22.
HAND = [(o, W, 2, 0) for o in range(1, 7)] + [(1, A_FREE), (3, A_FREE), (5, A_FREE)] + \
       [(o, W, 2, 0) for o in range(7, 12)] + [(6, A_FREE)]


def test_hand_computed_gc_resets_and_host_waf():
    lay = ZoneLayout(6, 4, 4, 1, gc_free_zones=2)
    ops = run(lay, HAND, max_pages=2)
    user_writes = [(o[0], o[1], o[2]) for o in ops if o[5] == SRC_USER and o[0] == OP_WRITE]
    assert user_writes == [(OP_WRITE, lba, 2) for lba in (0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 0)]
    gc = [(o[0], o[1], o[2]) for o in ops if o[5] == SRC_GC]
    assert gc == [(OP_READ, 2, 2), (OP_WRITE, 20, 2), (OP_ZONE_RESET, 0, 4),
                  (OP_READ, 6, 2), (OP_WRITE, 22, 2), (OP_ZONE_RESET, 4, 4)]
    assert ops[-1] == (OP_ZONE_RESET, 8, 4, 0, len(HAND) - 1, SRC_USER)  # zone 2 emptied by a free
    c = lay.counters()
    assert (c["pages_written"], c["gc_relocated_pages"], c["gc_runs"], c["zone_resets"]) == (22, 4, 2, 3)
    assert lay.host_waf() == 26 / 22
    assert lay.extents_of(2) == [(20, 2)] and lay.extents_of(4) == [(22, 2)] and lay.extents_of(11) == [(0, 2)]
    # per zone group: the user stream opened zones 0-4 then 0 again, lost zones 0 and 1 to GC (4 units
    # relocated) and 2 to the free; it holds 0 (open: 11) and 3, 4 (full). The GC stream filled zone 5.
    keys = ("stream", "role", "class", "zones_opened", "zone_resets", "relocated_pages", "zones_open", "zones_full",
            "valid_pages")
    assert [tuple(g[k] for k in keys) for g in lay.stats()["per_stream"]] == [
        (0, "user", 0, 6, 3, 4, 1, 2, 10),
        (1, "gc", None, 1, 0, 0, 0, 1, 4),
    ]
    dev = zns_device(6, 4, 4)
    submit(dev, ops)
    dc = dev.counters()
    assert dc["host_pages_written"] == 26 and dc["ops_zone_reset"] == 3


def test_objects_span_zones_and_reads_follow_relocation():
    # zone capacity 3 < zone size 4: the LBAs 3, 7, ... are never written
    lay = ZoneLayout(8, 4, 3, 2, gc_free_zones=2)
    ops = run(lay, [(1, W, 5, 0), (2, W, 2, 1), (1, A_READ)], max_pages=5)
    assert lay.extents_of(1) == [(0, 3), (4, 2)]  # class 0: zone 0 to capacity, then zone 1
    assert lay.extents_of(2) == [(8, 2)]  # class 1 has its own zone
    assert [(o[0], o[1], o[2]) for o in ops[-2:]] == [(OP_READ, 0, 3), (OP_READ, 4, 2)]
    submit(zns_device(8, 4, 3), ops)


def test_everything_live_forces_evictions_not_dropped_writes():
    lay = ZoneLayout(5, 4, 4, 1, gc_free_zones=2)
    ops = run(lay, [(o, W, 4, 0) for o in range(1, 9)], max_pages=4)  # 8 zone-sized objects, 5 zones, nothing dies
    c = lay.counters()
    assert c["objects_written"] == 8 and c["forced_evictions"] > 0
    assert lay.resident_objects + c["forced_evictions"] == 8
    assert lay.extents_of(1) == []  # the oldest went first (LRU)
    submit(zns_device(5, 4, 4), ops)


def test_too_few_zones_for_the_streams_is_refused():
    import pytest

    with pytest.raises(ValueError, match="too few"):
        ZoneLayout(4, 4, 4, 3, gc_free_zones=2)  # 3 classes + GC stream + 2 free zones > 4


EVENTS = st.lists(st.tuples(st.integers(1, 15), st.sampled_from([W, W, A_READ, A_FREE]), st.integers(1, 6),
                            st.integers(0, 2)), min_size=1, max_size=150)


@settings(max_examples=60, deadline=None)
@given(EVENTS, st.integers(9, 16), st.integers(2, 4), st.booleans())
def test_random_streams_are_valid_zns_command_streams(events, n_zones, cap, per_class):
    lay = ZoneLayout(n_zones, 4, cap, 2, gc_free_zones=2, gc_per_class=per_class)
    ops = run(lay, events, max_pages=6)
    submit(zns_device(n_zones, 4, cap, max_open=lay.n_streams), ops)  # raises on any WP/capacity/state error
    # bookkeeping: per-zone valid counts equal the units the owner map assigns, and add up to resident data
    owned = (lay.owner >= 0).reshape(n_zones, cap).sum(axis=1)
    assert (owned == lay.zs[:, ZS_VALID]).all()
    assert int(owned.sum()) == lay.resident_pages
    assert not ((lay.zs[:, ZS_STATE] == Z_FULL) & (lay.zs[:, ZS_VALID] == 0)).any()  # dead full zones are reset
    c = lay.counters()
    assert c["objects_written"] == sum(1 for e in events if e[1] == W)  # every write placed (evicting if needed)
