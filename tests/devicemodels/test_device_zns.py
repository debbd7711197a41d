"""ZNS: write pointers, append, capacity vs size, open/active limits, reset/finish, timing."""

import pytest

from devicemodels.base import OP_READ, OP_WRITE, OP_ZONE_APPEND, OP_ZONE_FINISH, OP_ZONE_RESET, OP_TRIM
from kvbed.core.errors import KvbedError

from tests.support.devices import make, ops

# 16 zones of 256 pages (1 MiB), 192 writable; blocks of 16 pages over 2x2 dies
ZNS = ["zone_bytes=1MiB", "zone_cap_bytes=768KiB", "max_open_zones=2", "max_active_zones=3"]
ZP = 256


def test_geometry():
    d = make("zns", *ZNS)
    assert (d.n_zones, d.zone_pages, d.zone_cap_pages, d.logical_pages) == (16, 256, 192, 4096)


def test_writes_follow_the_write_pointer_and_append_returns_the_lba():
    d = make("zns", *ZNS)
    c = d.submit(ops((OP_ZONE_APPEND, 0, 8), (OP_ZONE_APPEND, 0, 4), (OP_WRITE, 12, 4), (OP_ZONE_APPEND, 0, 1)))
    assert list(c.lba) == [0, 8, -1, 16]
    assert d.zones()["wp"][0] == 17
    with pytest.raises(KvbedError, match="not at the zone's write pointer.*offset 17") as e:
        d.submit(ops((OP_WRITE, 40, 1)))
    assert str(e.value).startswith("zns op 0 (write, zone 0)")
    with pytest.raises(KvbedError, match="zone start"):
        d.submit(ops((OP_ZONE_APPEND, 5, 1)))
    with pytest.raises(KvbedError, match="writable capacity.*175 pages left"):
        d.submit(ops((OP_WRITE, 17, 176)))
    d.submit(ops((OP_WRITE, 17, 175)))  # exactly to capacity: the zone becomes full
    assert d.stats()["zones"]["states"]["full"] == 1
    with pytest.raises(KvbedError, match="zone is full"):
        d.submit(ops((OP_ZONE_APPEND, 0, 1)))
    d.check_invariants()


def test_open_limit_closes_implicitly_or_fails():
    d = make("zns", *ZNS)
    d.submit(ops((OP_WRITE, 0, 1), (OP_WRITE, ZP, 1), (OP_WRITE, 2 * ZP, 1)))
    z = d.stats()["zones"]
    assert (z["open"], z["active"], z["implicit_closes"]) == (2, 3, 1)
    assert d.zones()["state"][0] == 3  # the least recently opened zone was closed
    with pytest.raises(KvbedError, match="too many active zones"):
        d.submit(ops((OP_WRITE, 3 * ZP, 1)))
    d.submit(ops((OP_WRITE, 1, 1)))  # writing a closed zone reopens it
    strict = make("zns", *ZNS, "implicit_close=false")
    strict.submit(ops((OP_WRITE, 0, 1), (OP_WRITE, ZP, 1)))
    with pytest.raises(KvbedError, match="too many open zones"):
        strict.submit(ops((OP_WRITE, 2 * ZP, 1)))
    d.check_invariants()
    strict.check_invariants()


def test_finish_and_reset_release_resources_and_erase():
    d = make("zns", *ZNS)
    d.submit(ops((OP_WRITE, 0, 40), (OP_WRITE, ZP, 1), (OP_ZONE_FINISH, ZP, 1)))
    z = d.stats()["zones"]
    assert (z["open"], z["active"], z["finishes"]) == (1, 1, 1)
    d.submit(ops((OP_ZONE_RESET, 0, 1), (OP_ZONE_RESET, 5 * ZP, 1)))
    c = d.counters()
    assert c["zone_resets"] == 1 and c["zone_resets_empty"] == 1
    # 40 pages striped over 4 dies: 10 pages per die, one 16-page block each
    assert c["block_erases"] == 4
    assert d.zones()["wp"][0] == 0 and d.stats()["zones"]["active"] == 0  # zone 1 is full, not active
    d.submit(ops((OP_WRITE, 0, 1)))  # writable again from the start
    assert d.stats()["wear"]["erase_count_max"] == 1
    d.check_invariants()


def test_reads_and_timing():
    d = make("zns", *ZNS)
    c = d.submit(ops((OP_WRITE, 0, 4), (OP_READ, 0, 1, 0, 10), (OP_READ, 100, 2, 0, 20)))
    # 4 pages over 4 dies on 2 channels, then a read queued behind the program of its die
    assert c.done_ns[0] == 2 * 5120 + 200_000
    assert c.done_ns[1] == 5120 + 200_000 + 40_000 + 5120
    assert c.done_ns[2] == 20  # beyond the write pointer: no NAND work
    cnt = d.counters()
    assert cnt["host_pages_read"] == 3 and cnt["host_pages_read_unmapped"] == 2
    c = d.submit(ops((OP_ZONE_RESET, 0, 1, 0, 10**9)))
    assert c.done_ns[0] == 10**9 + 2_000_000  # one block per die, erased in parallel


def test_no_trim_and_waf_is_one():
    d = make("zns", *ZNS)
    with pytest.raises(KvbedError, match="not supported"):
        d.submit(ops((OP_TRIM, 0, 1)))
    for z in range(16):
        d.submit(ops((OP_WRITE, z * ZP, 192), (OP_ZONE_RESET, z * ZP, 1)) if z else ops((OP_WRITE, 0, 192)))
    s = d.stats()
    assert s["waf"] == 1.0 and s["counters"]["gc_pages_moved"] == 0
    out = make("zns", *ZNS).precondition(0.5)
    assert out["zones_filled"] == 8 and out["host_pages_written"] == 8 * 192
    with pytest.raises(KvbedError, match="random overwrites"):
        make("zns", *ZNS).precondition(1.0, overwrite_x=1.0)
