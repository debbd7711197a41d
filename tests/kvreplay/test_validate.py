"""kvbed trace validate: every invariant flags the right row; good traces pass."""

from __future__ import annotations

import numpy as np
import pytest

import pyarrow.parquet as pq

from kvreplay.schema import META_KEY, TraceMeta, TraceWriter, make_batch
from kvreplay.validate import validate_trace
from kvbed.core.errors import KvbedError

GOOD = [  # (ts, op, obj, parent, tier)
    (0, "create", 1, 0, "gpu"),
    (1, "commit", 1, 0, "gpu"),
    (1, "persist", 1, 0, "ssd"),
    (2, "create", 2, 1, "gpu"),
    (3, "commit", 2, 1, "gpu"),
    (4, "hit", 1, 0, "gpu"),
    (5, "transform", 3, 1, "cpu"),
    (5, "persist", 3, 1, "ssd"),
    (6, "evict", 1, 0, "gpu"),
    (7, "load", 1, 0, "ssd"),
    (7, "persist", 1, 0, "gpu"),
    (8, "invalidate", 3, 1, "ssd"),
    (9, "evict", 1, 0, "ssd"),
    (10, "delete", 1, 0, "gpu"),
    (11, "recover", 3, 1, "gpu"),
]


def write(tmp_path, rows, name="t.parquet", **cols):
    ts, op, obj, par, tier = zip(*rows)
    kind = cols.pop("kind", ["quantized" if o == 3 else "exact" for o in obj])
    nbytes = cols.pop("nbytes", [50 if o == 3 else 100 for o in obj])
    ntokens = cols.pop("ntokens", np.full(len(ts), 4))
    b = make_batch(ts_ns=np.array(ts), op=np.array(op), obj_id=np.array(obj, np.uint64),
                   parent_id=np.array(par, np.uint64), tier=np.array(tier), kind=np.array(kind),
                   nbytes=np.array(nbytes), ntokens=np.asarray(ntokens), **cols)
    path = tmp_path / name
    # written without TraceWriter's own sort check, so unsorted traces can be validated too
    meta = TraceMeta()
    meta.created_by = "test"
    table = TraceWriter(path, meta)._to_table(b).replace_schema_metadata({META_KEY: meta.to_json().encode()})
    pq.write_table(table, path)
    return path


def test_good_trace(tmp_path):
    rep = validate_trace(write(tmp_path, GOOD))
    assert rep.ok, rep.first
    assert rep.rows == len(GOOD)
    assert rep.objects == 3
    # live copies at the end: obj 2 in gpu, obj 3 recovered in gpu
    assert rep.live_copies_at_end == 2


def with_row(i, row):
    rows = list(GOOD)
    rows[i] = row
    return rows


CASES = [
    # (rows, expected first violation code, its row)
    (GOOD + [(12, "load", 1, 0, "ssd")], "use_after_delete", 15),
    (with_row(9, (7, "load", 1, 0, "cpu")), "not_present", 9),  # never persisted to cpu
    (with_row(5, (4, "hit", 2, 1, "ssd")), "not_present", 5),
    (with_row(3, (2, "create", 1, 0, "gpu")), "id_reused", 3),
    (with_row(1, (1, "commit", 1, 0, "cpu")), "commit_without_create", 1),
    (with_row(2, (1, "persist", 1, 0, "gpu")), "already_present", 2),
    (with_row(7, (5, "persist", 4, 0, "ssd")), "unknown_object", 7),
    # obj 1 is deleted on ssd while it still has a gpu copy: only that copy's delete may follow
    (GOOD[:12] + [(9, "delete", 1, 0, "ssd"), (10, "hit", 1, 0, "gpu")], "delete_incomplete", 13),
    (with_row(3, (2, "create", 2, 77, "gpu")), "parent_unknown", 3),
    (with_row(3, (2, "create", 2, 2, "gpu")), "parent_self", 3),
    (with_row(4, (0, "commit", 2, 1, "gpu")), "time_backwards", 4),
    (with_row(2, (1, "persist", 0, 0, "ssd")), "zero_id", 2),
]


@pytest.mark.parametrize("rows, code, row", CASES)
def test_each_violation(tmp_path, rows, code, row):
    rep = validate_trace(write(tmp_path, rows))
    assert not rep.ok
    assert rep.first[0].code == code, [(v.row, v.code) for v in rep.first]
    assert rep.first[0].row == row
    assert rep.counts[code] >= 1


