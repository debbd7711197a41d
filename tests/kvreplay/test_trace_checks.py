"""Bad traces never become figures: a trace whose rows a replay would misread (out of time order, an event on
an object that does not exist, a reused id, a size or kind that changes) is refused before any replay, any
multi-tier run, any VM and any study point, in one line naming the file and the first bad row; a trace written
by another tool is read right or refused the same way; `kvbed trace sort` repairs the time order."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.cli import kvbed, ok, one_line_error
from kvreplay import schema as S
from tests.support.replay_fixtures import two_lifetimes


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return two_lifetimes(tmp_path_factory.mktemp("checks") / "good.parquet", n_objects=600)


@pytest.fixture(scope="module")
def good_run(good, tmp_path_factory):
    out = tmp_path_factory.mktemp("checks-run") / "run"
    ok(kvbed("replay", good, "-o", out, "-q", "--no-plots"))
    return json.loads((out / "result.json").read_text())


def plain_write(table: pa.Table, path: Path, meta: bytes | None = None) -> Path:
    """Write like another tool would (plain pyarrow, no TraceWriter checks), with kvbed's metadata if given."""
    if meta is not None:
        table = table.replace_schema_metadata({S.META_KEY: meta})
    pq.write_table(table, path)
    return path


def with_rows(good: Path, path: Path, order: np.ndarray | None = None, **cols: np.ndarray) -> Path:
    """The good trace's rows in ``order`` with columns replaced (numpy values, same type), kvbed's metadata kept."""
    t = pq.read_table(good)
    for name, values in cols.items():
        t = t.set_column(t.schema.get_field_index(name), t.schema.field(name), pa.array(values, t.schema.field(name).type))
    if order is not None:
        t = t.take(pa.array(order))
    return plain_write(t, path, pq.read_schema(good).metadata[S.META_KEY])


def reversed_trace(good: Path, path: Path) -> Path:
    return with_rows(good, path, np.arange(pq.read_metadata(good).num_rows)[::-1])


def _no_vm(*args, **kwargs):
    raise AssertionError("a VM was started for a trace that should have been refused")


def test_reversed_rows_are_refused_before_a_replay(good, tmp_path):
    """Before: exit 0 and a WAF from deletes before their writes (or a crash in the scan)."""
    rev = reversed_trace(good, tmp_path / "rev.parquet")
    out = tmp_path / "out"
    # row 0 (the last row of the good trace) evicts an object nothing created yet; the message says the rows
    # are out of time order and how to sort them
    one_line_error(kvbed("replay", rev, "-o", out, "-q"), str(rev), "row 0: event on an object never created",
                   "rows out of time order from row", "`kvbed trace sort`")
    assert not out.exists()


def test_reversed_rows_are_refused_before_a_multi_tier_run(good, tmp_path):
    rev = reversed_trace(good, tmp_path / "rev.parquet")
    out = tmp_path / "out"
    one_line_error(kvbed("replay", rev, "--tiers", "ssd", "-o", out, "-q"), str(rev), "row 0:", "out of time order")
    assert not out.exists()


def test_reversed_rows_are_refused_before_any_vm_starts(good, tmp_path, monkeypatch):
    """--target vm: the row checks ride on the scan, which comes before an ephemeral VM is started (and before
    anything is sent to a running one: the same Replay.prepare)."""
    from testbed.vm import replay as vm_replay

    monkeypatch.setattr(vm_replay.VmReplay, "_open", _no_vm)
    rev = reversed_trace(good, tmp_path / "rev.parquet")
    out = tmp_path / "out"
    one_line_error(kvbed("replay", rev, "--target", "vm", "-o", out, "-q"), str(rev), "row 0:", "out of time order")
    assert not out.exists()


def test_reversed_rows_are_refused_before_any_study_point(good, tmp_path):
    rev = reversed_trace(good, tmp_path / "rev.parquet")
    spec = tmp_path / "s.toml"
    spec.write_text(f'[study]\nname = "rev"\nseeds = [0]\n\n[trace]\npath = "{rev}"\n\n[replay]\ndevice = "fdp"\n\n'
                    '[axes]\n"replay.hints" = ["none", "oracle"]\n')
    out = tmp_path / "study"
    one_line_error(kvbed("study", "run", spec, "-o", out, "-q", "-j", "1", "--no-report"), str(rev), "row 0:",
                   "out of time order")
    assert not any((out / "runs").iterdir())  # no point ran, none failed on its own


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


