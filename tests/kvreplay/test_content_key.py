"""Format v2's content key: what fills it (tier simulator, synth, capture), what reads a v1 trace without it,
and what ``trace validate`` checks of it - on hand-counted cases."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvreplay import schema as S
from kvreplay.capture.lifecycle import LifecycleMapper
from kvreplay.capture.wire import decode_batch
from kvreplay.requests import RequestTrace
from kvreplay.schema import KIND, OP, TIER, EventBatch, TraceMeta, TraceReader, make_batch, write_trace
from kvreplay.tiers import TierSimParams, simulate
from kvreplay.tiers.chunking import chunk_table
from kvreplay.tiers.sharing import salts
from kvreplay.validate import validate_trace
from testbed.study.spec import TraceSetting
from tests.support import capture_publisher as P
from tests.support.cli import kvbed, ok, one_line_error
from tests.support.tier_reference import OBJ, T, small_params
from tests.support.trace_versions import as_v1


def run(reqs: RequestTrace, params: TierSimParams) -> EventBatch:
    out: list[EventBatch] = []
    simulate(reqs, params, out.append, buffer_events=4096)
    return EventBatch.concat(out)


def prompts(blocks: list[list[int]], tenant: list[int], gap_ns: int = 10**9) -> RequestTrace:
    """One request per list of block ids (``T`` tokens each, so one object per block), ``gap_ns`` apart."""
    n = len(blocks)
    off = np.concatenate([[0], np.cumsum([len(b) for b in blocks])])
    return RequestTrace(arrival_ns=np.arange(n) * gap_ns, input_tokens=np.array([len(b) * T for b in blocks]),
                        output_tokens=np.ones(n, int), block_offsets=off,
                        block_ids=np.array([i for b in blocks for i in b]), block_tokens=T,
                        tenant=np.array(tenant), tenants=["a", "b"][: max(tenant) + 1])


def keys_by_object(b: EventBatch) -> dict[int, int]:
    """obj_id -> its one content key (asserting it is the same on every event of the object)."""
    out: dict[int, int] = {}
    for o, k in zip(b["obj_id"].tolist(), b["content_key"].tolist()):
        assert out.setdefault(o, k) == k, f"object {o} changes key"
    return out


# ------------------------------------------------------------------------------------- tier simulator


def test_two_tenants_identical_prefix_share_a_key_only_under_global():
    """Tenants a and b send the same two-block prompt. Under ``global`` b hits a's two objects: 2 objects,
    2 keys. Under ``tenant`` b makes its own: 4 objects, 4 keys, none shared."""
    reqs = prompts([[1, 2], [1, 2]], tenant=[0, 1])
    g = run(reqs, small_params(share="global"))
    kg = keys_by_object(g)
    assert sorted(kg) == [1, 2] and len(set(kg.values())) == 2 and 0 not in kg.values()
    hits = g["op"] == OP["hit"]
    assert int(hits.sum()) == 2 and set(g["content_key"][hits].tolist()) == set(kg.values())
    t = run(reqs, small_params(share="tenant"))
    kt = keys_by_object(t)
    assert sorted(kt) == [1, 2, 3, 4] and len(set(kt.values())) == 4
    assert int((t["op"] == OP["hit"]).sum()) == 0
    # the key is the chunk's prefix-chain hash in its domain: under global a's and b's chunks are one hash
    *_, key_hash = chunk_table(reqs.block_offsets, reqs.block_ids, reqs.input_tokens, reqs.scope, T, T,
                               salt=salts(reqs, "global"))
    assert sorted(kg.values()) == sorted(key_hash.tolist())
    *_, key_hash_t = chunk_table(reqs.block_offsets, reqs.block_ids, reqs.input_tokens, reqs.scope, T, T,
                                 salt=salts(reqs, "tenant"))
    assert sorted(kt.values()) == sorted(key_hash_t.tolist())
    # the first chunk of a prompt is not the second: a key names the whole prefix, not the block
    assert kg[1] != kg[2]


def test_evicted_and_recomputed_chunk_gets_a_new_id_and_the_same_key():
    """A GPU of one object and no lower tier: [A] makes object 1, [B] evicts it for object 2 (delete: its
    last copy), [A] again recomputes it as object 3: 3 objects, 2 keys, objects 1 and 3 share one."""
    reqs = prompts([[1], [2], [1]], tenant=[0, 0, 0])
    b = run(reqs, small_params(gpu_bytes=OBJ, cpu_bytes=0, ssd_bytes=0))
    k = keys_by_object(b)
    assert sorted(k) == [1, 2, 3]
    assert k[1] == k[3] != k[2]
    deletes = b["obj_id"][b["op"] == OP["delete"]].tolist()
    assert deletes[:2] == [1, 2]


def test_derived_copies_keep_their_source_key_with_their_kind():
    """SSD copies quantized: the transform's object (kind quantized, parent = the exact object) carries its
    parent's key; every object of the trace has a key, one per object."""
    reqs = prompts([[1, 2], [3]], tenant=[0, 0])
    b = run(reqs, small_params(ssd_kind="quantized"))
    k = keys_by_object(b)
    tr = np.flatnonzero(b["op"] == OP["transform"])
    assert len(tr) == 3  # one quantized copy per exact chunk written to the SSD
    for i in tr:
        assert b["kind"][i] == KIND["quantized"]
        assert k[int(b["obj_id"][i])] == k[int(b["parent_id"][i])]
    assert len(set(k.values())) == 3 and len(k) == 6


