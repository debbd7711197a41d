"""Importers: the Mooncake facts from the trace's README, Alibaba sessions/tenants, bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvreplay.importers import IMPORTERS
from kvbed.core.errors import KvbedError

from tests.support.mooncake import MC_OK, MOONCAKE, needs_mooncake, write_lines


@needs_mooncake
def test_mooncake_reproduces_readme_facts():
    tr = IMPORTERS.get("mooncake")().read_requests(MOONCAKE)
    f = tr.facts()
    # the README of ../shared/data/traces/mooncake lists exactly these
    assert f["requests"] == 12_031
    assert f["distinct_block_ids"] == 182_790
    assert f["block_references"] == 288_500
    assert round(100 * f["references_to_seen_id_share"], 1) == 36.6
    assert round(f["time_span_s"], 1) == 3537.0
    assert tr.source["sha256"] == "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df"
    # len(hash_ids) == ceil(input_length / 512) on every line (README)
    assert np.array_equal(np.diff(tr.block_offsets), (tr.input_tokens + 511) // 512)


def test_mooncake_small_file(tmp_path):
    tr = IMPORTERS.get("mooncake")().read_requests(write_lines(tmp_path / "m.jsonl", MC_OK))
    assert tr.arrival_ns.tolist() == [0, 5_000_000]
    assert tr.block_ids.tolist() == [1, 2, 1, 3]
    f = tr.facts()
    assert (f["distinct_block_ids"], f["block_references"], f["references_to_seen_id"]) == (3, 4, 1)


@pytest.mark.parametrize(
    "bad, message",
    [
        ('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]', "line 2: malformed JSON"),
        ({"timestamp": 0, "input_length": 10, "output_length": 1}, "line 2: Object missing required field `hash_ids`"),
        ({"timestamp": "0", "input_length": 10, "output_length": 1, "hash_ids": [1]}, "line 2: Expected `float`, got `str`"),
        ({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": ["a"]}, "line 2: Expected `int`, got `str`"),
        ({"timestamp": 0, "input_length": -1, "output_length": 1, "hash_ids": []}, "line 2: input_length must be >= 0"),
        ({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1, 2]},
         "line 2: 2 hash_ids for input_length 10, expected 1 (one per 512 tokens"),
        # JSON integers have no size limit; the columns are int64
        ({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [2**64 - 1]},
         "line 2: Expected `int` <= 9223372036854775807 - at `$.hash_ids[0]`"),
        ({"timestamp": 0, "input_length": 10**20, "output_length": 1, "hash_ids": [1]},
         "line 2: Expected `int` <= 9223372036854775807 - at `$.input_length`"),
    ],
)
def test_mooncake_bad_lines(tmp_path, bad, message):
    path = write_lines(tmp_path / "m.jsonl", [MC_OK[0], bad])
    with pytest.raises(KvbedError) as exc:
        IMPORTERS.get("mooncake")().read_requests(path)
    assert message in str(exc.value)
    assert str(path) in str(exc.value)
    assert "\n" not in str(exc.value)


# ------------------------------------------------------------------ block lists that do not match the input


def test_mooncake_line_whose_ids_cannot_cover_its_input_is_refused(tmp_path):
    """2 ids of 512 tokens cannot hold 7,322 input tokens (15 are needed): before, the tokens past the 2nd id
    were silently treated as not cacheable."""
    short = {"timestamp": 6, "input_length": 7322, "output_length": 10, "hash_ids": [1, 2]}
    path = write_lines(tmp_path / "m.jsonl", [*MC_OK, short])
    with pytest.raises(KvbedError) as exc:
        IMPORTERS.get("mooncake")().read_requests(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: line 3: 2 hash_ids for input_length 7322, expected 15") and "too few" in msg
    assert "--drop-inconsistent" in msg and "\n" not in msg


@pytest.mark.parametrize("ids,inp,ok", [
    ([1, 2], 32, True),  # exactly two full blocks
    ([1, 2], 17, True),  # the last block padded (1 real token)
    ([1, 2], 33, False),  # 33 tokens need a 3rd block
    ([1, 2], 16, False),  # one id more than the input has
    ([], 0, True),
])
def test_alibaba_ids_per_16_tokens_last_padded(tmp_path, ids, inp, ok):
    rows = [ali(1, -1, 0.0, 1, "text", [9]), ali(2, -1, 1.0, 1, "text", ids, inp=inp)]
    if inp == 0:
        rows[1]["input_length"] = 0
    path = write_lines(tmp_path / "a.jsonl", rows)
    if ok:
        assert IMPORTERS.get("alibaba")().read_requests(path).n == 2
    else:
        with pytest.raises(KvbedError, match=rf"a.jsonl: line 2: 2 hash_ids for input_length {inp}, expected "):
            IMPORTERS.get("alibaba")().read_requests(path)


def test_inconsistent_lines_are_dropped_and_counted_when_asked(tmp_path):
    rows = [MC_OK[0],
            {"timestamp": 1, "input_length": 7322, "output_length": 10, "hash_ids": [1, 2]},  # too few
            {"timestamp": 2, "input_length": 100, "output_length": 10, "hash_ids": [1, 4]},  # too many
            MC_OK[1]]
    tr = IMPORTERS.get("mooncake")(drop_inconsistent=True).read_requests(write_lines(tmp_path / "m.jsonl", rows))
    assert tr.arrival_ns.tolist() == [0, 5_000_000] and tr.block_ids.tolist() == [1, 2, 1, 3]
    assert tr.input_tokens.tolist() == [1000, 600] and tr.block_offsets.tolist() == [0, 2, 4]
    f = tr.facts()
    assert (f["requests"], f["lines_dropped_too_few_hash_ids"], f["lines_dropped_too_many_hash_ids"]) == (2, 1, 1)
    # nothing dropped, but asked: the counts are there (0); not asked: no such facts
    assert IMPORTERS.get("mooncake")(drop_inconsistent=True).read_requests(
        write_lines(tmp_path / "ok.jsonl", MC_OK)).facts()["lines_dropped_too_few_hash_ids"] == 0
    assert "lines_dropped_too_few_hash_ids" not in IMPORTERS.get("mooncake")().read_requests(tmp_path / "ok.jsonl").facts()
    # Alibaba: the dropped chat's child keeps its session (a parent missing from the file is its own root)
    ali_rows = [ali(1, -1, 0.0, 1, "text", [9]), ali(2, 1, 1.0, 2, "text", [9], inp=40), ali(3, 2, 2.0, 3, "text", [9, 8])]
    tr = IMPORTERS.get("alibaba")(drop_inconsistent=True).read_requests(write_lines(tmp_path / "a.jsonl", ali_rows))
    assert tr.session_id.tolist() == [1, 2] and tr.turn.tolist() == [1, 3]
    assert tr.facts()["lines_dropped_too_few_hash_ids"] == 1
    only_bad = write_lines(tmp_path / "bad.jsonl", [rows[1]])
    with pytest.raises(KvbedError, match="nothing left to import"):
        IMPORTERS.get("mooncake")(drop_inconsistent=True).read_requests(only_bad)


def test_mooncake_time_goes_backwards(tmp_path):
    path = write_lines(tmp_path / "m.jsonl", [MC_OK[1], MC_OK[0]])
    with pytest.raises(KvbedError, match="line 2: timestamp goes backwards"):
        IMPORTERS.get("mooncake")().read_requests(path)


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(KvbedError, match="no such file"):
        IMPORTERS.get("mooncake")().read_requests(tmp_path / "nope.jsonl")
    (tmp_path / "e.jsonl").write_text("\n\n")
    with pytest.raises(KvbedError, match="no records"):
        IMPORTERS.get("mooncake")().read_requests(tmp_path / "e.jsonl")


def ali(chat, parent, ts, turn, typ, ids, inp=None):
    return {"chat_id": chat, "parent_chat_id": parent, "timestamp": ts, "input_length": inp or 16 * len(ids),
            "output_length": 5, "type": typ, "turn": turn, "hash_ids": ids}


def test_alibaba_sessions_and_tenants(tmp_path):
    rows = [
        ali(10, -1, 100.0, 1, "text", [1, 2, 3]),
        ali(11, -1, 100.5, 1, "search", [7]),
        ali(12, 10, 101.0, 2, "text", [1, 2, 3, 4]),
        ali(13, 12, 102.25, 3, "text", [1, 2, 3, 4, 5]),
        ali(14, 99, 103.0, 2, "file", [8]),  # parent not in the file: its own session root
        ali(15, 99, 104.0, 3, "file", [8, 9], inp=20),  # last block padded
    ]
    tr = IMPORTERS.get("alibaba")().read_requests(write_lines(tmp_path / "a.jsonl", rows))
    assert tr.block_tokens == 16
    assert tr.arrival_ns.tolist() == [0, 500_000_000, 1_000_000_000, 2_250_000_000, 3_000_000_000, 4_000_000_000]
    assert tr.session_id.tolist() == [10, 11, 10, 10, 99, 99]
    assert tr.turn.tolist() == [1, 1, 2, 3, 2, 3]
    assert tr.tenants == ["file", "search", "text"]
    assert [tr.tenants[t] for t in tr.tenant] == ["text", "search", "text", "text", "file", "file"]
    assert tr.facts()["sessions"] == 3


def test_alibaba_bad_type(tmp_path):
    rows = [ali(1, -1, 0.0, 1, "text", [1]), {**ali(2, -1, 1.0, 1, "text", [2]), "turn": "x"}]
    with pytest.raises(KvbedError, match="line 2: Expected `int`, got `str` - at `\\$.turn`"):
        IMPORTERS.get("alibaba")().read_requests(write_lines(tmp_path / "a.jsonl", rows))


def test_alibaba_id_beyond_int64(tmp_path):
    rows = [ali(1, -1, 0.0, 1, "text", [1]), ali(2**63, -1, 1.0, 1, "text", [2])]
    with pytest.raises(KvbedError, match=r"line 2: Expected `int` <= 9223372036854775807 - at `\$.chat_id`"):
        IMPORTERS.get("alibaba")().read_requests(write_lines(tmp_path / "a.jsonl", rows))


def test_registry():
    assert {"mooncake", "alibaba"} <= set(IMPORTERS.names())
    with pytest.raises(KvbedError, match="unknown importer 'vllm'"):
        IMPORTERS.get("vllm")


def test_event_level_importer_plugs_in(tmp_path, monkeypatch):
    """An engine-event importer (vLLM/SGLang later) only registers and writes batches."""
    from click.testing import CliRunner

    from kvreplay.importers.base import Importer
    from kvreplay.schema import TraceMeta, TraceReader, make_batch
    from testbed.cli import cli

    class Fake(Importer):
        name = "fake-events"
        level = "event"

        def write_events(self, path, writer):
            writer.set_string_tables(["default", "t1"], ["default"])
            n = int(Path(path).read_text())
            writer.write(make_batch(ts_ns=np.arange(n), op=np.array(["create"] * n),
                                    obj_id=np.arange(1, n + 1, dtype=np.uint64), tier=np.array(["gpu"] * n),
                                    nbytes=np.full(n, 16), tenant=np.ones(n, int)))
            return TraceMeta(source={"importer": self.name}, source_facts={"events": n})

    monkeypatch.setitem(IMPORTERS._items, "fake-events", Fake)
    src = tmp_path / "ev.txt"
    src.write_text("5")
    from testbed.cli import trace_cmd

    monkeypatch.setattr(trace_cmd.import_cmd.params[0], "type", __import__("click").Choice(IMPORTERS.names()))
    res = CliRunner().invoke(cli, ["trace", "import", "fake-events", str(src), "-o", str(tmp_path / "o.parquet")])
    assert res.exit_code == 0, res.output + res.stderr
    r = TraceReader(tmp_path / "o.parquet")
    assert r.num_rows == 5 and r.meta.source_facts == {"events": 5}
    assert r.read_all()["tenant"].tolist() == [1] * 5 and r.tenants[1] == "t1"