@pytest.mark.parametrize("case", ["duplicate_create", "size_changed", "kind_changed", "never_created"])
def test_inconsistent_rows_are_refused_naming_the_first(good, tmp_path, case):
    """Before: each replayed with exit 0 (a reused id is a rewrite on the device, a create that is missing
    goes unnoticed, a size change writes one size and reads another)."""
    t = pq.read_table(good)
    obj = t["obj_id"].to_numpy().copy()
    op = np.array(S.OPS)[t["op"].combine_chunks().indices.to_numpy()]
    tier = np.array(S.TIERS)[t["tier"].combine_chunks().indices.to_numpy()]
    path = tmp_path / f"{case}.parquet"
    extra: list[str] = []
    if case == "duplicate_create":  # a converter that reused object 1's id for object 2
        row = _first(obj == 2)
        obj[obj == 2] = 1
        parent = t["parent_id"].to_numpy().copy()
        parent[parent == 2] = 1
        with_rows(good, path, obj_id=obj, parent_id=parent)
        fragment = "create/transform of an id that already exists"
    elif case == "size_changed":  # object 5's SSD copy has another size than the object
        nb = t["nbytes"].to_numpy().copy()
        row = _first((obj == 5) & (op == "persist") & (tier == "ssd"))
        nb[row] += 4096
        with_rows(good, path, nbytes=nb)
        fragment = "nbytes differs from the object's first event"
    elif case == "kind_changed":
        kind = t["kind"].combine_chunks()
        codes = kind.indices.to_numpy().copy()
        row = _first((obj == 5) & (op == "persist"))
        codes[row] = (codes[row] + 1) % len(kind.dictionary)
        t2 = t.set_column(t.schema.get_field_index("kind"), t.schema.field("kind"),
                          pa.DictionaryArray.from_arrays(pa.array(codes, pa.int8()), kind.dictionary))
        plain_write(t2, path, pq.read_schema(good).metadata[S.META_KEY])
        fragment = "kind differs from the object's first event"
        # read (and checked) only by a run that reads kind: a policy that ignores it makes the same figures
        ok(kvbed("replay", path, "-o", tmp_path / "none", "-q", "--no-plots"))
        extra = ["--hints", "type"]
    else:  # object 7's create and commit are missing
        keep = ~((obj == 7) & np.isin(op, ["create", "commit"]))
        row = _first((obj == 7) & keep)
        row -= int(np.count_nonzero(~keep[:row]))
        with_rows(good, path, np.flatnonzero(keep))
        fragment = "event on an object never created"
    out = tmp_path / "out"
    one_line_error(kvbed("replay", path, *extra, "-o", out, "-q"), str(path), f"row {row}: {fragment}")
    assert not out.exists()


# ------------------------------------------------------------------------------ traces from another tool


def test_another_tools_trace_out_of_order_is_refused(good, tmp_path):
    """A converter writing kvbed's columns and metadata with plain pyarrow, rows grouped by object instead of
    time: refused (before: replayed into a figure, or a crash)."""
    t = pq.read_table(good)
    order = np.lexsort((t["ts_ns"].to_numpy(), t["obj_id"].to_numpy()))
    path = with_rows(good, tmp_path / "by-object.parquet", order)
    one_line_error(kvbed("replay", path, "-o", tmp_path / "out", "-q"), str(path), "row ", "out of time order")


def test_another_tools_trace_in_order_is_read_right(good, good_run, tmp_path):
    """pandas' own types (categories in its own order, no TraceWriter): the same figures as kvbed's file. (A
    guard that the checks refuse nothing good; this passed before as well.)"""
    df = pq.read_table(good).to_pandas()
    for name in ("op", "tier", "kind", "tenant", "scope"):
        df[name] = df[name].astype(str).astype("category")  # categories sorted alphabetically, not kvbed's codes
    table = pa.Table.from_pandas(df, preserve_index=False)
    path = plain_write(table.cast(pa.schema([table.schema.field(n) for n in S.COLUMN_NAMES]).with_metadata(None)),
                       tmp_path / "pandas.parquet", pq.read_schema(good).metadata[S.META_KEY])
    out = tmp_path / "run"
    ok(kvbed("replay", path, "-o", out, "-q", "--no-plots"))
    mine, theirs = json.loads((out / "result.json").read_text())["jobs"][0], good_run["jobs"][0]
    for key in ("waf", "user_bytes_written", "media_bytes_written", "gc_count", "erases", "object_read", "write"):
        assert mine[key] == theirs[key], key