def test_synth_trace_keys_are_its_distinct_chunks_and_validate(tmp_path):
    """A synthetic trace: every object has a nonzero key; the distinct keys are the simulator's distinct
    chunks; objects outnumber keys (recomputed chunks and derived copies share them); and it validates."""
    out = tmp_path / "s.parquet"
    ok(kvbed("trace", "synth", "-o", out, "--duration-s", 60))
    b, r = S.read_trace(out)
    assert r.meta.format_version == 2 and r.has_content_key
    k = keys_by_object(b)
    assert 0 not in k.values()
    assert len(set(k.values())) == r.meta.extra["tier_sim_counters"]["distinct_chunks"] < len(k)
    rep = validate_trace(out)
    assert rep.ok and rep.content_keys


# ------------------------------------------------------------------------------------------- capture


def test_capture_key_is_the_block_hash_across_a_remove_and_store():
    """Store hash H (above 2**63) and G in GPU, remove H, store H again: 3 objects, keys H, G, H."""
    big = 2**64 - 5
    m = LifecycleMapper(bytes_per_token=1024, tokens_per_block=16)
    for ts, ev in ((1.0, P.stored([big, 7])), (2.0, P.removed([big])), (3.0, P.stored([big]))):
        m.feed("i0", decode_batch(P.batch(ts, [ev])))
    b = m.take()
    assert keys_by_object(b) == {1: big, 2: 7, 3: big}
    assert b["content_key"].dtype == np.uint64


# --------------------------------------------------------------------------------------------- v1 read


@pytest.fixture(scope="module")
def small_pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("v1")
    ok(kvbed("trace", "synth", "-o", d / "v2.parquet", "--duration-s", 30))
    as_v1(d / "v2.parquet", d / "v1.parquet")
    return d


def test_a_v1_trace_reads_with_no_keys_and_says_so(small_pair):
    r1, r2 = TraceReader(small_pair / "v1.parquet"), TraceReader(small_pair / "v2.parquet")
    assert (r1.has_content_key, r2.has_content_key) == (False, True)
    b1, b2 = r1.read_all(), r2.read_all()
    assert not b1["content_key"].any() and b2["content_key"].all()
    for name in S.COLUMN_NAMES:
        if name != "content_key":
            assert np.array_equal(b1[name], b2[name]), name
    only = r1.read_all(["content_key"])  # the absent column alone
    assert len(only["content_key"]) == r1.num_rows
    rep = validate_trace(small_pair / "v1.parquet")
    assert rep.ok and not rep.content_keys
    res = kvbed("trace", "validate", small_pair / "v1.parquet")
    assert res.exit_code == 0 and "format v1 trace has no content keys" in res.output
    stats = json.loads(ok(kvbed("trace", "stats", small_pair / "v1.parquet", "--json")).output)
    assert stats["meta"]["content_keys"] is False and stats["meta"]["format_version"] == 1


