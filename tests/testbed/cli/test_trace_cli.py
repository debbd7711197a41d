"""`kvbed trace ...` through the CLI: the happy path and every bad-input case (one line, exit 2,
no output file left behind)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import kvbed, one_line_error
from tests.support.mooncake import MC_OK, MOONCAKE, needs_mooncake, write_lines


def test_synth_validate_stats(tmp_path):
    out = tmp_path / "sample.parquet"
    res = kvbed("trace", "synth", "-o", out, "--duration-s", 300, "--json")
    assert res.exit_code == 0, res.output + res.stderr
    summary = json.loads(res.stdout)
    assert summary["events"] > 10_000 and out.exists()
    assert summary["geometry"]["object_bytes"] == 256 * 131072
    res = kvbed("trace", "validate", out)
    assert res.exit_code == 0 and "valid" in res.stdout
    res = kvbed("trace", "stats", out, "--json")
    assert res.exit_code == 0
    s = json.loads(res.stdout)
    assert s["rows"] == summary["events"]
    assert s["meta"]["generator"]["synth"]["duration_s"] == 300.0
    assert s["meta"]["generator"]["tier_sim"]["ssd_bytes"] == 128 << 30
    assert {t["name"] for t in s["tenants"]} == {"chat", "rag", "agent", "batch"}
    res = kvbed("trace", "stats", out)  # the rich tables
    assert res.exit_code == 0
    for title in ("tier simulation", "events per op and tier", "lifetimes", "reuse", "per tenant", "per kind"):
        assert title in res.stdout


def test_synth_is_reproducible_and_options_apply(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    for p in (a, b):
        res = kvbed("trace", "synth", "-o", p, "--duration-s", 120, "--seed", 3, "--ssd-bytes", "64GiB",
                    "--policy", "ssd=s3fifo", "--param", "rag_corpus_docs=100", "--json")
        assert res.exit_code == 0, res.stderr
    import pyarrow.parquet as pq

    assert pq.read_table(a).equals(pq.read_table(b))
    s = json.loads(kvbed("trace", "stats", a, "--json").stdout)
    ts = s["meta"]["generator"]["tier_sim"]
    assert (ts["ssd_bytes"], ts["ssd_policy"], ts["gpu_policy"]) == (64 << 30, "s3fifo", "lru")
    assert s["meta"]["generator"]["synth"]["rag_corpus_docs"] == 100


def test_import_small_mooncake(tmp_path):
    src = write_lines(tmp_path / "m.jsonl", MC_OK)
    out = tmp_path / "m.parquet"
    res = kvbed("trace", "import", "mooncake", src, "-o", out, "--gpu-bytes", "1GiB", "--cpu-bytes", 0,
                "--ssd-bytes", "1GiB", "--json")
    assert res.exit_code == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["source_facts"]["requests"] == 2
    assert kvbed("trace", "validate", out).exit_code == 0


@needs_mooncake
def test_import_mooncake_prints_facts(tmp_path):
    out = tmp_path / "mc.parquet"
    res = kvbed("trace", "import", "mooncake", MOONCAKE, "-o", out)
    assert res.exit_code == 0, res.stderr
    for fact in ("12,031", "182,790", "288,500", "36.6%"):
        assert fact in res.stdout
    s = json.loads(kvbed("trace", "stats", out, "--json").stdout)
    assert s["meta"]["source_facts"]["distinct_block_ids"] == 182_790
    assert s["meta"]["source"]["sha256"].startswith("b8cbb061")
    ssd = s["meta"]["tier_stats"]["ssd"]
    assert ssd["deletes"] + ssd["evictions"] > 100_000  # the default SSD tier is under pressure
    assert kvbed("trace", "validate", out).exit_code == 0


BAD_LINES = [
    ('{"timestamp": 1, "input_length": 5', "line 2: malformed JSON"),
    ('{"timestamp": 1, "input_length": 5, "output_length": 1}', "line 2: Object missing required field `hash_ids`"),
    ('{"timestamp": 1, "input_length": "5", "output_length": 1, "hash_ids": [1]}',
     "line 2: Expected `int`, got `str` - at `$.input_length`"),
    ('{"timestamp": -5, "input_length": 5, "output_length": 1, "hash_ids": [1]}', "line 2: timestamp"),
    ('{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [18446744073709551615]}',
     "line 2: Expected `int` <= 9223372036854775807 - at `$.hash_ids[0]`"),
]


@pytest.mark.parametrize("line, message", BAD_LINES)
def test_import_bad_lines(tmp_path, line, message):
    src = tmp_path / "bad.jsonl"
    src.write_text(json.dumps(MC_OK[1]) + "\n" + line + "\n")
    out = tmp_path / "out.parquet"
    one_line_error(kvbed("trace", "import", "mooncake", src, "-o", out), str(src), message)
    assert list(tmp_path.iterdir()) == [src]


@pytest.mark.parametrize("fmt", ["mooncake", "alibaba"])
def test_import_inconsistent_block_lists(tmp_path, fmt):
    """A line whose hash_ids cannot cover its input_length: refused naming the file and line (before: imported
    silently); with --drop-inconsistent dropped and counted in the printed and stored source facts."""
    from kvreplay.schema import TraceReader

    if fmt == "mooncake":
        rows = [MC_OK[0], {"timestamp": 2, "input_length": 7322, "output_length": 10, "hash_ids": [1, 2]}, MC_OK[1]]
        fragment = "line 2: 2 hash_ids for input_length 7322, expected 15"
    else:
        rows = [{"chat_id": c, "parent_chat_id": -1, "timestamp": float(c), "input_length": n, "output_length": 5,
                 "type": "text", "turn": 1, "hash_ids": ids} for c, n, ids in ((1, 40, [1, 2, 3]), (2, 40, [1, 2]),
                                                                                    (3, 20, [1, 4]))]
        fragment = "line 2: 2 hash_ids for input_length 40, expected 3"
    src = write_lines(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.parquet"
    one_line_error(kvbed("trace", "import", fmt, src, "-o", out), str(src), fragment, "--drop-inconsistent")
    assert list(tmp_path.iterdir()) == [src]
    res = kvbed("trace", "import", fmt, src, "-o", out, "--drop-inconsistent")
    assert res.exit_code == 0, res.output + res.stderr
    assert "lines dropped too few hash ids" in res.stdout
    facts = TraceReader(out).meta.source_facts
    assert (facts["requests"], facts["lines_dropped_too_few_hash_ids"], facts["lines_dropped_too_many_hash_ids"]) \
        == (2, 1, 0)
    assert TraceReader(out).meta.generator["drop_inconsistent"] is True
    assert kvbed("trace", "validate", out).exit_code == 0


def test_import_non_monotonic_time(tmp_path):
    src = write_lines(tmp_path / "bad.jsonl", [MC_OK[1], MC_OK[0]])
    out = tmp_path / "out.parquet"
    one_line_error(kvbed("trace", "import", "mooncake", src, "-o", out), str(src),
                          "line 2: timestamp goes backwards")
    assert list(tmp_path.iterdir()) == [src]  # no output, no temporary file either


def test_unwritable_output(tmp_path):
    """-o below a regular file, or a name the file system refuses: one line, exit 2, nothing left."""
    src = write_lines(tmp_path / "m.jsonl", MC_OK)
    (tmp_path / "plain").write_text("x")
    one_line_error(kvbed("trace", "import", "mooncake", src, "-o", tmp_path / "plain" / "o.parquet"),
                   "o.parquet: cannot create the output directory")
    long = tmp_path / ("x" * 300 + ".parquet")  # longer than NAME_MAX (255)
    one_line_error(kvbed("trace", "synth", "-o", long, "--duration-s", 10), "cannot write the output")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl", "plain"]


def test_bad_options(tmp_path):
    src = write_lines(tmp_path / "m.jsonl", MC_OK)
    out = tmp_path / "o.parquet"
    one_line_error(kvbed("trace", "import", "mooncake", src, "-o", out, "--policy", "arc"),
                          "gpu_policy: expected one of clock, fifo, lru, s3fifo, got 'arc'")
    one_line_error(kvbed("trace", "import", "mooncake", src, "-o", out, "--ssd-bytes", "lots"),
                          "ssd_bytes: expected a number")
    one_line_error(kvbed("trace", "synth", "-o", out, "--param", "nonsense=1"), "unknown parameter 'nonsense'")
    one_line_error(kvbed("trace", "import", "mooncake", src, "-o", out, "--model", "gpt-9"),
                   "model: expected one of llama-3-8b,", "got 'gpt-9'")
    assert not out.exists()


def _write_bad_trace(tmp_path, what: str) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kvreplay.schema import ARROW_SCHEMA, META_KEY, TraceMeta

    good = tmp_path / "good.parquet"
    assert kvbed("trace", "synth", "-o", good, "--duration-s", 30, "--json").exit_code == 0
    bad = tmp_path / f"{what}.parquet"
    if what == "truncated":
        data = good.read_bytes()
        bad.write_bytes(data[: len(data) // 3])
    elif what == "not_parquet":
        bad.write_text("ts_ns,op\n1,create\n")
    else:
        table = pq.read_table(good)
        meta = json.loads(table.schema.metadata[META_KEY])
        if what == "version":
            meta["format_version"] = 99
        if what == "enum":
            ops = table.column("op").to_pylist()
            ops[7] = "teleport"
            arr = pa.array(ops).dictionary_encode().cast(ARROW_SCHEMA.field("op").type)
            table = table.set_column(table.schema.get_field_index("op"), "op", arr)
        pq.write_table(table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()}), bad)
    return bad


@pytest.mark.parametrize("what, message", [
    ("truncated", "not a readable Parquet file"),
    ("not_parquet", "not a readable Parquet file"),
    ("version", "trace format version 99; this kvbed reads version 1"),
    ("enum", "row 7: unknown op 'teleport'"),
])
@pytest.mark.parametrize("command", ["validate", "stats"])
def test_bad_trace_files(tmp_path, what, message, command):
    bad = _write_bad_trace(tmp_path, what)
    one_line_error(kvbed("trace", command, bad), str(bad), message)


def test_validate_reports_violations_with_rows(tmp_path):
    import numpy as np
    import pyarrow.parquet as pq

    from kvreplay.schema import META_KEY, TraceMeta, TraceWriter, make_batch

    b = make_batch(ts_ns=np.array([0, 1, 2, 3]), op=np.array(["create", "commit", "load", "delete"]),
                   obj_id=np.array([1, 1, 1, 1], np.uint64), tier=np.array(["gpu", "gpu", "ssd", "gpu"]),
                   nbytes=np.full(4, 10), ntokens=np.full(4, 1))
    path = tmp_path / "v.parquet"
    meta = TraceMeta()
    meta.created_by = "test"
    pq.write_table(TraceWriter(path, meta)._to_table(b).replace_schema_metadata({META_KEY: meta.to_json().encode()}), path)
    res = kvbed("trace", "validate", path, "--json")
    assert res.exit_code == 1
    rep = json.loads(res.stdout)
    assert rep["violations"] == {"not_present": 1}
    assert rep["first_violations"][0]["row"] == 2
    res = kvbed("trace", "validate", path)
    assert res.exit_code == 1 and "never persisted" in res.stdout


def test_models_and_help():
    res = kvbed("trace", "models")
    assert res.exit_code == 0 and "llama-3-8b" in res.stdout and "131,072" in res.stdout
    res = kvbed("trace", "import", "--help")
    assert res.exit_code == 0 and "--ssd-bytes" in res.stdout and "--write-policy" in res.stdout
    res = kvbed("trace", "synth", "--help")
    assert "rag_corpus_docs" in res.stdout
