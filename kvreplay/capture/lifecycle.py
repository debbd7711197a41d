"""Block events of engine instances -> lifecycle events (the conventions of kvreplay.tiers.sim).

Per instance, a block hash names one object while some tier holds a copy of it:

* ``BlockStored`` in a medium: a hash with no live object gets a new id (dense from 1) with
  ``create`` + ``commit`` in that tier; a live object gets ``persist`` in a tier it is not in yet (a
  repeat store in the same tier is counted, not emitted). Size = block tokens x bytes per token;
  the parent is the previous block of the event, or the object of ``parent_block_hash``.
* ``BlockRemoved``: ``evict`` of that tier's copy, or ``delete`` when it was the object's last copy
  (the object ends; a later store of the hash makes a new object).
* ``AllBlocksCleared``: the same for every copy in its medium (GPU when it names none) of the instance.

Each event's ``content_key`` is the block hash itself (format v2: what llm-d and Dynamo index on), so a
block removed and stored again is a new object with the same key. Gap, marked: engines with several KV
cache groups (vLLM's ``group_idx``, hybrid models) publish a hash per group; ``group_idx`` is not decoded
(:mod:`kvreplay.capture.wire`), so one hash in two groups is one object and one key, as before v2.

An event's ``token_ids`` are not used: its objects are its block hashes, each of ``block_size`` tokens (checked
positive when decoded), so a token list that does not match the hashes changes no object or size (and
vLLM's CPU offload stores carry no tokens at all): the request importers' "ids cannot cover the input"
hole (kvreplay.importers.base) has no counterpart here.

Scope = instance (plus LoRA name and the first block's extra keys, when present); tenant = SGLang's
cache_salt; session_id = SGLang's session id (ints kept, strings numbered from 0 in order seen).
Timestamps are the engine's batch times, clamped to never go backwards across publishers.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from kvreplay.capture.wire import CLEARED, REMOVED, STORED, Batch
from kvreplay.schema import (NO_ID, OP_COMMIT, OP_CREATE, OP_DELETE, OP_EVICT, OP_PERSIST, TIER, TIERS, EventBatch,
                             make_batch)
from kvbed.core.errors import KvbedError

#: engine medium names -> kvbed tiers (vLLM GPU/CPU/FS/OBJ/STORAGE; SGLang GPU/CPU_TIER1/CPU_TIER2,
#: CPU_PINNED/DISK/EXTERNAL); ``--medium NAME=TIER`` overrides
MEDIA = {"GPU": "gpu", "CPU": "cpu", "CPU_TIER1": "cpu", "CPU_PINNED": "cpu", "CPU_TIER2": "cxl",
         "FS": "ssd", "DISK": "ssd", "STORAGE": "ssd", "OBJ": "remote", "EXTERNAL": "remote"}


def medium_map(overrides: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    """The default medium table with ``NAME=TIER`` overrides applied."""
    out = dict(MEDIA)
    for spec in overrides:
        name, sep, tier = spec.partition("=")
        if not sep or not name.strip() or tier.strip() not in TIER:
            raise KvbedError(f"--medium {spec!r}: expected NAME=TIER with TIER one of {', '.join(TIERS)}")
        out[name.strip().upper()] = tier.strip()
    return out


class LifecycleMapper:
    """Stateful: feed decoded batches per instance in sequence order, take EventBatches out."""

    def __init__(self, bytes_per_token: int, tokens_per_block: int, media: dict[str, str] | None = None):
        self.bpt = bytes_per_token
        self.default_block = tokens_per_block
        self.media = {k.upper(): TIER[v] for k, v in (media or MEDIA).items()}
        self.tenants: list[str] = ["default"]
        self.scopes: list[str] = []
        self._tenant_code: dict[str, int] = {"default": 0}
        self._scope_code: dict[tuple, int] = {}
        self._session_code: dict[str, int] = {}
        self._ids: dict[str, dict[int, int]] = {}  # instance -> block hash -> object id (last one made)
        self._mask: list[int] = [0]  # per object id: bit t set while tier t holds a copy
        self._obj: list[tuple] = [(0, 0, 0, 0, 0)]  # per object id: (nbytes, parent, tenant, scope, key) when made
        self._rows: list[tuple] = []
        self._last_ts = 0
        self.unknown_media: dict[str, int] = {}
        self.counts = {"stored_blocks": {}, "removed_blocks": {}, "cleared": 0, "repeat_stores": 0,
                       "removes_of_absent_blocks": 0, "objects": 0}

    # ------------------------------------------------------------------ helpers
    def _tier(self, medium: Any) -> int | None:
        if medium is None:
            return TIER["gpu"]
        t = self.media.get(str(medium).upper())
        if t is None:
            self.unknown_media[str(medium)] = self.unknown_media.get(str(medium), 0) + 1
        return t

    def _scope(self, instance: str, lora: str | None, extra: Any) -> int:
        ex = None
        if isinstance(extra, list) and extra and extra[0] is not None:
            ex = hashlib.sha1(repr(extra[0]).encode()).hexdigest()[:8]
        key = (instance, lora, ex)
        code = self._scope_code.get(key)
        if code is None:
            code = self._scope_code[key] = len(self.scopes)
            self.scopes.append(instance + (f"|lora={lora}" if lora else "") + (f"|extra={ex}" if ex else ""))
        return code

    def _tenant(self, salt: str | None) -> int:
        if salt is None:
            return 0
        code = self._tenant_code.get(salt)
        if code is None:
            code = self._tenant_code[salt] = len(self.tenants)
            self.tenants.append(salt)
        return code

    def _session(self, s: Any) -> int:
        if s is None:
            return NO_ID
        if isinstance(s, int) and 0 <= s < (1 << 63):
            return s
        key = str(s)
        code = self._session_code.get(key)
        if code is None:
            code = self._session_code[key] = len(self._session_code)
        return code

    @property
    def session_names(self) -> dict[str, int]:
        return dict(self._session_code)

    # ------------------------------------------------------------------ mapping
    def feed(self, instance: str, batch: Batch) -> int:
        """Map one batch of ``instance``; returns the lifecycle events it produced."""
        ts = max(int(batch.ts * 1e9), self._last_ts)
        self._last_ts = ts
        ids = self._ids.get(instance)
        if ids is None:
            ids = self._ids[instance] = {}
        rows, mask, obj = self._rows, self._mask, self._obj
        before = len(rows)
        c = self.counts
        for ev in batch.events:
            tier = self._tier(ev.medium) if ev.kind != CLEARED or ev.medium is not None else TIER["gpu"]
            if tier is None:
                continue
            bit = 1 << tier
            tname = TIERS[tier]
            if ev.kind == STORED:
                bs = ev.block_size or self.default_block
                nbytes = bs * self.bpt
                tenant = self._tenant(ev.salt)
                scope = self._scope(instance, ev.lora, ev.extra)
                sess = self._session(ev.session)
                parent = 0 if ev.parent is None else ids.get(ev.parent, 0)
                stored = 0
                for h in ev.hashes:
                    oid = ids.get(h)
                    if oid is None or mask[oid] == 0:
                        oid = len(mask)
                        ids[h] = oid
                        mask.append(bit)
                        key = _signed(h)
                        obj.append((nbytes, parent, tenant, scope, key))
                        rows.append((ts, OP_CREATE, oid, parent, tier, nbytes, bs, tenant, scope, sess, key))
                        rows.append((ts, OP_COMMIT, oid, parent, tier, nbytes, bs, tenant, scope, sess, key))
                        stored += 1
                    elif mask[oid] & bit:
                        c["repeat_stores"] += 1
                    else:
                        mask[oid] |= bit
                        nb, par, ten, sco, key = obj[oid]
                        rows.append((ts, OP_PERSIST, oid, par, tier, nb, nb // self.bpt, ten, sco, sess, key))
                        stored += 1
                    parent = oid
                d = c["stored_blocks"]
                d[tname] = d.get(tname, 0) + stored
            else:
                if ev.kind == REMOVED:
                    hashes = ev.hashes
                else:
                    c["cleared"] += 1
                    hashes = [h for _, h in sorted((o, h) for h, o in ids.items() if mask[o] & bit)]  # in id order
                sess = self._session(ev.session)
                removed = 0
                for h in hashes:
                    oid = ids.get(h)
                    if oid is None or not mask[oid] & bit:
                        c["removes_of_absent_blocks"] += 1
                        continue
                    m = mask[oid] & ~bit
                    mask[oid] = m
                    nb, par, ten, sco, key = obj[oid]
                    rows.append((ts, OP_EVICT if m else OP_DELETE, oid, par, tier, nb, nb // self.bpt, ten, sco, sess,
                                 key))
                    removed += 1
                d = c["removed_blocks"]
                d[tname] = d.get(tname, 0) + removed
        c["objects"] = len(mask) - 1
        return len(rows) - before

    def pending(self) -> int:
        return len(self._rows)

    def take(self) -> EventBatch:
        """The events mapped since the last take, as one batch (sorted: times never go backwards)."""
        rows, self._rows = self._rows, []
        if not rows:
            return EventBatch.empty()
        a = np.array(rows, dtype=np.int64)
        return make_batch(ts_ns=a[:, 0], op=a[:, 1], obj_id=a[:, 2], parent_id=a[:, 3], tier=a[:, 4],
                          nbytes=a[:, 5], ntokens=a[:, 6], tenant=a[:, 7], scope=a[:, 8], session_id=a[:, 9],
                          content_key=a[:, 10].view(np.uint64))


def _signed(h: int) -> int:
    """A uint64 block hash as the int64 of the same bits (the rows are an int64 array; the column views it back)."""
    return h - (1 << 64) if h >= 1 << 63 else h