def test_a_v1_trace_replays_to_the_same_figures(small_pair, tmp_path):
    """The same events with and without keys replay to the same result, the trace's format version apart."""
    docs = {}
    for v in ("v1", "v2"):
        ok(kvbed("replay", small_pair / f"{v}.parquet", "--device", "fdp", "--hints", "oracle", "-o", tmp_path / v,
                 "-q"))
        docs[v] = json.loads((tmp_path / v / "result.json").read_text())
    assert docs["v1"]["trace"].pop("format_version") == 1 and docs["v2"]["trace"].pop("format_version") == 2
    for d in docs.values():
        d["trace"].pop("path", None)
        d["trace"].pop("fingerprint", None)
        d.pop("sim", None)
    j1, j2 = docs["v1"]["jobs"][0], docs["v2"]["jobs"][0]
    assert j1["waf"] == j2["waf"] and j1["object_write"] == j2["object_write"] and j1["gc"] == j2["gc"]


def test_rewriting_a_v1_trace_writes_v2_with_zero_keys(small_pair, tmp_path):
    ok(kvbed("trace", "sort", small_pair / "v1.parquet", "-o", tmp_path / "s.parquet"))
    r = TraceReader(tmp_path / "s.parquet")
    assert r.meta.format_version == 2 and r.has_content_key
    assert not r.read_all(["content_key"])["content_key"].any()


# ---------------------------------------------------------------------------------------- validation


def hand(rows: list[tuple]) -> EventBatch:
    """(op, obj, tier, key[, kind[, scope[, parent]]]) rows one ns apart, 1 MiB each."""
    n = len(rows)
    return make_batch(ts_ns=np.arange(n), op=[r[0] for r in rows], obj_id=[r[1] for r in rows],
                      parent_id=[r[6] if len(r) > 6 else 0 for r in rows],
                      tier=[r[2] for r in rows], nbytes=np.full(n, 1 << 20),
                      content_key=np.array([r[3] for r in rows], np.uint64),
                      kind=[r[4] if len(r) > 4 else "exact" for r in rows],
                      scope=[r[5] if len(r) > 5 else 0 for r in rows])


def test_validate_finds_a_key_that_changes(tmp_path):
    p = write_trace(tmp_path / "t.parquet", hand([
        ("create", 1, "gpu", 9), ("commit", 1, "gpu", 9), ("persist", 1, "ssd", 9),
        ("evict", 1, "gpu", 8),  # row 3: object 1's key was 9
    ]), TraceMeta())
    rep = validate_trace(p)
    assert rep.counts == {"key_changed": 1} and [v.row for v in rep.first] == [3]


def test_validate_finds_two_live_objects_with_one_key_in_one_place(tmp_path):
    """Object 2 (key 5) commits in GPU while object 1 (key 5) is live there: row 3. Allowed: the same key live
    in another tier (row 5), in another scope (rows 6-7), as another kind (rows 8-10, a quantized copy), and
    after the first copy ended (rows 11-14)."""
    rows = [
        ("create", 1, "gpu", 5), ("commit", 1, "gpu", 5),
        ("create", 2, "gpu", 5), ("commit", 2, "gpu", 5),  # 3: violation
        ("create", 3, "cpu", 5), ("commit", 3, "cpu", 5),  # 5: another tier
        ("create", 4, "gpu", 5, "exact", 1), ("commit", 4, "gpu", 5, "exact", 1),  # 7: another scope
        ("transform", 5, "gpu", 5, "quantized", 0, 1), ("persist", 5, "ssd", 5, "quantized"),
        ("persist", 1, "ssd", 5),  # 10: exact beside quantized in ssd: another kind
        ("delete", 3, "cpu", 5), ("create", 6, "cpu", 5), ("commit", 6, "cpu", 5),  # 13: after 3 ended
        ("persist", 6, "ssd", 5),  # 14: object 1 (exact, key 5) is live in ssd
    ]
    p = write_trace(tmp_path / "t.parquet", hand(rows), TraceMeta(), scopes=["s0", "s1"])
    rep = validate_trace(p)
    assert rep.counts == {"key_live_twice": 2}, rep.counts
    assert [v.row for v in rep.first] == [3, 14]