def test_size_kind_and_enum_checks(tmp_path):
    nbytes = [50 if r[2] == 3 else 100 for r in GOOD]
    nbytes[5] = 0  # hit with size 0
    nbytes[9] = 99  # load of obj 1 with another size
    rep = validate_trace(write(tmp_path, GOOD, nbytes=nbytes))
    assert [(v.row, v.code) for v in rep.first][:3] == [(5, "bad_size"), (5, "size_changed"), (9, "size_changed")]
    kinds = ["quantized" if r[2] == 3 else "exact" for r in GOOD]
    kinds[10] = "compressed"
    rep = validate_trace(write(tmp_path, GOOD, name="k.parquet", kind=kinds))
    assert [(v.row, v.code) for v in rep.first] == [(10, "kind_changed")]


def test_token_and_id_checks(tmp_path):
    ntok = np.full(len(GOOD), 4)
    ntok[6] = -1
    req = np.full(len(GOOD), -1)
    req[8] = -2
    rep = validate_trace(write(tmp_path, GOOD, ntokens=ntok, request_id=req))
    assert [(v.row, v.code) for v in rep.first] == [(6, "bad_tokens"), (8, "bad_ids")]


@pytest.mark.parametrize("op", ["evict", "invalidate", "delete"])
def test_removing_a_copy_that_is_not_there(tmp_path, op):
    rows = with_row(8, (6, op, 1, 0, "cpu"))  # obj 1 was never in cpu
    rep = validate_trace(write(tmp_path, rows))
    assert (rep.first[0].row, rep.first[0].code) == (8, "not_present")


def test_delete_of_every_copy_at_once(tmp_path):
    """A TTL expiry deletes all copies: one delete per tier, nothing in between; a copy left behind
    is reported at the end."""
    base = [(0, "create", 1, 0, "gpu"), (1, "commit", 1, 0, "gpu"), (2, "persist", 1, 0, "ssd")]
    ok = base + [(5, "delete", 1, 0, "gpu"), (5, "delete", 1, 0, "ssd")]
    assert validate_trace(write(tmp_path, ok, name="ok.parquet")).ok
    rep = validate_trace(write(tmp_path, base + [(5, "delete", 1, 0, "gpu")], name="half.parquet"))
    assert not rep.ok and rep.half_deleted == 1 and rep.counts == {"delete_incomplete": 1}


def test_transform_needs_live_parent(tmp_path):
    rows = [(0, "create", 1, 0, "gpu"), (1, "commit", 1, 0, "gpu"), (2, "delete", 1, 0, "gpu"),
            (3, "transform", 3, 1, "cpu")]
    rep = validate_trace(write(tmp_path, rows))
    assert [(v.row, v.code) for v in rep.first] == [(3, "transform_parent_dead")]


def test_reports_at_most_max_and_counts_all(tmp_path):
    rows = GOOD + [(20 + i, "hit", 1, 0, "gpu") for i in range(30)]
    rep = validate_trace(write(tmp_path, rows), max_report=5)
    assert len(rep.first) == 5
    assert rep.counts == {"use_after_delete": 30}
    assert [v.row for v in rep.first] == [15, 16, 17, 18, 19]


def test_sparse_ids_are_mapped(tmp_path):
    """Engine block hashes are huge sparse ids: same verdicts as with dense ids."""
    big = {1: 2**63 + 5, 2: 2**40 + 3, 3: 2**62 + 11, 0: 0}
    rows = [(t, op, big[o], big[p], tier) for t, op, o, p, tier in GOOD]
    kinds = ["quantized" if r[2] == 3 else "exact" for r in GOOD]
    nbytes = [50 if r[2] == 3 else 100 for r in GOOD]
    assert validate_trace(write(tmp_path, rows, kind=kinds, nbytes=nbytes)).ok
    bad = rows + [(12, "load", big[1], 0, "ssd")]
    rep = validate_trace(write(tmp_path, bad, name="b.parquet", kind=kinds + ["exact"], nbytes=nbytes + [100]))
    assert [(v.row, v.code) for v in rep.first] == [(15, "use_after_delete")]


def test_streams_row_groups(tmp_path):
    """Per-object state survives across row groups: a violation in the 3rd row group is found."""
    path = tmp_path / "rg.parquet"
    with TraceWriter(path, TraceMeta(), row_group_rows=4) as w:
        ts, op, obj, par, tier = zip(*(GOOD + [(12, "load", 1, 0, "ssd")]))
        kind = ["quantized" if o == 3 else "exact" for o in obj]
        nb = [50 if o == 3 else 100 for o in obj]
        w.write(make_batch(ts_ns=np.array(ts), op=np.array(op), obj_id=np.array(obj, np.uint64),
                           parent_id=np.array(par, np.uint64), tier=np.array(tier), kind=np.array(kind),
                           nbytes=np.array(nb), ntokens=np.full(len(ts), 4)))
    rep = validate_trace(path)
    assert [(v.row, v.code) for v in rep.first] == [(15, "use_after_delete")]


