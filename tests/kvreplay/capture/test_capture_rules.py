"""The capture's mapping rules, one per issue-22 fix, on hand-built payloads in the engines' wire shapes
(map events with "type", array batches, omitted optional fields, as vLLM 0.34 and SGLang 0.5.23 encode them;
test_engines.py sends the same through the engines' own code). Sizes in blocks of 16 tokens of llama-3-8b."""

from __future__ import annotations

import msgspec
import pytest

from kvreplay.capture.lifecycle import GROUP_MIX, MEDIA, LifecycleMapper, medium_map
from kvreplay.capture.rawfile import LIVE, RawWriter
from kvreplay.capture.session import CaptureSession
from kvreplay.schema import OP, TIER, read_trace
from kvreplay.tiers.geometry import geometry
from tests.support.cli import kvbed, ok

BPT = geometry("llama-3-8b").bytes_per_token("bf16")
C, M, P, E, D = OP["create"], OP["commit"], OP["persist"], OP["evict"], OP["delete"]
G, CPU, SSD, REMOTE = TIER["gpu"], TIER["cpu"], TIER["ssd"], TIER["remote"]


def st(hashes, medium="GPU", bs=16, parent=None, **kw):
    ev = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
          "token_ids": list(range(bs * len(hashes))) if isinstance(bs, int) and bs > 0 else [], "block_size": bs, "lora_id": None, "medium": medium,
          "lora_name": None}
    ev.update(kw)
    return ev


def placeholder(h, medium="CPU", **kw):
    """vLLM 0.34's offloaded store with default (not self-describing) events: OffloadingEventsTracker's
    _placeholder_stored (one 32-byte hash, no parent, no tokens, block_size 0)."""
    return {"type": "BlockStored", "block_hashes": [h], "parent_block_hash": None, "token_ids": [], "block_size": 0,
            "lora_id": None, "medium": medium, "lora_name": None, "group_idx": 0, **kw}


def rm(hashes, medium="GPU", **kw):
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium, **kw}


CLEAR = {"type": "AllBlocksCleared"}


