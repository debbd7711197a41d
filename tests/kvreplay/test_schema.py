"""Trace format v1: round trip, streaming, atomic writes, and clear errors for bad files."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvreplay.schema import (
    ARROW_SCHEMA,
    META_KEY,
    OPS,
    TIERS,
    TraceMeta,
    TraceReader,
    TraceWriter,
    make_batch,
    read_trace,
    write_trace,
)
from kvbed.core.errors import KvbedError


def batch(n=10, t0=0):
    return make_batch(ts_ns=np.arange(t0, t0 + n), op=np.array(["create"] * n), obj_id=np.arange(1, n + 1, dtype=np.uint64),
                      tier=np.array(["gpu"] * n), nbytes=np.full(n, 1 << 20), ntokens=np.full(n, 8),
                      tenant=np.arange(n) % 2)


def test_round_trip_and_metadata(tmp_path):
    meta = TraceMeta(source={"importer": "x"}, geometry={"bytes_per_token": 131072})
    path = write_trace(tmp_path / "a.parquet", batch(), meta, tenants=["t0", "t1"])
    b, r = read_trace(path)
    assert r.meta.source == {"importer": "x"}
    assert r.meta.geometry["bytes_per_token"] == 131072
    assert b["obj_id"].tolist() == list(range(1, 11))
    assert [r.tenants[i] for i in b["tenant"]] == ["t0", "t1"] * 5
    pf = pq.ParquetFile(path)
    assert pf.metadata.row_group(0).column(0).compression == "ZSTD"
    assert pa.types.is_dictionary(pf.schema_arrow.field("op").type)


def test_streaming_row_groups_and_final_meta(tmp_path):
    path = tmp_path / "s.parquet"
    w = TraceWriter(path, TraceMeta(), tenants=["a", "b"], row_group_rows=4)
    w.write(batch(10))
    w.write(batch(3, t0=10))
    assert not path.exists()  # nothing visible before close
    w.close(TraceMeta(tier_stats={"ssd": {"hit_ratio": 0.5}}))
    r = TraceReader(path)
    assert r.num_row_groups == 4
    assert [b.n for b in r.iter_batches()] == [4, 4, 2, 3]
    assert r.meta.tier_stats == {"ssd": {"hit_ratio": 0.5}}


def test_writer_leaves_the_callers_meta_alone(tmp_path):
    """A v1 trace's meta handed to the writer (sort, cut) is written as v2 but stays v1 for its caller, which
    may still describe the input with it."""
    meta = TraceMeta(format_version=1, created_by="")
    w = TraceWriter(tmp_path / "m.parquet", meta, tenants=["a", "b"])
    w.write(batch(3))
    w.close(meta)
    assert (meta.format_version, meta.created_by) == (1, "")
    r = TraceReader(tmp_path / "m.parquet")
    assert r.meta.format_version == 2
    assert r.meta.created_by.startswith("kvbed ")


def test_unsorted_write_is_refused_and_leaves_nothing(tmp_path):
    path = tmp_path / "u.parquet"
    with pytest.raises(KvbedError, match="not sorted"):
        with TraceWriter(path, TraceMeta(), tenants=["a", "b"]) as w:
            w.write(batch(5, t0=100))
            w.write(batch(5, t0=0))
    assert list(tmp_path.iterdir()) == []


def _raw(tmp_path, meta: dict, table: pa.Table | None = None, name="r.parquet"):
    table = table if table is not None else pa.Table.from_batches([], ARROW_SCHEMA)
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
    pq.write_table(table, tmp_path / name)
    return tmp_path / name


def test_tenant_code_without_a_name(tmp_path):
    with pytest.raises(KvbedError, match="tenant code 1 has no entry in the tenant table"):
        write_trace(tmp_path / "t.parquet", batch(), TraceMeta(), tenants=["only"])
    assert list(tmp_path.iterdir()) == []


def test_bad_files(tmp_path):
    good = write_trace(tmp_path / "g.parquet", batch(), TraceMeta(), tenants=["a", "b"])
    (tmp_path / "x.parquet").write_text("not parquet at all")
    with pytest.raises(KvbedError, match=r"x\.parquet: not a readable Parquet file"):
        TraceReader(tmp_path / "x.parquet")
    data = good.read_bytes()
    (tmp_path / "trunc.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(KvbedError, match=r"trunc\.parquet: not a readable Parquet file"):
        TraceReader(tmp_path / "trunc.parquet")
    meta = json.loads(TraceMeta().to_json())
    meta["format_version"] = 3
    with pytest.raises(KvbedError, match="trace format version 3; this kvbed reads version 1 or 2"):
        TraceReader(_raw(tmp_path, meta))
    pq.write_table(pa.table({"a": [1]}), tmp_path / "plain.parquet")
    with pytest.raises(KvbedError, match="no 'kvbed' file metadata"):
        TraceReader(tmp_path / "plain.parquet")


def test_unknown_enum_names_the_row(tmp_path):
    b = batch(6)
    cols = {}
    for name in ARROW_SCHEMA.names:
        typ = ARROW_SCHEMA.field(name).type
        if name == "op":
            vals = ["create"] * 4 + ["teleport", "create"]
            cols[name] = pa.array(vals).dictionary_encode().cast(pa.dictionary(pa.int8(), pa.string()))
        elif name in ("tier", "kind", "tenant", "scope"):
            s = {"tier": "gpu", "kind": "exact"}.get(name, "default")
            cols[name] = pa.array([s] * 6).dictionary_encode().cast(typ)
        else:
            cols[name] = pa.array(b[name], typ)
    path = _raw(tmp_path, json.loads(TraceMeta().to_json()), pa.table(cols, schema=ARROW_SCHEMA))
    with pytest.raises(KvbedError, match=r"row 4: unknown op 'teleport'"):
        TraceReader(path).read_all()


def _dict_col(values, dictionary, typ):
    idx = [None if v is None else dictionary.index(v) for v in values]
    return pa.DictionaryArray.from_arrays(pa.array(idx, typ.index_type), pa.array(dictionary, pa.string()))


def test_any_dictionary_order_decodes_to_the_same_codes(tmp_path):
    """Files from other writers: per row group, op and tenant dictionaries in another order than the
    code tables (or equal to them, where the reader skips the mapping) decode to the same values."""
    ops = ["create", "persist", "load", "delete", "create", "hit"]
    tenants = [["a", "b", "a", "b", "a", "b"], ["b", "c", "a", "c", "b", "a"], ["a", "b", "b", "a", "a", "b"]]
    op_dicts = [list(OPS), list(OPS)[::-1], list(OPS)]
    tenant_dicts = [["a", "b"], ["c", "a", "b"], ["a", "b"]]
    path = tmp_path / "d.parquet"
    meta = {META_KEY: TraceMeta().to_json().encode()}
    with pq.ParquetWriter(path, ARROW_SCHEMA.with_metadata(meta)) as w:
        for g in range(3):
            b = batch(6, t0=6 * g)
            cols = {n: pa.array(b[n], ARROW_SCHEMA.field(n).type) for n in ARROW_SCHEMA.names
                    if not pa.types.is_dictionary(ARROW_SCHEMA.field(n).type)}
            typ = {n: ARROW_SCHEMA.field(n).type for n in ("op", "tier", "kind", "tenant", "scope")}
            cols["op"] = _dict_col(ops, op_dicts[g], typ["op"])
            cols["tenant"] = _dict_col(tenants[g], tenant_dicts[g], typ["tenant"])
            for n, v in (("tier", "ssd"), ("kind", "exact"), ("scope", "default")):
                cols[n] = _dict_col([v] * 6, [v], typ[n])
            w.write_table(pa.table(cols, schema=ARROW_SCHEMA.with_metadata(meta)))
    r = TraceReader(path)
    got = list(r.iter_batches())
    assert [b.n for b in got] == [6, 6, 6]
    for g, b in enumerate(got):
        assert [OPS[c] for c in b["op"]] == ops
        assert [r.tenants[c] for c in b["tenant"]] == tenants[g]
        assert b["op"].dtype == np.int8 and b["op"].flags.writeable
        assert set(b["tier"].tolist()) == {TIERS.index("ssd")}
    assert r.tenants == ["a", "b", "c"]  # codes in order of first appearance


def test_null_enum_names_the_row(tmp_path):
    b = batch(6)
    cols = {n: pa.array(b[n], ARROW_SCHEMA.field(n).type) for n in ARROW_SCHEMA.names
            if not pa.types.is_dictionary(ARROW_SCHEMA.field(n).type)}
    for n, v in (("tier", "gpu"), ("kind", "exact"), ("tenant", "t"), ("scope", "t")):
        cols[n] = _dict_col([v] * 6, [v], ARROW_SCHEMA.field(n).type)
    cols["op"] = _dict_col(["create", "create", None, "create", "create", "create"], list(OPS),
                           ARROW_SCHEMA.field("op").type)
    nullable = pa.schema([pa.field(n, ARROW_SCHEMA.field(n).type) for n in ARROW_SCHEMA.names])
    path = _raw(tmp_path, json.loads(TraceMeta().to_json()), pa.table(cols, schema=nullable))
    with pytest.raises(KvbedError, match=r"row 2: op is null"):
        TraceReader(path).read_all()


@pytest.mark.parametrize("name", ["ts_ns", "nbytes", "obj_id"])
def test_null_number_names_the_row(tmp_path, name):
    """A null in a numeric column is refused like one in an enum column (not read as INT64_MIN)."""
    b = batch(6)
    cols = {n: pa.array(b[n], ARROW_SCHEMA.field(n).type) for n in ARROW_SCHEMA.names
            if not pa.types.is_dictionary(ARROW_SCHEMA.field(n).type)}
    for n, v in (("op", "create"), ("tier", "gpu"), ("kind", "exact"), ("tenant", "t"), ("scope", "t")):
        cols[n] = _dict_col([v] * 6, [v], ARROW_SCHEMA.field(n).type)
    vals = b[name].tolist()
    vals[3] = None
    cols[name] = pa.array(vals, ARROW_SCHEMA.field(name).type)
    nullable = pa.schema([pa.field(n, ARROW_SCHEMA.field(n).type) for n in ARROW_SCHEMA.names])
    path = _raw(tmp_path, json.loads(TraceMeta().to_json()), pa.table(cols, schema=nullable))
    with pytest.raises(KvbedError, match=rf"row 3: {name} is null"):
        TraceReader(path).read_all()


def test_enums_are_the_documented_ones():
    assert OPS == ("create", "commit", "persist", "load", "hit", "transform", "invalidate", "evict", "delete", "recover")
    assert TIERS == ("gpu", "cpu", "cxl", "ssd", "remote")