def test_ids_beyond_the_stated_statistics_are_refused(tmp_path):
    """Dense ids size the state arrays from the row-group statistics; a file (written by another tool)
    whose statistics understate obj_id must be refused, not indexed past the arrays."""
    big = 1_000_003  # dense range (< 2^20), bytes 43 42 0f 00.. found only in obj_id's statistics
    rows = [(t, op, big if o == 3 else o, p, tier) for t, op, o, p, tier in GOOD]
    path = write(tmp_path, rows)
    data = bytearray(path.read_bytes())
    footer_len = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - footer_len
    footer = bytes(data[start:-8])
    stated = big.to_bytes(8, "little")
    assert stated in footer
    data[start:-8] = footer.replace(stated, (3).to_bytes(8, "little"))  # same length: footer stays valid
    path.write_bytes(bytes(data))
    assert pq.ParquetFile(path).metadata.row_group(0).column(2).statistics.max == 3
    with pytest.raises(KvbedError, match=r"obj_id 1000003 exceeds the maximum 3"):
        validate_trace(path)


# ------------------------------------------------------------------------------ the row checks before a replay


def row_check(path):
    from kvreplay.schema import TraceReader
    from kvreplay.validate import CHECK_COLUMNS, RowCheck

    reader = TraceReader(path)
    check = RowCheck(reader)
    for b in reader.iter_batches(CHECK_COLUMNS):
        check.feed(b)
    return check.rows


@pytest.mark.parametrize("rows, code, row", CASES)
def test_row_checks_stop_at_validates_first_violation(tmp_path, rows, code, row):
    """The checks a replay runs are validate's kernel: the same first row and message, unless the violation
    needs a column a replay does not read (parent_id): those are left to validate."""
    from kvreplay.validate import NOT_CHECKED, VIOLATIONS

    path = write(tmp_path, rows)
    if code in NOT_CHECKED:
        assert row_check(path) == len(rows)
        return
    with pytest.raises(KvbedError) as exc:
        row_check(path)
    message = dict(VIOLATIONS)[code]
    assert str(exc.value).startswith(f"{path}: row {row}: {message} (")


def test_row_checks_on_sparse_ids_and_across_row_groups(tmp_path):
    big = {1: 2**63 + 5, 2: 2**40 + 3, 3: 2**62 + 11, 0: 0}
    rows = [(t, op, big[o], big[p], tier) for t, op, o, p, tier in GOOD]
    kinds = ["quantized" if r[2] == 3 else "exact" for r in GOOD]
    nbytes = [50 if r[2] == 3 else 100 for r in GOOD]
    assert row_check(write(tmp_path, rows, kind=kinds, nbytes=nbytes)) == len(GOOD)
    bad = write(tmp_path, rows + [(12, "load", big[1], 0, "ssd")], name="b.parquet", kind=kinds + ["exact"],
                nbytes=nbytes + [100])
    with pytest.raises(KvbedError, match=r"row 15: event on an object after its delete \(load in ssd"):
        row_check(bad)
    path = tmp_path / "rg.parquet"
    with TraceWriter(path, TraceMeta(), row_group_rows=4) as w:
        ts, op, obj, par, tier = zip(*(GOOD + [(12, "load", 1, 0, "ssd")]))
        w.write(make_batch(ts_ns=np.array(ts), op=np.array(op), obj_id=np.array(obj, np.uint64),
                           parent_id=np.array(par, np.uint64), tier=np.array(tier),
                           kind=np.array(["quantized" if o == 3 else "exact" for o in obj]),
                           nbytes=np.array([50 if o == 3 else 100 for o in obj]), ntokens=np.full(len(ts), 4)))
    with pytest.raises(KvbedError, match=r"row 15: event on an object after its delete"):
        row_check(path)


def test_a_trace_cut_anywhere_passes_the_row_checks(tmp_path):
    """What is judged at the end (a delete left half done, a create never committed) is validate's: a prefix of
    a good trace, cut between the deletes of one object's copies, still replays."""
    base = [(0, "create", 1, 0, "gpu"), (1, "commit", 1, 0, "gpu"), (2, "persist", 1, 0, "ssd"),
            (3, "create", 2, 0, "gpu"), (5, "delete", 1, 0, "gpu")]
    path = write(tmp_path, base)
    assert not validate_trace(path).ok
    assert row_check(path) == len(base)
