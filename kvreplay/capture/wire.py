"""Decode the engines' KV event messages, every encoding vintage, into plain tuples.

A message is ``[topic, seq (8 bytes, big-endian), msgpack(batch)]``. The batch is
``(ts, events, dp_rank)`` as an array (vLLM, SGLang) or a map (``ts``, ``events``,
``data_parallel_rank``/``attn_dp_rank``). An event is an array with its tag first (older vLLM,
SGLang) or a map with a ``"type"`` key (newer vLLM, SGLang's map form with top-level
``cache_salt``/``session_id``). Fields were appended over releases, so positional events are read
with length guards and extra trailing fields are ignored - as llm-d and Dynamo do.

Block hashes are ints (vLLM's low 64 bits) or bytes; bytes become the uint64 of their last 8
bytes, big-endian (what the routers index on).

A bad event (a field of the wrong type or value) costs only itself: it is left out of its batch and
named in ``Batch.bad`` with its kind, so the capture counts it and warns once per kind; only a payload
that is not a batch at all is refused whole. ``block_size`` 0 is not bad: it is vLLM's placeholder
store (offloaded chunks with its default, not self-describing, events: no tokens, no parent), sized
from the block's device-side store by :mod:`kvreplay.capture.lifecycle`.
"""

from __future__ import annotations

from typing import Annotated, Any, NamedTuple

import msgspec

STORED, REMOVED, CLEARED = 0, 1, 2
TAGS = {"BlockStored": STORED, "BlockRemoved": REMOVED, "AllBlocksCleared": CLEARED}
#: positional field order, oldest first (fields were only ever appended)
STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
                 "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window", "locality",
                 "ownership", "session_id", "lookahead_token_ids")
REMOVED_FIELDS = ("block_hashes", "medium", "group_idx", "locality", "ownership")
CLEARED_FIELDS = ("medium",)
FIELDS = {STORED: STORED_FIELDS, REMOVED: REMOVED_FIELDS, CLEARED: CLEARED_FIELDS}
U64 = (1 << 64) - 1
END_SEQ = -1  # the replay reply that ends a replay


class WireError(ValueError):
    """A message or event that cannot be decoded (the text says why); the capture skips it and counts it
    under ``kind`` (a short name of what was wrong, the same for every event wrong the same way)."""

    def __init__(self, text: str, kind: str | None = None):
        super().__init__(text)
        self.kind = kind or text


class Event(NamedTuple):
    kind: int  # STORED | REMOVED | CLEARED
    hashes: list  # uint64 ints
    parent: int | None
    block_size: int | None
    medium: str | None
    lora: str | None  # lora_name, else "id:<lora_id>", else None
    extra: Any  # extra_keys (per block) or None
    salt: str | None  # SGLang cache_salt
    session: Any  # SGLang (and vLLM >= 0.34) session_id
    group: int  # vLLM's group_idx (KV cache group of a hybrid model); 0 when absent
    locality: str | None  # vLLM's LOCAL / REMOTE (tells STORAGE tiers apart)


class Batch(NamedTuple):
    ts: float
    events: list  # of Event
    dp_rank: int | None
    unknown: list  # tags of events that are not BlockStored/BlockRemoved/AllBlocksCleared
    bad: list  # (kind, text) of events left out because they cannot be decoded


_decoder = msgspec.msgpack.Decoder()


def split_message(frames: list[bytes]) -> tuple[bytes, int, bytes]:
    """(topic, seq, payload) of a live message; WireError if it is not 3 frames with an 8-byte seq."""
    if len(frames) != 3:
        raise WireError(f"message of {len(frames)} frame{'s' if len(frames) != 1 else ''} "
                        "(expected 3: topic, seq, payload)")
    topic, seq, payload = frames
    if len(seq) != 8:
        raise WireError(f"sequence frame of {len(seq)} bytes (expected 8)")
    return topic, int.from_bytes(seq, "big", signed=True), payload


def split_replay(frames: list[bytes]) -> tuple[int, bytes]:
    """(seq, payload) of a replay reply: ``[seq, payload]`` or ``[topic, seq, payload]``, each possibly
    after the empty delimiter frame a ROUTER adds for a REQ-style peer; the seq is always next to last."""
    if len(frames) < 2 or len(frames[-2]) != 8:
        raise WireError(f"replay reply of {len(frames)} frames without an 8-byte sequence before the payload")
    return int.from_bytes(frames[-2], "big", signed=True), frames[-1]


def _hash(h: Any) -> int:
    if isinstance(h, int):
        return h & U64
    if isinstance(h, (bytes, bytearray)):
        return int.from_bytes(bytes(h[-8:]), "big")
    raise WireError(f"block hash of type {type(h).__name__} (expected int or bytes)", "block hash type")


