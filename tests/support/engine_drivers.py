"""Simulated KV caches that publish through vLLM's and SGLang's own event code (tests/support/engine_events.py).

Each driver is one engine instance (a data-parallel rank): a cache of GPU, CPU and storage media with LRU
eviction, fed by conversations (request chains with LoRA adapters, cache salts and session ids) and
publishing one batch per scheduler step through the engine's real ``ZmqEventPublisher`` (made by its
``EventPublisherFactory``, DP rank r on port+r, with the replay ROUTER). ``drop`` makes chosen sequence
numbers vanish on the live socket only (they stay in the publisher's replay buffer), so a capture fills
them from the real replay socket; a capture started after some steps joins late the same way.

What the cache did is kept in :class:`Truth` independently of how kvbed maps events: an object is a
(instance, group, block) from its first copy in any medium until its last copy goes; it counts copies
made per tier, evicts (a copy goes, another stays) and deletes (the last copy goes) per tier, and each
object's tenant (cache salt) and scope (instance plus LoRA name).

* :class:`VllmDriver` (vLLM 0.34): block hashes are 32-byte SHA-256 chains over parent, tokens and the
  request's extra keys (LoRA, cache salt on the first block), extra keys published through the wheel's
  ``to_event_extra_keys``; each KV cache group (hybrid: 0 = full attention, 1 = sliding window keeping the
  last ``window_blocks`` of a chain) publishes every hash with its ``group_idx``; the offloading connector
  stores to CPU and to STORAGE (locality LOCAL or REMOTE per conversation) with vLLM's default placeholder
  payload (``block_size`` 0, no tokens, no parent) unless ``self_describing``; ``AllBlocksCleared``
  (reset_prefix_cache) empties the GPU pool.
* :class:`SglangDriver` (SGLang 0.5.23): radix nodes of ``page_size``-token pages recorded with the wheel's
  ``KVCacheEventRecorder`` (GPU stores, GPU evictions of leaf nodes after a write-back to the host pool
  ``CPU_PINNED``, host evictions), cache salts and session ids on the nodes' keys, ``AllBlocksCleared``
  (radix reset) emptying GPU and host pool.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import random
import socket
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from tests.support import engine_events

GPU, CPU, SSD, REMOTE = "gpu", "cpu", "ssd", "remote"


def free_port_run(n: int) -> int:
    """A loopback port p with p..p+n-1 all free (DP rank r publishes on port+r)."""
    rng = random.Random()
    for _ in range(200):
        p = rng.randrange(20000, 60000)
        try:
            socks = []
            for i in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p + i))
            return p
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


@dataclass
class Truth:
    """What the simulated caches did, in kvbed's terms but counted from the cache's own state."""

    residency: dict = field(default_factory=dict)  # (instance, group, block) -> set of tiers
    objects: int = 0
    placed: dict = field(default_factory=dict)  # tier -> copies made (first copy or a further one)
    evicts: dict = field(default_factory=dict)
    deletes: dict = field(default_factory=dict)
    attrs: list = field(default_factory=list)  # per object in order made: (tenant, scope)

    def place(self, key: tuple, tier: str, tenant: str, scope: str) -> bool:
        s = self.residency.setdefault(key, set())
        if tier in s:
            return False
        if not s:
            self.objects += 1
            self.attrs.append((tenant, scope))
        s.add(tier)
        self.placed[tier] = self.placed.get(tier, 0) + 1
        return True

    def remove(self, key: tuple, tier: str) -> None:
        s = self.residency[key]
        s.remove(tier)
        d = self.evicts if s else self.deletes
        d[tier] = d.get(tier, 0) + 1

    def has(self, key: tuple, tier: str) -> bool:
        return tier in self.residency.get(key, ())


class _DroppingSocket:
    """Stands in for a publisher's PUB socket: the sequence numbers in ``drop`` are not sent (the publisher
    still keeps them in its replay buffer, as after a network loss)."""

    def __init__(self, sock: Any, drop: set[int]):
        self._sock, self._drop = sock, set(drop)

    def send_multipart(self, frames, *a, **kw):
        if int.from_bytes(frames[1], "big") in self._drop:
            return None
        return self._sock.send_multipart(frames, *a, **kw)

    def __getattr__(self, name):
        return getattr(self._sock, name)


@dataclass
class Conversation:
    lora: str | None
    salt: str | None
    session: str
    blocks: list = field(default_factory=list)  # block ids (driver-wide), in chain order
    hashes: list = field(default_factory=list)
    locality: str = "LOCAL"


class _Driver:
    engine = ""

    def __init__(self, truth: Truth, instance: str, seed: int, drop: set[int]):
        self.truth, self.instance, self.rng = truth, instance, random.Random(seed)
        self.drop = drop
        self.published = 0
        self.convs: list[Conversation] = []
        self._next_block = 0

    def publish(self, evs: list) -> None:
        self.pub.publish(self.ev.KVEventBatch(ts=time.time(), events=evs))
        self.published += 1

    def close(self) -> None:
        self.pub.shutdown()
        atexit.unregister(self.pub.shutdown)  # SGLang's publisher registers it; once is enough

    def scope(self, conv: Conversation) -> str:
        return self.instance + (f"|lora={conv.lora}" if conv.lora else "")

    def tenant(self, conv: Conversation) -> str:
        return conv.salt or "default"

    def conversation(self) -> Conversation:
        if not self.convs or self.rng.random() < 0.3:
            k = len(self.convs)
            c = Conversation(lora=self.rng.choice([None, None, "sql-lora", "chat-lora"]),
                             salt=self.rng.choice([None, f"tenant-{k % 3}"]), session=f"s{k}",
                             locality=self.rng.choice(["LOCAL", "REMOTE"]))
            self.convs.append(c)
            return c
        return self.rng.choice(self.convs)


class VllmDriver(_Driver):
    engine = "vllm"

    def __init__(self, truth: Truth, port: int, replay_port: int, rank: int = 0, *, seed: int = 0,
                 hybrid: bool = False, self_describing: bool = False, gpu_blocks: int = 24, cpu_blocks: int = 40,
                 storage_every: int = 3, window_blocks: int = 2, drop: set[int] = frozenset(), topic: str = "",
                 block_size: int = 16):
        super().__init__(truth, f"tcp://127.0.0.1:{port + rank}", seed, drop)
        v = engine_events.vllm()
        self.ev, self.extra = v.events, v.to_event_extra_keys
        cfg = v.config.KVEventsConfig(enable_kv_cache_events=True, publisher="zmq", endpoint=f"tcp://*:{port}",
                                      replay_endpoint=f"tcp://*:{replay_port}", topic=topic)
        self.pub = self.ev.EventPublisherFactory.create(cfg, data_parallel_rank=rank)
        self.pub._pub = _DroppingSocket(self.pub._pub, drop)
        self.replay_endpoint = f"tcp://127.0.0.1:{replay_port + rank}"
        self.groups = [("full", None), ("sliding_window", window_blocks * block_size)] if hybrid else [("full", None)]
        self.window = window_blocks
        self.self_describing, self.bs = self_describing, block_size
        self.gpu_cap, self.cpu_cap, self.storage_every = gpu_blocks, cpu_blocks, storage_every
        self.gpu = [OrderedDict() for _ in self.groups]  # per group: block -> conv
        self.cpu: OrderedDict = OrderedDict()  # (group, block) -> conv
        self.storage: OrderedDict = OrderedDict()  # (group, block) -> conv
        self.meta: dict[int, tuple] = {}  # block -> (hash, parent hash, tokens, index in chain, conv)
        self._offloads = 0

    # -------------------------------------------------------------- helpers
    def _key(self, g: int, b: int) -> tuple:
        return (self.instance, g, b)

    def _stored(self, blocks: list[int], g: int, medium: str, placeholder: bool, locality: str | None = None):
        h0, parent, _, i0, conv = self.meta[blocks[0]]
        if placeholder:  # OffloadingEventsTracker._placeholder_stored: one per offload key
            return [self.ev.BlockStored(block_hashes=[self.meta[b][0]], parent_block_hash=None, token_ids=[],
                                        lora_id=None, block_size=0, medium=medium, lora_name=None, group_idx=g,
                                        locality=locality) for b in blocks]
        tagged = []
        for b in blocks:
            idx = self.meta[b][3]
            keys = ([("lora", conv.lora, f"/adapters/{conv.lora}")] if conv.lora else []) + \
                ([("cache_salt", conv.salt)] if idx == 0 and conv.salt else [])
            tagged.append(tuple(keys) if keys else None)
        kind, window = self.groups[g]
        return [self.ev.BlockStored(
            block_hashes=[self.meta[b][0] for b in blocks], parent_block_hash=parent,
            token_ids=[t for b in blocks for t in self.meta[b][2]], block_size=self.bs,
            lora_id=(1 if conv.lora == "sql-lora" else 2) if conv.lora else None, medium=medium,
            lora_name=conv.lora, extra_keys=self.extra(tagged), group_idx=g,
            kv_cache_spec_kind=kind if medium != "GPU" else None,
            kv_cache_spec_sliding_window=window if medium != "GPU" else None, locality=locality,
            session_id=conv.session if medium == "GPU" else None)]

    def _new_block(self, conv: Conversation) -> int:
        b = self._next_block
        self._next_block += 1
        parent = conv.hashes[-1] if conv.hashes else None
        toks = [self.rng.randrange(32000) for _ in range(self.bs)]
        extra = repr((conv.lora, conv.salt if not conv.hashes else None)).encode()
        h = hashlib.sha256((parent or b"") + repr(toks).encode() + extra).digest()
        self.meta[b] = (h, parent, toks, len(conv.blocks), conv)
        conv.blocks.append(b)
        conv.hashes.append(h)
        return b

    def _store_gpu(self, g: int, blocks: list[int], evs: list) -> list[int]:
        """Store the blocks of a chain missing on the GPU in group g, in runs (a run's parent is the block
        before it); returns the blocks stored."""
        run, done = [], []
        for b in blocks + [None]:
            if b is not None and b not in self.gpu[g]:
                run.append(b)
                continue
            if run:
                evs.extend(self._stored(run, g, "GPU", False))
                for r in run:
                    conv = self.meta[r][4]
                    self.truth.place(self._key(g, r), GPU, self.tenant(conv), self.scope(conv))
                    self.gpu[g][r] = conv
                done += run
                run = []
            if b is not None:
                self.gpu[g].move_to_end(b)
        return done

    def _remove(self, g: int, blocks: list[int], medium: str, tier: str, evs: list, locality=None) -> None:
        if not blocks:
            return
        for b in blocks:
            self.truth.remove(self._key(g, b), tier)
        evs.append(self.ev.BlockRemoved(block_hashes=[self.meta[b][0] for b in blocks], medium=medium, group_idx=g,
                                        locality=locality))

    # -------------------------------------------------------------- one scheduler step
    def step(self, clear: bool = False) -> None:
        evs: list = []
        if clear:  # reset_prefix_cache: the GPU pool's blocks are gone, the connector's copies stay
            evs.append(self.ev.AllBlocksCleared())
            for g in range(len(self.groups)):
                for b in self.gpu[g]:
                    self.truth.remove(self._key(g, b), GPU)
                self.gpu[g].clear()
        else:
            conv = self.conversation()
            for _ in range(self.rng.randint(1, 3)):
                self._new_block(conv)
            for g in range(len(self.groups)):
                chain = conv.blocks if g == 0 else conv.blocks[-self.window:]
                stored = self._store_gpu(g, chain, evs)
                if g == 1:  # the sliding window frees what fell out of it
                    old = [b for b in conv.blocks[:-self.window] if b in self.gpu[g]]
                    for b in old:
                        del self.gpu[g][b]
                    self._remove(g, old, "GPU", GPU, evs)
                self._offload(g, stored, evs)
            for g in range(len(self.groups)):
                over = max(0, len(self.gpu[g]) - self.gpu_cap)
                victims = list(self.gpu[g])[:over]
                for b in victims:
                    del self.gpu[g][b]
                self._remove(g, victims, "GPU", GPU, evs)
        self.publish(evs)

    def _offload(self, g: int, blocks: list[int], evs: list) -> None:
        """The OffloadingConnector copies new blocks to CPU; every storage_every-th also to STORAGE."""
        cpu_new = [b for b in blocks if not self.truth.has(self._key(g, b), CPU)]
        if cpu_new:
            evs.extend(self._stored(cpu_new, g, "CPU", not self.self_describing) if self.self_describing
                       else [e for b in cpu_new for e in self._stored([b], g, "CPU", True)])
            for b in cpu_new:
                conv = self.meta[b][4]
                self.truth.place(self._key(g, b), CPU, self.tenant(conv), self.scope(conv))
                self.cpu[(g, b)] = conv
        for b in blocks:
            self._offloads += 1
            if self._offloads % self.storage_every or self.truth.has(self._key(g, b), SSD) \
                    or self.truth.has(self._key(g, b), REMOTE):
                continue
            conv = self.meta[b][4]
            tier = SSD if conv.locality == "LOCAL" else REMOTE
            evs.extend(self._stored([b], g, "STORAGE", not self.self_describing, conv.locality))
            self.truth.place(self._key(g, b), tier, self.tenant(conv), self.scope(conv))
            self.storage[(g, b)] = conv
        over = max(0, len(self.cpu) - self.cpu_cap)
        victims = list(self.cpu)[:over]
        for gb in victims:
            del self.cpu[gb]
        for gg in sorted({gb[0] for gb in victims}):
            self._remove(gg, [b for x, b in victims if x == gg], "CPU", CPU, evs)
        if len(self.storage) > 2 * self.cpu_cap:  # storage frees its oldest (per locality, as the tiers do)
            (gg, b), conv = next(iter(self.storage.items()))
            del self.storage[(gg, b)]
            self._remove(gg, [b], "STORAGE", SSD if conv.locality == "LOCAL" else REMOTE, evs, conv.locality)



# ------------------------------------------------------------------ SGLang
class _Key:
    """What KVCacheEventRecorder reads of a radix node's key (sglang's RadixKey): token ids, extra_key,
    cache_salt, is_bigram, len."""

    def __init__(self, token_ids, cache_salt=None, extra_key=None):
        self.token_ids, self.cache_salt, self.extra_key, self.is_bigram = token_ids, cache_salt, extra_key, False

    def __len__(self):
        return len(self.token_ids)

    def __iter__(self):
        return iter(self.token_ids)


class _Node:
    def __init__(self, key, parent, hash_value):
        self.key, self.parent, self.hash_value, self.event_hash_value = key, parent, hash_value, None


class SglangDriver(_Driver):
    engine = "sglang"

    def __init__(self, truth: Truth, port: int, replay_port: int, rank: int = 0, *, seed: int = 0,
                 page_size: int = 16, gpu_nodes: int = 10, host_nodes: int = 16, drop: set[int] = frozenset(),
                 topic: str = ""):
        super().__init__(truth, f"tcp://127.0.0.1:{port + rank}", seed, drop)
        s = engine_events.sglang()
        self.ev, self.medium = s.events, s.events.StorageMedium
        cfg = json.dumps({"publisher": "zmq", "endpoint": f"tcp://*:{port}",
                          "replay_endpoint": f"tcp://*:{replay_port}", "topic": topic})
        self.pub = self.ev.EventPublisherFactory.create(cfg, attn_dp_rank=rank)
        self.pub._pub = _DroppingSocket(self.pub._pub, drop)
        self.replay_endpoint = f"tcp://127.0.0.1:{replay_port + rank}"
        self.rec = s.recorder.KVCacheEventRecorder(enabled=True, page_size=page_size)
        self.page = page_size
        self.root = _Node(_Key([]), None, [])
        self.gpu_cap, self.host_cap = gpu_nodes, host_nodes
        self.gpu: OrderedDict = OrderedDict()  # node -> conv
        self.host: OrderedDict = OrderedDict()
        self.nodes: dict[int, tuple] = {}  # id(node) -> (node, conv, pages)
        self.tails: dict[int, _Node] = {}  # id(conv) -> its last node

    def _node(self, conv: Conversation) -> _Node:
        parent = self.tails.get(id(conv), self.root)
        pages = self.rng.randint(1, 3)
        toks = [self.rng.randrange(32000) for _ in range(pages * self.page)]
        prior = parent.hash_value[-1] if parent.hash_value else None
        node = _Node(_Key(toks, cache_salt=conv.salt), parent,
                     engine_events._sha_pages(toks, prior, self.page))
        self.tails[id(conv)] = node
        self.nodes[id(node)] = (node, conv, pages)
        return node

    def _keys(self, node: _Node) -> list[tuple]:
        _, _, pages = self.nodes[id(node)]
        return [(self.instance, 0, id(node), i) for i in range(pages)]

    def step(self, clear: bool = False) -> None:
        if clear:  # radix cache reset: device and host pool emptied
            self.rec.record_all_cleared()
            for node in list(self.gpu):
                for k in self._keys(node):
                    self.truth.remove(k, GPU)
            for node in list(self.host):
                for k in self._keys(node):
                    self.truth.remove(k, CPU)
            self.gpu.clear()
            self.host.clear()
            self.tails.clear()  # later requests start fresh chains
        else:
            conv = self.conversation()
            parent = self.tails.get(id(conv))
            if parent is not None and parent not in self.gpu:  # its prefix left the GPU: a new chain
                self.tails.pop(id(conv))
            node = self._node(conv)
            self.rec.record_store(node, session_id=conv.session)
            for k in self._keys(node):
                self.truth.place(k, GPU, self.tenant(conv), self.instance)
            self.gpu[node] = conv
            while len(self.gpu) > self.gpu_cap:  # evict the least recent leaf, written back to the host first
                victim = next(n for n in self.gpu if not any(c.parent is n for c in self.gpu))
                vconv = self.gpu.pop(victim)
                if victim not in self.host:
                    self.rec.record_store(victim, medium=self.medium.CPU, session_id=vconv.session)
                    for k in self._keys(victim):
                        self.truth.place(k, CPU, self.tenant(vconv), self.instance)
                    self.host[victim] = vconv
                self.rec.record_remove(victim)
                for k in self._keys(victim):
                    self.truth.remove(k, GPU)
            while len(self.host) > self.host_cap:
                victim, _ = self.host.popitem(last=False)
                self.rec.record_remove(victim, medium=self.medium.CPU)
                for k in self._keys(victim):
                    self.truth.remove(k, CPU)
        self.publish(self.rec.take())

