"""A host index keyed by content (trace format v2's content_key) after a stale restore, on hand-counted
traces: a recomputed chunk gets a new object id but keeps its key, so the stale entry of its earlier copy is
found and loaded from an extent that was trimmed or rewritten since. Every outcome is counted by hand in the
comments; a v1 trace (no keys) falls back to object-id keying, where nothing is served wrong.

Objects are one 1 MiB mapping unit exactly (``MiB``), so every contract's header adds a second unit: the
extra bytes each contract writes and reads are counted too. Times are in units of 100 ms, so every write is
on the media long before a power loss (a unit programs in well under 100 ms on the default conv device).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from kvreplay import schema as S
from kvreplay import keycheck
from kvreplay.faults.model import assign_slots
from kvreplay.faults.state import FaultEvents
from kvreplay.replay import Replay, build_config
from kvreplay.validate import validate_trace
from tests.support import fault_traces as T
from tests.support.cli import kvbed, ok

MiB = T.MiB
A, B, C, Z = 0xA11CE, 0xB0B, 0xC0FFEE, 0x2222  # content keys (prefix-chain hashes)

#: 1 (key A) and 2 (key B) persisted, then both evicted; 3 (key C) is written into 1's freed extent (the
#: allocator reuses it whole), 2's extent is trimmed. The chunks of 1 and 2 are then needed again and
#: recomputed under new ids 4 (B) and 5 (A), as the tier simulator does.
KEYED = [
    (0, "create", 1, "gpu"), (0, "persist", 1, "ssd"), (0.5, "evict", 1, "gpu"),
    (1, "create", 2, "gpu"), (1, "persist", 2, "ssd"), (1.5, "evict", 2, "gpu"),
    # checkpoint of the stale index at 1.8: {A: 1's write, B: 2's write}
    (2, "evict", 1, "ssd"),
    (3, "create", 3, "gpu"), (3, "persist", 3, "ssd"), (3.5, "evict", 3, "gpu"),
    (4, "evict", 2, "ssd"),
    # the index comes back at 5 (3.2 old): C was indexed after the checkpoint, A and B are back
    (6, "load", 3, "ssd"),  # C: not in the restored index -> missing
    (7, "create", 4, "gpu"),  # B: the entry lists 2's extent, trimmed (zeros) -> a phantom load
    (8, "create", 5, "gpu"),  # A: the entry lists 1's extent, now 3's data, whole, same length -> a phantom load
    (9, "commit", 5, "gpu"),
]
KEYED_KEYS = {1: A, 2: B, 3: C, 4: B, 5: A}
FAULT_AT = "stale-index@500ms,age_ns=320ms"

#: 1 (key A) persisted and evicted; its chunk comes back as 2 (key A), written into 1's freed extent: the
#: stale entry of A lists 1's write, whose units now hold 2's data - the same content. 9 (key Z) is written
#: after the checkpoint and loaded through a fresh entry.
LUCKY = [
    (0, "create", 1, "gpu"), (0, "persist", 1, "ssd"), (0.5, "evict", 1, "gpu"),
    # checkpoint at 0.8: {A: 1's write}
    (1, "evict", 1, "ssd"),
    (2, "create", 2, "gpu"), (2, "persist", 2, "ssd"), (2.5, "evict", 2, "gpu"),
    # the index comes back at 3: A -> 1's write (its units: 2's write); 2's own write is not indexed
    (4, "load", 2, "ssd"),
]
LUCKY_KEYS = {1: A, 2: A}

#: after the restore, the recomputed chunk (3, key A) is stored again: the entry is fresh and the next load
#: of it is correct
FRESH = [
    (0, "create", 1, "gpu"), (0, "persist", 1, "ssd"), (0.5, "evict", 1, "gpu"),
    # checkpoint at 0.8: {A: 1's write}
    (1, "evict", 1, "ssd"),
    (2, "create", 9, "gpu"), (2, "persist", 9, "ssd"), (2.5, "evict", 9, "gpu"),  # Z, into 1's extent
    # the index comes back at 3: A -> 1's write (its units: 9's data)
    (4, "create", 3, "gpu"),  # A: phantom load through the stale entry
    (4, "persist", 3, "ssd"),  # A stored again: the entry now lists 3's write
    (4.5, "evict", 3, "gpu"),
    (6, "load", 3, "ssd"),  # through the fresh entry: reused
]
FRESH_KEYS = {1: A, 9: Z, 3: A}


def scaled(rows: list[tuple]) -> list[tuple]:
    """Rows with times in units of 100 ms (the fault_traces writer takes ms)."""
    return [(r[0] * 100, *r[1:]) for r in rows]


def put(tmp_path_factory, name: str, rows: list[tuple], keys: dict[int, int]):
    path = T.write(tmp_path_factory.mktemp("k") / f"{name}.parquet", scaled(rows),
                   nbytes={o: MiB for o in keys}, keys=keys)
    rep = validate_trace(path)
    assert rep.ok and rep.content_keys, rep  # valid v2 traces: ids never reused, one live object per key
    return path


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    return put(tmp_path_factory, "keyed", KEYED, KEYED_KEYS)


def faults(path, fault: str, contract: str) -> dict:
    cfg = build_config(path, "conv", "none", [f"contract={contract}", f"fault={fault}", "window_ns=100ms"])
    return Replay(cfg).run()["result"]["faults"]


def counts(f: dict) -> dict[str, int]:
    return {k: v["objects"] for k, v in f["injected"][0]["outcomes"].items() if v["objects"]}


def slots_of(batches: list[tuple[list, list, list, list]], n_obj: int) -> list[int]:
    """assign_slots over batches of (obj, key, scope, kind) rows, as the fault pass feeds them."""
    slot = np.full(n_obj, -1, np.int64)
    table = keycheck.new_state(1, slots=16)
    for obj, key, scope, kind in batches:
        n = len(obj)
        ev = FaultEvents(row0=0, ts=np.zeros(n, np.int64), op=np.zeros(n, np.int8), obj=np.array(obj, np.uint64),
                         tier=np.zeros(n, np.int8), nbytes=np.zeros(n, np.int64), ntokens=np.zeros(n, np.int32),
                         scope=np.array(scope, np.int32), kind=np.array(kind, np.int8), key=np.array(key, np.uint64))
        table = keycheck.ensure(table, 1, n)
        assign_slots(ev, table, slot)
    return slot.tolist()


def test_objects_of_one_key_scope_and_kind_share_a_slot():
    """Objects 1..6 over two batches: 1, 3 and 6 have key A (6 quantized: other bytes), 2 has B, 4 and 5 none
    (key 0); each shares the slot of the first object seen with its content (3 after 1, across the batch)."""
    q = S.KIND["quantized"]
    first = ([1, 2, 1], [A, B, A], [0, 0, 0], [0, 0, 0])
    second = ([4, 3, 6, 5, 3], [0, A, A, 0, A], [0, 0, 0, 0, 0], [0, 0, q, 0, 0])
    assert slots_of([first, second], 7) == [-1, 1, 2, 1, 4, 5, 6]  # 0: never seen
    other_scope = ([4, 3, 6, 5], [0, A, A, 0], [0, 1, 0, 0], [0, 0, q, 0])  # 3 in another scope: its own content
    assert slots_of([first, other_scope], 7) == [-1, 1, 2, 3, 4, 5, 6]
    # many keys through a table that starts small: it grows, and objects of one key still meet
    ids = list(range(1, 2001))
    keys = [1000 + (o % 700) for o in ids]
    got = slots_of([(ids[:900], keys[:900], [0] * 900, [0] * 900), (ids[900:], keys[900:], [0] * 1100, [0] * 1100)],
                   2001)
    want = {}
    assert got[1:] == [want.setdefault(k, o) for o, k in zip(ids, keys)]


# stale index from 180 ms restored at 500 ms: load 3 (C) -> missing; create 4 (B) -> 2's trimmed extent:
# zeros; create 5 (A) -> 1's extent, which holds 3's data whole (same two units): only a check that names the
# content (version's key in the header) or the write (lease) sees it is not A's
@pytest.mark.parametrize("contract,expected", [
    ("none", {"missing": 1, "wrong": 2}),
    ("checksum", {"missing": 1, "detected": 1, "wrong": 1}),  # zeros caught; 3's intact data passes its CRC
    ("version", {"missing": 1, "detected": 2}),
    ("lease", {"missing": 1, "detected": 2}),
    ("full", {"missing": 1, "detected": 2}),
])
def test_a_stale_entry_of_a_recomputed_chunk_is_loaded(keyed, contract, expected):
    f = faults(keyed, FAULT_AT, contract)
    assert f["index_key"] == "content"
    assert counts(f) == expected
    inj = f["injected"][0]
    assert f["phantom_loads"] == 2 and inj["stale_entry_loads"] == 2 and inj["lucky_loads"] == 0
    # whatever the contract does with them: 5's entry lists units that hold 3's write whole (foreign), 4's zeros
    assert (inj["stale_foreign_loads"], inj["stale_foreign_bytes"]) == (1, MiB)
    assert inj["served_wrong_bytes"] == expected.get("wrong", 0) * MiB
    # both loads go through stale entries, so every wrong one is a stale-entry load served wrong
    wrong = expected.get("wrong", 0)
    assert (inj["stale_wrong_loads"], inj["stale_wrong_bytes"]) == (wrong, wrong * MiB)
    st = inj["state"]
    assert (st["stale_entries"], st["entries_missing"], st["index_entries"]) == (2, 1, 2)
    # the cost, as without the fault: a header fills a second unit of each of the 3 objects written, and of
    # the one load that reads the device (3; phantom loads are not the trace's reads)
    ct = f["contract"]
    unit = 0 if contract == "none" else MiB
    assert (ct["objects_written"], ct["loads"]) == (3, 1)
    assert (ct["extra_bytes_written"], ct["extra_bytes_read"]) == (3 * unit, unit)
    assert ct["header_bytes_written"] == 3 * ct["header_bytes_per_object"]


def test_power_loss_with_a_stale_index_loads_the_same_stale_entries(keyed):
    """The same restore through a power loss: nothing was in flight at 500 ms and no volatile copy is loaded
    afterwards, so the outcomes are the stale restore's; the gpu copy of 3 is gone besides."""
    for contract, expected in (("none", {"missing": 1, "wrong": 2}), ("full", {"missing": 1, "detected": 2})):
        f = faults(keyed, "power-loss@500ms,index=stale,stale_ns=320ms", contract)
        assert counts(f) == expected, contract
        st = f["injected"][0]["state"]
        assert (st["write_ops_lost"], st["stale_entries"], st["entries_missing"]) == (0, 2, 1)
        assert f["injected"][0]["stale_entry_loads"] == 2