def run(batches, engine="vllm", media=None, warn=None):
    """Feed ``batches`` (lists of events) as seqs 0.. of one publisher; (rows, mapper, session)."""
    mapper = LifecycleMapper(BPT, 16, media or MEDIA, engine)
    sess = CaptureSession(["pub"], mapper, "", warn or (lambda s: None))
    for i, evs in enumerate(batches):
        sess.feed_live(0, [b"", i.to_bytes(8, "big"), msgspec.msgpack.encode([float(i + 1), evs, 0])], 0)
    b = mapper.take()
    rows = [(int(b["op"][i]), int(b["tier"][i]), int(b["obj_id"][i]), int(b["nbytes"][i]) // (16 * BPT))
            for i in range(b.n)]
    return rows, b, mapper, sess


def test_placeholder_offload_stores_take_the_device_side_geometry():
    h1, h2, h9 = (bytes([i]) * 32 for i in (1, 2, 9))
    rows, b, mapper, sess = run([
        [st([h1, h2], bs=32), placeholder(h2)],  # in one step batch, as vLLM sends GPU and connector events
        [rm([h1, h2]), placeholder(h9)],  # h2 lives on in CPU; h9 was never on the GPU: the model's block
        [placeholder(h1)],  # h1's object ended: a new one, sized as its last device-side store (32 tokens)
    ])
    assert rows == [(C, G, 1, 2), (M, G, 1, 2), (C, G, 2, 2), (M, G, 2, 2), (P, CPU, 2, 2),
                    (D, G, 1, 2), (E, G, 2, 2), (C, CPU, 3, 1), (M, CPU, 3, 1),
                    (C, CPU, 4, 2), (M, CPU, 4, 2)]
    assert [int(x) for x in b["ntokens"]] == [32] * 7 + [16, 16, 32, 32]
    f = sess.facts()
    assert f["placeholder_stores"] == 3 and f["placeholder_stores_default_size"] == 1
    assert f["bad_events"] == {} and f["bad_messages"] == 0


def test_a_bad_event_costs_only_itself_counted_and_warned_once_per_kind():
    warned = []
    rows, _, _, sess = run([
        [st([1]), st([2], bs=-3), st([3], block_hashes_extra=1)],
        [st([4], bs="x"), rm(["nohash"]), st([5])],
        [{"type": "BlockStored"}, rm([1]), rm([2], medium=["GPU"])],
    ], warn=warned.append)
    assert rows == [(C, G, 1, 1), (M, G, 1, 1), (C, G, 2, 1), (M, G, 2, 1), (C, G, 3, 1), (M, G, 3, 1),
                    (D, G, 1, 1)]
    f = sess.facts()
    assert f["bad_events"] == {"BlockStored block_size": 2, "block hash type": 1,
                               "BlockStored without block_hashes": 1, "BlockRemoved medium": 1}
    assert f["bad_messages"] == 0 and f["messages"] == 3
    assert len(warned) == 4 and all("that event skipped, the rest of its batch taken" in w for w in warned)


def test_kv_cache_groups_are_separate_objects_with_their_own_keys():
    h = 0x1234
    rows, b, _, sess = run([
        [st([h], group_idx=0, kv_cache_spec_kind="full"),
         st([h], group_idx=1, kv_cache_spec_kind="sliding_window", kv_cache_spec_sliding_window=128)],
        [rm([h], group_idx=1)],  # the sliding window dropped it: group 0's object lives on
        [st([h], group_idx=1)],
    ])
    assert rows == [(C, G, 1, 1), (M, G, 1, 1), (C, G, 2, 1), (M, G, 2, 1), (D, G, 2, 1), (C, G, 3, 1),
                    (M, G, 3, 1)]
    keys = [int(k) for k in b["content_key"][::1]]
    assert keys[0] == h and keys[2] == h ^ GROUP_MIX and keys[5] == h ^ GROUP_MIX
    assert sess.facts()["repeat_stores"] == 0 and sess.facts()["removes_of_absent_blocks"] == 0


@pytest.mark.parametrize("engine,cpu,want_clear", [
    ("vllm", "CPU", [(E, G, 1, 1), (D, G, 2, 1)]),  # reset_prefix_cache: the GPU pool only
    ("sglang", "CPU_PINNED", [(E, G, 1, 1), (D, G, 2, 1), (D, CPU, 1, 1)]),  # radix reset: host pool too
])
def test_clears_follow_each_engine_and_a_store_after_a_clear_is_a_new_object(engine, cpu, want_clear):
    rows, _, _, sess = run([[st([1, 2]), st([1], medium=cpu)], [CLEAR], [st([1])]], engine=engine)
    head = [(C, G, 1, 1), (M, G, 1, 1), (C, G, 2, 1), (M, G, 2, 1), (P, CPU, 1, 1)]
    assert rows[:5] == head and rows[5:5 + len(want_clear)] == want_clear
    # SGLang: every copy of 1 went, so the store makes object 3; vLLM: the CPU copy kept object 1 alive
    assert rows[5 + len(want_clear):] == ([(C, G, 3, 1), (M, G, 3, 1)] if engine == "sglang" else [(P, G, 1, 1)])
    assert sess.facts()["all_blocks_cleared"] == 1


def test_media_names_current_and_older_with_locality_and_overrides():
    evs = [[st([1], medium="STORAGE", locality="LOCAL"), st([2], medium="STORAGE", locality="REMOTE"),
            st([3], medium="STORAGE"), st([4], medium="CPU_PINNED"), st([5], medium="FS"), st([6], medium="OBJ"),
            st([7], medium="CPU_TIER1"), st([8], medium="DISK"), st([9], medium="EXTERNAL")]]
    rows, *_ = run(evs)
    assert [t for op, t, _, _ in rows if op == C] == [SSD, REMOTE, SSD, CPU, SSD, REMOTE, CPU, SSD, REMOTE]
    rows, *_ = run(evs, media=medium_map(["STORAGE=cxl"]))  # a plain name overrides every locality
    assert [t for op, t, _, _ in rows if op == C][:3] == [TIER["cxl"]] * 3
    rows, *_ = run(evs, media=medium_map(["STORAGE@REMOTE=cpu"]))
    assert [t for op, t, _, _ in rows if op == C][:3] == [SSD, CPU, SSD]


def test_lora_and_salt_are_kept_per_chain():
    """vLLM 0.34: lora_name on every event and first in each block's extra keys; the cache salt only in the
    first block of the request (its extra keys after the LoRA name)."""
    rows, b, mapper, _ = run([
        [st([1, 2], lora_name="sql", extra_keys=[["sql", "tenant-a"], ["sql"]])],
        [st([3], parent=2, lora_name="sql", extra_keys=[["sql"]])],  # the chain goes on: same scope and tenant
        [st([4], parent=3)],  # an event naming neither (a connector's store): still the chain's
        [st([11, 12], extra_keys=[["tenant-b"], None])],  # no LoRA: the lone string of block 0 is the salt
        [st([13], parent=12, extra_keys=[["lora-x"]])],  # a later block's string can only be a LoRA name
    ])
    creates = [i for i in range(b.n) if int(b["op"][i]) == C]
    got = [(mapper.scopes[int(b["scope"][i])], mapper.tenants[int(b["tenant"][i])]) for i in creates]
    assert got == [("pub|lora=sql", "tenant-a")] * 4 + [("pub", "tenant-b")] * 2 + [("pub|lora=lora-x", "tenant-b")]


def _raw(path, batches, engine="vllm"):
    w = RawWriter(path, {"engine": engine, "endpoints": ["tcp://x:1"], "replay": [], "topic": "", "model": "llama-3-8b",
                         "kv_dtype": "bf16", "tokens_per_block": 16, "media": MEDIA, "started_unix_ns": 0})
    for i, evs in enumerate(batches):
        w.write(i, 0, LIVE, [b"", i.to_bytes(8, "big"), msgspec.msgpack.encode([float(i + 1), evs, 0])])
    w.close()


def test_warnings_reach_the_user_from_the_raw_importer(tmp_path):
    _raw(tmp_path / "c.kvraw", [[st([1]), st([2], bs=-1)], [st([3], bs=-2)]])
    res = ok(kvbed("trace", "import", "vllm-events", tmp_path / "c.kvraw", "-o", tmp_path / "c.parquet", "--json"))
    assert res.stderr.count("warning") == 1 and "BlockStored block_size -1" in res.stderr
    assert '"bad_events": {\n      "BlockStored block_size": 2' in res.stdout
    b, _ = read_trace(tmp_path / "c.parquet")
    assert b.n == 2


def test_warnings_reach_a_warn_set_after_construction(tmp_path):
    """The CLI used to replace LiveCapture.warn after the session had kept the one it was built with."""
    from kvreplay.capture import CaptureParams
    from kvreplay.capture.subscriber import LiveCapture

    cap = LiveCapture(["tcp://127.0.0.1:1"], tmp_path / "o.parquet", CaptureParams().validate())
    got = []
    cap.warn = got.append
    cap.session.feed_live(0, [b"", (0).to_bytes(8, "big"), msgspec.msgpack.encode([1.0, [st([1], bs=-1)]])], 0)
    assert len(got) == 1 and "block_size -1" in got[0]


def test_the_fast_decoder_gives_what_the_generic_one_gives():
    """Today's encoding (array or map batch of "type"-tagged map events) is decoded by typed msgspec structs;
    the result must equal the field-by-field decoder's, which reads every vintage."""
    from kvreplay.capture.wire import _fast_batch, _generic_batch

    evs = [st([1, 2**64 - 1], parent=7, lora_name="a", extra_keys=[["a", "salt"], ["a"]], group_idx=1,
              locality="remote", session_id="s1"),
           st([b"\x01" * 32, -5], parent=b"\x02" * 32, lora_id=3, cache_salt={"b": 2, "a": 1}, session_id=4),
           placeholder(b"\x03" * 32, medium="STORAGE", locality="LOCAL", ownership=None, future_field=[1, 2]),
           rm([-1, 2], group_idx=0, locality="REMOTE"), {"type": "BlockRemoved", "block_hashes": []},
           {"type": "AllBlocksCleared"}, {"type": "AllBlocksCleared", "medium": "CPU_PINNED"}]
    payloads = [msgspec.msgpack.encode([3.5, evs, 2]), msgspec.msgpack.encode([3, evs]),
                msgspec.msgpack.encode([3.5, evs, None, "extra"]),
                msgspec.msgpack.encode({"ts": 1.0, "events": evs, "data_parallel_rank": 1}),
                msgspec.msgpack.encode({"ts": 1.0, "events": evs, "attn_dp_rank": 5})]
    for p in payloads:
        fast = _fast_batch(p)
        assert fast is not None and fast == _generic_batch(p)
    # what the fast decoder does not read goes the generic way (decode_batch), not wrong
    for p in (msgspec.msgpack.encode([1.0, [["BlockStored", [1], None, [], 16, None, "GPU"]]]),
              msgspec.msgpack.encode([1.0, [st([1], bs=-1)]]), msgspec.msgpack.encode([1.0, [{"type": "Other"}]]),
              msgspec.msgpack.encode([True, []])):
        assert _fast_batch(p) is None
