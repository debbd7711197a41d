"""The capture's mapping kernel (kvreplay/capture/mapkernel.py) gives what the plain-Python mapper it replaced
gives (tests/support/lifecycle_reference.py), row for row, on random step batches that mix every rule: stores
with and without parents, block sizes 16/32/0 (placeholders)/absent, LoRA names and ids, salts from cache_salt
and from vLLM's extra keys, sessions, KV cache groups 0-2, localities, unknown media, bytes and top-of-range
hashes, removals of held and absent blocks, clears with and without a medium (vLLM's and SGLang's), two
publishers, times going backwards, takes between batches. Same rows, counts (key order too), tenants, scopes
and session names."""

from __future__ import annotations

import random

import msgspec
import numpy as np
import pytest

from kvreplay.capture.lifecycle import MEDIA, LifecycleMapper
from kvreplay.capture.session import CaptureSession
from tests.support.lifecycle_reference import ReferenceMapper

MEDIA_NAMES = ["GPU", "CPU", "STORAGE", "CPU_PINNED", "DISK", "WEIRD", None]


def stream(seed: int, messages: int = 300):
    """(publisher, frames, take after it) of a random mixed stream."""
    rng = random.Random(seed)
    pool = [rng.getrandbits(64) for _ in range(200)] + [2**64 - 1 - i for i in range(10)]

    def h():
        x = rng.choice(pool)
        return x.to_bytes(32, "big") if rng.random() < 0.2 else x

    for seq in range(messages):
        evs = []
        for _ in range(rng.randint(0, 12)):
            r = rng.random()
            if r < 0.5:
                n = rng.randint(0, 5)
                ev = {"type": "BlockStored", "block_hashes": [h() for _ in range(n)],
                      "parent_block_hash": rng.choice([None, None, h()]), "token_ids": [],
                      "block_size": rng.choice([16, 16, 32, 0, None]), "medium": rng.choice(MEDIA_NAMES)}
                if ev["block_size"] is None:
                    del ev["block_size"]
                if rng.random() < 0.3:
                    ev["lora_name"] = rng.choice(["L1", "L2", "L3"])
                if rng.random() < 0.1:
                    ev["lora_id"] = rng.randint(1, 3)
                if rng.random() < 0.3:
                    ev["extra_keys"] = [rng.choice([["L1", "salt1"], ["saltX"], ["L2"], [], None, [b"x", "s2"]])
                                        for _ in range(n)]
                if rng.random() < 0.2:
                    ev["cache_salt"] = rng.choice(["t1", "t2", {"a": 1}])
                if rng.random() < 0.3:
                    ev["session_id"] = rng.choice([1, 2, "s-a", "s-b", 2**62])
            elif r < 0.93:
                ev = {"type": "BlockRemoved", "block_hashes": [h() for _ in range(rng.randint(0, 5))],
                      "medium": rng.choice(MEDIA_NAMES)}
                if rng.random() < 0.2:
                    ev["session_id"] = rng.choice([1, "s-c"])
            else:
                ev = {"type": "AllBlocksCleared", "medium": rng.choice(MEDIA_NAMES[:5] + [None] * 5)}
            if ev["type"] != "AllBlocksCleared":
                if rng.random() < 0.4:
                    ev["group_idx"] = rng.choice([0, 1, 2])
                if rng.random() < 0.3:
                    ev["locality"] = rng.choice(["LOCAL", "REMOTE", "local"])
            if ev.get("medium", 0) is None:
                del ev["medium"]
            evs.append(ev)
        ts = 1.0 + seq * 0.01 - rng.random() * 0.02
        yield rng.choice([0, 1]), [b"", seq.to_bytes(8, "big"), msgspec.msgpack.encode([ts, evs, 0])], \
            rng.random() < 0.05


def mapped(mapper, seed: int, engine: str) -> dict:
    sess = CaptureSession(["a", "b"], mapper, "")
    takes = []
    for pub, frames, take in stream(seed):
        sess.feed_live(pub, frames, 0)
        if take:
            takes.append(mapper.take())
    takes.append(mapper.take())
    rows = {k: np.concatenate([b[k] for b in takes]).tolist() for k in takes[-1]}
    f = sess.facts()
    return {"rows": rows, "facts": f, "order": {k: list(v) for k, v in f.items() if isinstance(v, dict)},
            "tenants": mapper.tenants, "scopes": mapper.scopes, "sessions": mapper.session_names}


@pytest.mark.parametrize("seed,engine", [(1, "vllm"), (2, "sglang"), (3, "vllm"), (4, "sglang")])
def test_the_kernel_maps_as_the_python_reference(seed, engine):
    new = mapped(LifecycleMapper(4096, 16, MEDIA, engine), seed, engine)
    ref = mapped(ReferenceMapper(4096, 16, MEDIA, engine), seed, engine)
    f = ref["facts"]  # the stream reaches every rule
    assert f["all_blocks_cleared"] > 20 and f["placeholder_stores_default_size"] > 0 and f["repeat_stores"] > 0
    assert f["unknown_media"] and len(ref["scopes"]) > 5 and len(ref["tenants"]) > 3 and ref["sessions"]
    assert len(ref["rows"]["ts_ns"]) > 3000 and max(ref["rows"]["parent_id"]) > 0
    assert new == ref