def _hashes(hs: Any) -> list:
    if not isinstance(hs, list):
        raise WireError("block_hashes is not an array", "block_hashes not an array")
    for h in hs:  # the common case, all non-negative 64-bit ints, is kept as is
        if type(h) is not int or h < 0 or h > U64:
            return [_hash(x) for x in hs]
    return hs


def _event(raw: Any) -> Event | str:
    """An Event, or the tag (str) of an event type this decoder does not know."""
    if isinstance(raw, list):
        if not raw or not isinstance(raw[0], str):
            raise WireError("event array without a type tag first", "event without type")
        tag = raw[0]
        kind = TAGS.get(tag)
        if kind is None:
            return tag
        vals = raw[1:]
        f = dict(zip(FIELDS[kind], vals))
        salt = session = None
    elif isinstance(raw, dict):
        tag = raw.get("type")
        if not isinstance(tag, str):
            raise WireError("event map without a \"type\" key", "event without type")
        kind = TAGS.get(tag)
        if kind is None:
            return tag
        f = raw
        salt, session = raw.get("cache_salt"), raw.get("session_id")
    else:
        raise WireError(f"event of type {type(raw).__name__} (expected an array or a map)", "event not array or map")
    medium = f.get("medium")
    if medium is not None and not isinstance(medium, str):
        raise WireError(f"{tag} medium {medium!r} (expected a string)", f"{tag} medium")
    if kind == CLEARED:
        return Event(kind, [], None, None, medium, None, None, None, None, 0, None)
    if "block_hashes" not in f:
        raise WireError(f"{tag} without block_hashes", f"{tag} without block_hashes")
    hashes = _hashes(f["block_hashes"])
    group = f.get("group_idx")
    if group is None:
        group = 0
    elif type(group) is not int or group < 0:
        raise WireError(f"{tag} group_idx {group!r} (expected a non-negative integer)", f"{tag} group_idx")
    locality = f.get("locality")
    if locality is not None:
        locality = str(locality).upper()
    if session is None:
        session = f.get("session_id")
    if kind == REMOVED:
        return Event(kind, hashes, None, None, medium, None, None, salt, session, group, locality)
    parent = f.get("parent_block_hash")
    lora = f.get("lora_name")
    if lora is None and f.get("lora_id") is not None:
        lora = f"id:{f['lora_id']}"
    bs = f.get("block_size")
    if bs is not None and (type(bs) is not int or bs < 0):
        raise WireError(f"BlockStored block_size {bs!r} (expected a non-negative integer)", "BlockStored block_size")
    if isinstance(salt, dict):  # SGLang's cache_salt map: keep it as one stable string
        salt = ",".join(f"{k}={v}" for k, v in sorted(salt.items(), key=lambda kv: str(kv[0])))
    return Event(kind, hashes, None if parent is None else _hash(parent), bs, medium,
                 None if lora is None else str(lora), f.get("extra_keys"),
                 None if salt is None else str(salt), session, group, locality)


# The fast path: the encoding vLLM (>= 0.10) and SGLang (>= 0.5) send today - an array batch of map events
# tagged by "type", optional fields left out, unknown fields ignored - decoded by msgspec in C. Anything
# else (older vintages, map batches, unknown event types, a bad event) fails validation and takes the
# generic path below, which gives the same Batch for what both read (tests/kvreplay/capture/test_capture.py).
_Size = Annotated[int, msgspec.Meta(ge=0)]


class _Stored(msgspec.Struct, tag_field="type", tag="BlockStored"):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None = None
    block_size: _Size | None = None
    lora_id: Any = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: Any = None
    group_idx: _Size | None = None
    locality: Any = None
    cache_salt: Any = None
    session_id: Any = None


class _Removed(msgspec.Struct, tag_field="type", tag="BlockRemoved"):
    block_hashes: list[int | bytes]
    medium: str | None = None
    group_idx: _Size | None = None
    locality: Any = None
    cache_salt: Any = None
    session_id: Any = None


class _Cleared(msgspec.Struct, tag_field="type", tag="AllBlocksCleared"):
    medium: str | None = None


class _ArrayBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[_Stored | _Removed | _Cleared]
    dp_rank: Any = None


class _MapBatch(msgspec.Struct):
    ts: float
    events: list[_Stored | _Removed | _Cleared]
    data_parallel_rank: Any = msgspec.UNSET
    attn_dp_rank: Any = None


_fast_array = msgspec.msgpack.Decoder(_ArrayBatch)
_fast_map = msgspec.msgpack.Decoder(_MapBatch)


