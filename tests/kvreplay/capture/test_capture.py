"""`kvbed trace capture`: real PUB/ROUTER sockets on loopback send every wire vintage of vLLM's and
SGLang's KV events; the captured trace must equal the published events, gaps are filled from the
replay socket (both reply shapes), unfillable gaps are counted, and the raw file decodes again to
the same trace."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import zmq

from tests.support.capture_publisher import FakeEngine, batch, cleared, endpoints, removed, stored
from tests.support.cli import kvbed, ok
from kvreplay.capture import CaptureParams
from kvreplay.capture.subscriber import LiveCapture
from kvreplay.capture.wire import WireError, decode_batch
from kvreplay.schema import OP, TIER, read_trace
from kvreplay.tiers.geometry import geometry
from kvreplay.validate import validate_trace

BPT = geometry("llama-3-8b").bytes_per_token("bf16")


class Running:
    """A LiveCapture in a thread; ``wait_for(n)`` until n messages were taken."""

    def __init__(self, pubs, out, replay=(), raw=None, engine="vllm", **params):
        self.warnings: list[str] = []
        p = CaptureParams(**{"flush_s": 0.2, **params}).validate()
        self.cap = LiveCapture(list(pubs), out, p, replay=list(replay), raw=raw, engine=engine,
                               warn=self.warnings.append)
        self.stop = threading.Event()
        self.result = None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self):
        self.result = self.cap.run(self.stop.is_set)

    def messages(self):
        s = self.cap.session
        return sum(p.messages + p.bad + p.wrong_topic for p in s.pubs)

    def wait_for(self, n, timeout=10.0):
        end = time.monotonic() + timeout
        while self.messages() < n and time.monotonic() < end:
            time.sleep(0.01)
        assert self.messages() >= n, (self.messages(), n, self.warnings)

    def finish(self):
        self.stop.set()
        self.thread.join(20)
        assert not self.thread.is_alive()
        return self.result


def handshake(eng, run, what=None):
    """Publish empty batches until the subscriber has one (ZMQ's slow joiner: the first ones are lost
    unless replayed); returns how many messages the capture has taken once they stopped arriving."""
    for _ in range(500):
        eng.send(what or batch(1.0, []))
        time.sleep(0.01)
        if run.messages() > 0:
            time.sleep(0.1)
            return run.messages()
    raise AssertionError("subscriber never connected")


def rows(path):
    b, r = read_trace(path)
    return [(int(b["op"][i]), int(b["tier"][i]), int(b["obj_id"][i]), int(b["parent_id"][i]), int(b["nbytes"][i]))
            for i in range(b.n)], b, r


C, M, P, E, D = OP["create"], OP["commit"], OP["persist"], OP["evict"], OP["delete"]
G, CPU = TIER["gpu"], TIER["cpu"]


def workload(vintage, as_bytes=False, engine="vllm", shape="array"):
    """Payloads of a small run and the lifecycle rows they must give (bs 16 tokens)."""
    nb = 16 * BPT
    kw = {"vintage": vintage, "hashes_as_bytes": as_bytes}
    cpu = "CPU" if engine == "vllm" else "CPU_TIER1"
    payloads = [
        batch(10.0, [stored([101, 102, 103], **kw)], engine=engine, shape=shape, rank=0),
        batch(10.5, [stored([104], parent=103, **kw), stored([101, 102], medium=cpu, **kw)], engine=engine,
              shape=shape),
        batch(11.0, [removed([101, 104], **kw)], engine=engine, shape=shape),
        batch(11.5, [removed([101], medium=cpu, **kw), stored([101], **kw)], engine=engine, shape=shape),
        batch(12.0, [cleared(vintage)], engine=engine, shape=shape),
    ]
    if vintage == "vllm-v0.8":  # no medium field at all: every event is GPU
        payloads[1] = batch(10.5, [stored([104], parent=103, **kw)], shape=shape)
        payloads[3] = batch(11.5, [stored([101], **kw)], shape=shape)
        want = [(C, G, 1, 0, nb), (M, G, 1, 0, nb), (C, G, 2, 1, nb), (M, G, 2, 1, nb), (C, G, 3, 2, nb),
                (M, G, 3, 2, nb), (C, G, 4, 3, nb), (M, G, 4, 3, nb),
                (D, G, 1, 0, nb), (D, G, 4, 3, nb),
                (C, G, 5, 0, nb), (M, G, 5, 0, nb),
                (D, G, 2, 1, nb), (D, G, 3, 2, nb), (D, G, 5, 0, nb)]
        return payloads, want
    want = [(C, G, 1, 0, nb), (M, G, 1, 0, nb), (C, G, 2, 1, nb), (M, G, 2, 1, nb), (C, G, 3, 2, nb),
            (M, G, 3, 2, nb), (C, G, 4, 3, nb), (M, G, 4, 3, nb), (P, CPU, 1, 0, nb), (P, CPU, 2, 1, nb),
            (E, G, 1, 0, nb), (D, G, 4, 3, nb),  # 101 still in CPU: evict; 104 had one copy: delete
            (D, CPU, 1, 0, nb),  # its last copy: the object ends
            (C, G, 5, 0, nb), (M, G, 5, 0, nb),  # stored again: a new object
            (E, G, 2, 1, nb), (D, G, 3, 2, nb), (D, G, 5, 0, nb)]
    if engine == "sglang":  # SGLang's reset also empties the host pool: 102's CPU copy goes too
        want.append((D, CPU, 2, 1, nb))
    return payloads, want


VINTAGES = [
    ("vllm-v0.8", False, "vllm", "array"),  # positional with tag, no medium
    ("vllm-array", False, "vllm", "array"),  # positional with every later field
    ("vllm-array", True, "vllm", "array"),  # bytes hashes
    ("vllm-map", False, "vllm", "map"),  # events as maps with "type", batch as a map
    ("vllm-map", True, "vllm", "array"),  # map events in an array batch, bytes hashes
    ("sglang-array", False, "sglang", "array"),
    ("sglang-map", False, "sglang", "map"),
]


@pytest.mark.parametrize("vintage,as_bytes,engine,shape", VINTAGES)
def test_capture_equals_published_events(tmp_path, vintage, as_bytes, engine, shape):
    pub, rep = endpoints()
    ctx = zmq.Context()
    eng = FakeEngine(ctx, pub, rep)
    out, raw = tmp_path / "cap.parquet", tmp_path / "cap.kvraw"
    run = Running([pub], out, replay=[rep], raw=raw, engine=engine)
    try:
        n0 = handshake(eng, run)
        payloads, want = workload(vintage, as_bytes, engine, shape)
        for p in payloads:
            eng.send(p)
        run.wait_for(n0 + len(payloads))
        res = run.finish()
    finally:
        eng.close()
        ctx.term()
    got, b, r = rows(out)
    assert got == want
    assert res.facts["lost_messages"] == 0 and res.facts["bad_messages"] == 0
    assert validate_trace(out).ok
    assert r.meta.geometry["bytes_per_token"] == BPT
    # the raw file decodes to the very same trace
    again = tmp_path / "again.parquet"
    ok(kvbed("trace", "import", f"{engine}-events", raw, "-o", again))
    b2, _ = read_trace(again)
    for k in b:
        assert np.array_equal(b[k], b2[k]), k


def test_sglang_salt_and_session_are_kept(tmp_path):
    pub, _ = endpoints()
    ctx = zmq.Context()
    eng = FakeEngine(ctx, pub)
    out = tmp_path / "s.parquet"
    run = Running([pub], out, engine="sglang")
    try:
        n0 = handshake(eng, run)
        eng.send(batch(5.0, [stored([1, 2], vintage="sglang-map", salt="tenantA", session="chat-7"),
                             stored([3], vintage="sglang-map", salt={"user": "bob"}, session=42)],
                       engine="sglang", shape="map", rank=1))
        run.wait_for(n0 + 1)
        run.finish()
    finally:
        eng.close()
        ctx.term()
    b, r = read_trace(out)
    tenants = [r.tenants[c] for c in b["tenant"]]
    assert tenants == ["tenantA"] * 4 + ["user=bob"] * 2
    assert b["session_id"].tolist() == [0, 0, 0, 0, 42, 42]
    assert r.meta.extra["sessions"] == {"chat-7": 0}
    assert r.meta.source_facts["per_publisher"][0]["dp_ranks"] == [1]


def test_lora_gives_the_scope_and_a_chain_heads_salt_the_tenant(tmp_path):
    pub, _ = endpoints()
    ctx = zmq.Context()
    eng = FakeEngine(ctx, pub)
    out = tmp_path / "l.parquet"
    run = Running([pub], out)
    try:
        n0 = handshake(eng, run)
        eng.send(batch(5.0, [stored([1], lora_name="sql-adapter", vintage="vllm-array"),
                             stored([2], extra_keys=[["salt-x"]], vintage="vllm-array"),
                             stored([3], vintage="vllm-array")]))
        run.wait_for(n0 + 1)
        run.finish()
    finally:
        eng.close()
        ctx.term()
    b, r = read_trace(out)
    scopes = [r.scopes[c] for c in b["scope"][::2]]
    tenants = [r.tenants[c] for c in b["tenant"][::2]]
    assert scopes == [f"{pub}|lora=sql-adapter", pub, pub]
    assert tenants == ["default", "salt-x", "default"]  # vLLM's salt: the chain head's lone extra-key string


@pytest.mark.parametrize("shape", ["seq", "topic"])
def test_gaps_are_filled_from_replay_and_lost_ones_counted(tmp_path, shape):
    pub, rep = endpoints()
    ctx = zmq.Context()
    # the handshake takes seqs 0..k; the workload's messages are dropped on the live socket at
    # offsets 1 and 3 (replayable) and 5 (missing from the replay buffer too: lost)
    out = tmp_path / "g.parquet"
    eng = FakeEngine(ctx, pub, rep, topic=b"kv@pod0@llama", reply_shape=shape)
    run = Running([pub], out, replay=[rep], topic="kv@")
    try:
        n0 = handshake(eng, run)
        base = eng.seq
        eng.drop = {base + 1, base + 3, base + 5}
        eng.unreplayable = {base + 5}
        for i in range(8):
            eng.send(batch(20.0 + i, [stored([1000 + i])]))
        run.wait_for(n0 + 7)
        res = run.finish()
    finally:
        eng.close()
        ctx.term()
    f = res.facts
    assert f["gaps_filled"] >= 2 and f["lost_messages"] == 1
    assert len([w for w in run.warnings if "lost" in w]) == 1
    got, b, _ = rows(out)
    made = sorted(int(o) for o, op in zip(b["obj_id"], b["op"]) if op == C)
    assert len(made) == 7  # 8 published, one lost
    assert validate_trace(out).ok


def test_capture_without_replay_counts_gaps_as_lost(tmp_path):
    pub, _ = endpoints()
    ctx = zmq.Context()
    eng = FakeEngine(ctx, pub)
    out = tmp_path / "n.parquet"
    run = Running([pub], out)
    try:
        n0 = handshake(eng, run)
        eng.drop = {eng.seq + 2, eng.seq + 3}
        for i in range(6):
            eng.send(batch(20.0 + i, [stored([1000 + i])]))
        run.wait_for(n0 + 4)
        res = run.finish()
    finally:
        eng.close()
        ctx.term()
    assert res.facts["lost_messages"] == 2 and res.facts["gaps_filled"] == 0
    assert res.rows == 8
    lost = [w for w in run.warnings if "lost" in w]  # said, once (the guide: each kind of problem warned once)
    assert len(lost) == 1 and "2 message(s) before seq" in lost[0]
    stats = " ".join(ok(kvbed("trace", "stats", out)).stdout.split())  # stores and removals only: no reuse seen
    assert "this trace has no hit or load events" in stats and "reuse was not recorded" in stats


def test_two_publishers_keep_their_instance(tmp_path):
    (a, _), (b, _) = endpoints(), endpoints()
    ctx = zmq.Context()
    ea, eb = FakeEngine(ctx, a), FakeEngine(ctx, b)
    out = tmp_path / "two.parquet"
    run = Running([a, b], out)
    try:
        handshake(ea, run)
        while run.cap.session.pubs[1].messages == 0:
            eb.send(batch(1.0, []))
            time.sleep(0.01)
        n = run.messages()
        ea.send(batch(3.0, [stored([7, 8])]))
        eb.send(batch(3.1, [stored([7]), removed([7])]))
        run.wait_for(n + 2)
        run.finish()
    finally:
        ea.close(), eb.close()
        ctx.term()
    bt, r = read_trace(out)
    assert bt.n == 7  # a: 2 x (create, commit); b: create, commit, delete
    by_scope = {}
    for o, s in zip(bt["obj_id"], bt["scope"]):
        by_scope.setdefault(r.scopes[s], set()).add(int(o))
    assert by_scope == {a: {1, 2}, b: {3}}  # the same hash on two instances: two objects
    assert validate_trace(out).ok


def test_bad_messages_are_reported_and_skipped(tmp_path):
    pub, _ = endpoints()
    ctx = zmq.Context()
    eng = FakeEngine(ctx, pub, topic=b"kv@pod0")
    out = tmp_path / "bad.parquet"
    run = Running([pub], out, topic="kv")
    try:
        n0 = handshake(eng, run, batch(1.0, []))
        eng.send_raw([b"kv", (99).to_bytes(8, "big")])  # 2 frames
        eng.send(b"\xc1\xc1 not msgpack")  # garbage payload
        eng.send(batch(2.0, [["Rebalanced", 1, 2], stored([5])]))  # unknown event type
        eng.send_raw([b"other", (0).to_bytes(8, "big"), batch(3.0, [stored([6])])])  # wrong topic
        run.wait_for(n0 + 4)
        res = run.finish()
    finally:
        eng.close()
        ctx.term()
    w = "\n".join(run.warnings)
    assert "message of 2 frames (expected 3: topic, seq, payload)" in w
    assert "payload is not msgpack" in w
    assert "unknown event type 'Rebalanced'" in w
    assert "ignoring messages on topic 'other' (capturing topic 'kv')" in w
    assert res.facts["unknown_event_types"] == {"Rebalanced": 1}
    assert res.rows == 2 and validate_trace(out).ok  # the one good block was kept


def test_decode_errors_name_the_problem():
    import msgspec

    with pytest.raises(WireError, match="not msgpack"):
        decode_batch(b"\xc1")
    with pytest.raises(WireError, match="batch array of 1 fields"):
        decode_batch(msgspec.msgpack.encode([1.0]))
    # a bad event costs only itself: named in .bad with its kind, the rest of the batch decoded
    b = decode_batch(msgspec.msgpack.encode({"ts": 1.0, "events": [{"type": "BlockStored"},
                                                                   {"type": "BlockRemoved", "block_hashes": [7]}]}))
    assert b.bad == [("BlockStored without block_hashes", "BlockStored without block_hashes")]
    assert [e.hashes for e in b.events] == [[7]]
    b = decode_batch(msgspec.msgpack.encode([1.0, [["BlockRemoved", ["x"]]]]))
    assert b.bad[0][0] == "block hash type" and "block hash of type str" in b.bad[0][1] and not b.events
    # extra trailing fields of a future release are ignored, missing ones default
    b = decode_batch(msgspec.msgpack.encode([1.0, [["BlockStored", [1], None, [], 16, None, "CPU", None, None,
                                                     0, "full", None, "LOCAL", "future"]], 3, "extra"]))
    assert b.events[0].medium == "CPU" and b.dp_rank == 3
    big = decode_batch(msgspec.msgpack.encode([1.0, [["BlockRemoved", [b"\x01" * 8 + (2**64 - 1).to_bytes(8, "big")]]]]))
    assert big.events[0].hashes == [2**64 - 1]


def test_the_checked_hash_decoder_and_its_fallback_decode_as_the_generic_path():
    """Array batches with all-uint64 hashes take a decoder that checks them in msgspec; bytes or signed hashes
    send the stream back to the per-hash path for a while. Either way a batch decodes as the generic
    (per-event Python) decoder decodes it."""
    import msgspec

    from kvreplay.capture import wire

    def ev(hs, kind="BlockStored"):
        return {"type": kind, "block_hashes": hs, "parent_block_hash": None, "block_size": 16, "medium": "GPU"}

    shapes = [[ev([1, 2**64 - 1])], [ev([b"\x00" * 24 + (7).to_bytes(8, "big")])], [ev([-5, 3], "BlockRemoved")],
              [ev([2**63, 0]), ev([9], "BlockRemoved")], [ev([])]]
    for i in range(3 * wire._STRICT_RETRY):
        payload = msgspec.msgpack.encode([float(i), shapes[i % 7 % len(shapes)], 0])
        assert wire.decode_batch(payload) == wire._generic_batch(payload)
    assert wire.decode_batch(msgspec.msgpack.encode([1.0, [ev([-5])], 0])).events[0].hashes == [2**64 - 5]