@pytest.mark.parametrize("case", ["no_metadata", "int64_ids", "string_ops"])
def test_another_tools_trace_with_other_types_is_refused_in_one_line(good, tmp_path, case):
    """Without kvbed's metadata, or with other column types: refused naming the file and what differs (this
    passed before as well)."""
    t = pq.read_table(good)
    meta = pq.read_schema(good).metadata[S.META_KEY]
    if case == "no_metadata":
        path, fragment = plain_write(t.replace_schema_metadata(None), tmp_path / "x.parquet"), "no 'kvbed' file metadata"
    elif case == "int64_ids":
        t = t.set_column(2, pa.field("obj_id", pa.int64()), t["obj_id"].cast(pa.int64()))
        path, fragment = plain_write(t, tmp_path / "x.parquet", meta), "column 'obj_id' has type int64, expected uint64"
    else:
        t = t.set_column(1, pa.field("op", pa.string()), t["op"].cast(pa.string()))
        path, fragment = plain_write(t, tmp_path / "x.parquet", meta), "column 'op' has type string"
    one_line_error(kvbed("replay", path, "-o", tmp_path / "out", "-q"), str(path), fragment)


# ------------------------------------------------------------------------------ kvbed trace sort


def _scrambled(good: Path, path: Path, seed: int = 3) -> Path:
    """The good trace's rows with its instants shuffled; rows of one instant keep their order (what a converter
    that writes per source shard or per object and never sorts produces)."""
    ts = pq.read_table(good, columns=["ts_ns"])["ts_ns"].to_numpy()
    uniq, inv = np.unique(ts, return_inverse=True)
    key = np.random.default_rng(seed).permutation(len(uniq))[inv]
    return with_rows(good, path, np.argsort(key, kind="stable"))


def test_trace_sort_round_trip(good, good_run, tmp_path):
    scrambled = _scrambled(good, tmp_path / "scrambled.parquet")
    one_line_error(kvbed("replay", scrambled, "-o", tmp_path / "refused", "-q"), str(scrambled), "out of time order")
    out = tmp_path / "sorted.parquet"
    res = ok(kvbed("trace", "sort", scrambled, "-o", out, "--json"))
    doc = json.loads(res.output)
    assert doc["rows"] == pq.read_metadata(good).num_rows and doc["rows_moved"] > 0
    # the same rows in the same order as the original, its metadata kept with a note
    assert pq.read_table(out).equals(pq.read_table(good))
    meta, orig = S.TraceReader(out).meta, S.TraceReader(good).meta
    assert (meta.source, meta.geometry, meta.generator) == (orig.source, orig.geometry, orig.generator)
    assert meta.extra["sorted"]["tool"] == "kvbed trace sort"
    assert meta.extra["sorted"]["rows_back_in_time"] == doc["rows_back_in_time"] > 0
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()  # readable like any output, not a private temp file
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind
    ok(kvbed("trace", "validate", out))
    ok(kvbed("replay", out, "-o", tmp_path / "run", "-q", "--no-plots"))
    mine = json.loads((tmp_path / "run" / "result.json").read_text())
    assert mine["jobs"] == good_run["jobs"]


def test_trace_sort_in_place_and_bad_input(good, tmp_path):
    path = _scrambled(good, tmp_path / "t.parquet")
    ok(kvbed("trace", "sort", path, "-o", path))
    assert pq.read_table(path).equals(pq.read_table(good))
    (tmp_path / "x.parquet").write_text("not parquet")
    one_line_error(kvbed("trace", "sort", tmp_path / "x.parquet", "-o", tmp_path / "y.parquet"), "x.parquet",
                   "not a readable Parquet file")
    assert not (tmp_path / "y.parquet").exists()


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m