# The fastest path: the same shapes with every block hash a uint64 int (vLLM's int hashes, SGLang's after the
# sign fix), checked by msgspec instead of per hash in Python. Tried first while it keeps working; a stream
# whose hashes are bytes or signed falls back to the path above and tries again only every _STRICT_RETRY
# messages, so it pays the failed attempt rarely.
_U64 = _Size  # >= 0 is all a uint64 needs: msgpack has no int above 2**64 - 1


class _StoredU64(_Stored, tag="BlockStored", gc=False):
    block_hashes: list[_U64]  # the one field that differs (its position and the rest are _Stored's)


class _RemovedU64(_Removed, tag="BlockRemoved", gc=False):
    block_hashes: list[_U64]


class _ArrayBatchU64(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[_StoredU64 | _RemovedU64 | _Cleared]
    dp_rank: Any = None


_strict_array = msgspec.msgpack.Decoder(_ArrayBatchU64)
_STRICT_RETRY = 256
_strict_wait = [0]  # messages to go before the strict decoder is tried again
_MAP_HEADS = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}  # msgpack fixmap, map16, map32


def _fast_batch(payload: bytes) -> Batch | None:
    checked = False  # every block hash known to be a uint64 int
    try:
        if payload and payload[0] in _MAP_HEADS:
            b = _fast_map.decode(payload)
            rank = b.attn_dp_rank if b.data_parallel_rank is msgspec.UNSET else b.data_parallel_rank
        else:
            b = None
            if _strict_wait[0] == 0:
                try:
                    b = _strict_array.decode(payload)
                    checked = True
                except (msgspec.ValidationError, msgspec.DecodeError):
                    _strict_wait[0] = _STRICT_RETRY
            else:
                _strict_wait[0] -= 1
            if b is None:
                b = _fast_array.decode(payload)
            rank = b.dp_rank
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    out = []
    for e in b.events:
        if type(e) is _Cleared:
            out.append(Event(CLEARED, [], None, None, e.medium, None, None, None, None, 0, None))
            continue
        hs = e.block_hashes
        if not checked:
            for h in hs:  # as _hashes: non-negative 64-bit ints kept as they are
                if type(h) is not int or h < 0 or h > U64:
                    hs = [_hash(x) for x in hs]
                    break
        loc = e.locality
        if loc is not None:
            loc = str(loc).upper()
        group = e.group_idx or 0
        if type(e) is _Removed or type(e) is _RemovedU64:
            out.append(Event(REMOVED, hs, None, None, e.medium, None, None, e.cache_salt, e.session_id, group, loc))
            continue
        lora = e.lora_name
        if lora is None and e.lora_id is not None:
            lora = f"id:{e.lora_id}"
        salt = e.cache_salt
        if isinstance(salt, dict):
            salt = ",".join(f"{k}={v}" for k, v in sorted(salt.items(), key=lambda kv: str(kv[0])))
        parent = e.parent_block_hash
        out.append(Event(STORED, hs, None if parent is None else _hash(parent), e.block_size, e.medium,
                         None if lora is None else str(lora), e.extra_keys, None if salt is None else str(salt),
                         e.session_id, group, loc))
    return Batch(b.ts, out, rank if isinstance(rank, int) else None, [], [])


def decode_batch(payload: bytes) -> Batch:
    """Decode one batch payload (both encodings); WireError says what is wrong."""
    fast = _fast_batch(payload)
    return fast if fast is not None else _generic_batch(payload)


def _generic_batch(payload: bytes) -> Batch:
    try:
        obj = _decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise WireError(f"payload is not msgpack ({exc})") from None
    if isinstance(obj, list):
        if len(obj) < 2:
            raise WireError(f"batch array of {len(obj)} fields (expected ts, events[, dp_rank])")
        ts, events = obj[0], obj[1]
        rank = obj[2] if len(obj) > 2 else None
    elif isinstance(obj, dict):
        ts, events = obj.get("ts"), obj.get("events")
        rank = obj.get("data_parallel_rank", obj.get("attn_dp_rank"))
    else:
        raise WireError(f"batch of type {type(obj).__name__} (expected an array or a map)")
    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
        raise WireError(f"batch ts {ts!r} is not a number")
    if not isinstance(events, list):
        raise WireError("batch events is not an array")
    out, unknown, bad = [], [], []
    for raw in events:
        try:
            ev = _event(raw)
        except WireError as exc:  # this event only: the rest of the batch is still taken
            bad.append((exc.kind, str(exc)))
            continue
        if isinstance(ev, str):
            unknown.append(ev)
        else:
            out.append(ev)
    return Batch(float(ts), out, rank if isinstance(rank, int) else None, unknown, bad)
