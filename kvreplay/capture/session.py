"""One capture's bookkeeping, shared by the live subscriber and the raw-file importers.

Messages are taken per publisher in sequence order: a message at or below the last sequence taken
is a duplicate (a replay overlapping the live stream) and skipped; a jump counts the missing
sequences as lost unless a replay filled them first. Replay replies are fed before the live
message that revealed the gap, in the order the raw file records them, so decoding a raw file
again gives the same trace as the live capture.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from kvreplay.capture.lifecycle import LifecycleMapper
from kvreplay.capture.wire import END_SEQ, WireError, decode_batch, split_message, split_replay


@dataclass
class PublisherState:
    name: str
    last_seq: int | None = None
    first_seq: int | None = None
    messages: int = 0
    replayed: int = 0  # messages taken from replay replies (gaps filled)
    lost: int = 0  # sequences never received
    duplicates: int = 0
    bad: int = 0
    wrong_topic: int = 0
    last_seen_ns: int = 0
    dp_ranks: set = field(default_factory=set)

    def to_dict(self) -> dict[str, Any]:
        return {"endpoint": self.name, "first_seq": self.first_seq, "last_seq": self.last_seq,
                "messages": self.messages, "gaps_filled": self.replayed, "lost": self.lost,
                "duplicates": self.duplicates, "bad_messages": self.bad, "wrong_topic": self.wrong_topic,
                "dp_ranks": sorted(self.dp_ranks)}


class CaptureSession:
    def __init__(self, endpoints: list[str], mapper: LifecycleMapper, topic: str = "",
                 warn: Callable[[str], None] = lambda s: None):
        self.pubs = [PublisherState(e) for e in endpoints]
        self.mapper = mapper
        self.topic = topic.encode()
        self.warn = warn
        self.unknown_tags: dict[str, int] = {}
        self.bad_events: dict[str, int] = {}  # kind -> events left out of their batch
        self.block_events = 0
        self._warned: set = set()

    def warn_once(self, key: Any, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.warn(text)

    def expected_next(self, pub: int) -> int | None:
        last = self.pubs[pub].last_seq
        return None if last is None else last + 1

    def needs_replay(self, pub: int, seq: int) -> int | None:
        """The first sequence to ask the replay socket for before taking live message ``seq``, or None."""
        p = self.pubs[pub]
        if p.last_seq is None:
            return 0 if seq > 0 else None  # joined late: ask for the history still buffered
        return p.last_seq + 1 if seq > p.last_seq + 1 else None

    def feed_live(self, pub: int, frames: list[bytes], arrival_ns: int) -> None:
        p = self.pubs[pub]
        p.last_seen_ns = arrival_ns
        try:
            topic, seq, payload = split_message(frames)
        except WireError as exc:
            p.bad += 1
            self.warn_once(("frames", pub, len(frames)), f"{p.name}: {exc}; skipped (further ones counted)")
            return
        if not topic.startswith(self.topic):
            p.wrong_topic += 1
            self.warn_once(("topic", pub, topic), f"{p.name}: ignoring messages on topic {topic.decode(errors='replace')!r} "
                                                   f"(capturing topic {self.topic.decode()!r})")
            return
        self._take(p, seq, payload, replayed=False)

    def feed_replay(self, pub: int, frames: list[bytes]) -> bool:
        """Take one replay reply; False when it is the end marker (or unusable)."""
        p = self.pubs[pub]
        try:
            seq, payload = split_replay(frames)
        except WireError as exc:
            p.bad += 1
            self.warn_once(("replay", pub), f"{p.name} replay: {exc}; replay abandoned")
            return False
        if seq == END_SEQ:
            return False
        self._take(p, seq, payload, replayed=True)
        return True

    def _take(self, p: PublisherState, seq: int, payload: bytes, replayed: bool) -> None:
        if p.last_seq is not None and seq <= p.last_seq:
            p.duplicates += 1
            return
        try:
            batch = decode_batch(payload)
        except WireError as exc:
            p.bad += 1
            self.warn_once(("payload", p.name), f"{p.name} seq {seq}: {exc}; skipped (further ones counted)")
            batch = None
        if p.last_seq is not None and seq > p.last_seq + 1:
            p.lost += seq - p.last_seq - 1
            self.warn_once(("lost", p.name), f"{p.name}: {seq - p.last_seq - 1} message(s) before seq {seq} lost "
                                              "(no replay filled the gap); further ones counted in lost_messages")
        if p.first_seq is None:
            p.first_seq = seq
        p.last_seq = seq
        p.messages += 1
        p.replayed += replayed
        if batch is None:
            return
        for tag in batch.unknown:
            n = self.unknown_tags.get(tag, 0)
            self.unknown_tags[tag] = n + 1
            if not n:
                self.warn(f"{p.name} seq {seq}: unknown event type {tag!r}; skipped (further ones counted)")
        for kind, text in batch.bad:
            n = self.bad_events.get(kind, 0)
            self.bad_events[kind] = n + 1
            if not n:
                self.warn(f"{p.name} seq {seq}: {text}; that event skipped, the rest of its batch taken "
                          "(further ones counted)")
        if batch.dp_rank is not None:
            p.dp_ranks.add(batch.dp_rank)
        for ev in batch.events:
            self.block_events += len(ev.hashes)
        self.mapper.feed(p.name, batch)

    def facts(self) -> dict[str, Any]:
        c = self.mapper.counts
        return {
            "publishers": len(self.pubs),
            "messages": sum(p.messages for p in self.pubs),
            "block_events": self.block_events,
            "gaps_filled": sum(p.replayed for p in self.pubs),
            "lost_messages": sum(p.lost for p in self.pubs),
            "duplicate_messages": sum(p.duplicates for p in self.pubs),
            "bad_messages": sum(p.bad for p in self.pubs),
            "wrong_topic_messages": sum(p.wrong_topic for p in self.pubs),
            "unknown_event_types": dict(self.unknown_tags),
            "bad_events": dict(self.bad_events),
            "unknown_media": dict(self.mapper.unknown_media),
            "stored_blocks": dict(c["stored_blocks"]),
            "removed_blocks": dict(c["removed_blocks"]),
            "all_blocks_cleared": c["cleared"],
            "repeat_stores": c["repeat_stores"],
            "removes_of_absent_blocks": c["removes_of_absent_blocks"],
            "placeholder_stores": c["placeholder_stores"],
            "placeholder_stores_default_size": c["placeholder_stores_default_size"],
            "objects": c["objects"],
        }