def test_validate_cli_on_a_key_violation_and_a_bad_key_column(tmp_path):
    p = write_trace(tmp_path / "t.parquet", hand([("create", 1, "gpu", 9), ("commit", 1, "gpu", 8)]), TraceMeta())
    res = kvbed("trace", "validate", p)
    assert res.exit_code == 1 and "content_key differs" in res.output
    table = pq.read_table(p)
    i = table.schema.get_field_index("content_key")
    bad = table.set_column(i, pa.field("content_key", pa.string()), pa.array(["x", "y"]))
    pq.write_table(bad, tmp_path / "bad.parquet")
    one_line_error(kvbed("trace", "validate", tmp_path / "bad.parquet"), "bad.parquet",
                   "column 'content_key' has type string, expected uint64")


# -------------------------------------------------------------------------------------------- studies


def test_study_trace_hash_includes_the_format_version(monkeypatch):
    from testbed.study import spec

    t = TraceSetting(kind="synth", synth={"seed": 1})
    before = t.hash()
    monkeypatch.setattr(spec, "FORMAT_VERSION", spec.FORMAT_VERSION + 1)
    assert t.hash() != before
    assert t.key()["trace_format_version"] == spec.FORMAT_VERSION


# ------------------------------------------------------------------------------------------ importers


def test_mooncake_import_keys_follow_the_hash_id_chain(tmp_path):
    """Two requests of 1024 tokens (two 512-token hash ids each, objects of 512 tokens): [1, 2] then [1, 3]. The
    second reuses the first chunk (one object, one key) and makes its own second chunk: 3 objects, 3 keys,
    and the two second chunks differ in key though both follow hash id 1."""
    src = tmp_path / "mc.jsonl"
    src.write_text("\n".join(json.dumps({"timestamp": ts, "input_length": 1024, "output_length": 1, "hash_ids": ids})
                             for ts, ids in ((0, [1, 2]), (1000, [1, 3]))) + "\n")
    out = tmp_path / "mc.parquet"
    ok(kvbed("trace", "import", "mooncake", src, "-o", out, "--param", "tokens_per_object=512"))
    b, r = S.read_trace(out)
    k = keys_by_object(b)
    assert r.meta.format_version == 2 and sorted(k) == [1, 2, 3] and len(set(k.values())) == 3
    first = b["obj_id"][(b["op"] == OP["hit"]) | (b["op"] == OP["load"])].tolist()
    assert first == [1]
    assert validate_trace(out).ok


def test_row_checks_with_keys_stop_at_the_first_key_violation_and_refuse_v1(tmp_path, small_pair):
    from kvbed.core.errors import KvbedError
    from kvreplay.validate import RowCheck

    p = write_trace(tmp_path / "t.parquet", hand([
        ("create", 1, "gpu", 5), ("commit", 1, "gpu", 5), ("create", 2, "gpu", 5), ("commit", 2, "gpu", 5),
    ]), TraceMeta())
    r = TraceReader(p)
    plain = RowCheck(r)  # the replay's checks: keys not read
    for b in r.iter_batches(plain.columns):
        plain.feed(b)
    keyed = RowCheck(r, key=True, kind=False)
    assert set(keyed.columns) >= {"scope", "content_key", "kind"}
    with pytest.raises(KvbedError, match=r"row 3: a copy begins where another live object has the same content_key"):
        for b in r.iter_batches(keyed.columns):
            keyed.feed(b)
    with pytest.raises(KvbedError, match=r"v1\.parquet: a format v1 trace has no content keys; a run keyed by "
                                         r"content needs them"):
        RowCheck(TraceReader(small_pair / "v1.parquet"), key=True)