# load 2 (A) at 400 ms through the stale entry (1's write): its units hold 2's write, whole, content A at the
# scope's version: served correct by luck - except under a lease, which sees the extent was rewritten
@pytest.mark.parametrize("contract,expected", [
    ("none", {"reused": 1}), ("checksum", {"reused": 1}), ("version", {"reused": 1}),
    ("lease", {"detected": 1}), ("full", {"detected": 1}),
])
def test_a_stale_entry_whose_extent_holds_the_same_content_is_a_lucky_load(tmp_path_factory, contract, expected):
    path = put(tmp_path_factory, "lucky", LUCKY, LUCKY_KEYS)
    f = faults(path, "stale-index@300ms,age_ns=220ms", contract)
    assert counts(f) == expected
    inj = f["injected"][0]
    assert inj["stale_entry_loads"] == 1 and inj["served_wrong_objects"] == 0 and inj["stale_wrong_loads"] == 0
    assert inj["lucky_loads"] == (1 if "reused" in expected else 0) and inj["stale_foreign_loads"] == 0
    assert inj["lucky_bytes"] == inj["lucky_loads"] * MiB
    assert f["contract"]["detected_valid_loads"] == (1 if "detected" in expected else 0)


def test_a_key_stored_again_after_the_restore_is_fresh(tmp_path_factory):
    """create 3 (A): a phantom load of 9's data through the stale entry (wrong under none, detected under
    full); 3 is then persisted, its entry is fresh, and its load at 600 ms is correct under both."""
    path = put(tmp_path_factory, "fresh", FRESH, FRESH_KEYS)
    runs = {c: faults(path, "stale-index@300ms,age_ns=220ms", c) for c in ("none", "full")}
    assert {c: counts(f) for c, f in runs.items()} == {"none": {"reused": 1, "wrong": 1},
                                                       "full": {"reused": 1, "detected": 1}}
    # the one wrong load under none is the phantom load through the stale entry; full lets none through
    assert {c: f["injected"][0]["stale_wrong_loads"] for c, f in runs.items()} == {"none": 1, "full": 0}
    f = runs["full"]
    inj = f["injected"][0]
    assert (inj["stale_entry_loads"], inj["stale_foreign_loads"], f["phantom_loads"]) == (1, 1, 1)


def as_v1(src, dst):
    """The same events without the content_key column, as format v1 wrote them."""
    table = pq.read_table(src)
    meta = json.loads(table.schema.metadata[S.META_KEY])
    meta["format_version"] = 1
    pq.write_table(table.drop(["content_key"]).replace_schema_metadata({S.META_KEY: json.dumps(meta).encode()}), dst)
    return dst


def test_a_v1_trace_keys_the_index_by_object_and_says_so(keyed, tmp_path):
    """Without keys 4 and 5 are new objects to the index: no phantom load, nothing wrong; only 3 is missing."""
    v1 = as_v1(keyed, tmp_path / "v1.parquet")
    f = faults(v1, FAULT_AT, "none")
    assert (f["index_key"], counts(f), f["phantom_loads"]) == ("object", {"missing": 1}, 0)
    assert "format v1" in f["index_key_note"]
    res = ok(kvbed("replay", v1, "--device", "conv", "--fault", FAULT_AT, "-o", tmp_path / "run", "-q"))
    assert "kvbed: note: a format v1 trace has no content keys" in res.stderr
    # a v2 trace whose keys are all 0 (none known) is keyed by object id too
    zero = T.write(tmp_path / "zero.parquet", scaled(KEYED), nbytes={o: MiB for o in KEYED_KEYS})
    f0 = faults(zero, FAULT_AT, "none")
    assert (f0["index_key"], counts(f0)) == ("object", {"missing": 1})
    assert "every content_key" in f0["index_key_note"]
