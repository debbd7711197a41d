"""The capture's block-event mapping in plain Python, as kvbed had it before the per-block loop became a numba
kernel (kvreplay/capture/mapkernel.py): an independent reference for tests/kvreplay/capture/test_mapkernel.py.
The medium table, clear media, key mix, the extra-keys rule and the naming helpers (tier, scope, tenant,
session codes) are the product's own (shared, not re-derived)."""

from __future__ import annotations

from typing import Any

import numpy as np

from kvreplay.capture.lifecycle import CLEAR_MEDIA, GROUP_MIX, MEDIA, U64, LifecycleMapper, _extra_lora_salt
from kvreplay.capture.wire import CLEARED, STORED, Batch
from kvreplay.schema import (NO_ID, OP_COMMIT, OP_CREATE, OP_DELETE, OP_EVICT, OP_PERSIST, TIER, TIERS, EventBatch,
                             make_batch)

I64_MAX = (1 << 63) - 1
NCOLS = 11


class ReferenceMapper:
    """kvreplay.capture.lifecycle.LifecycleMapper as it was before its per-block loop became a numba kernel: the
    same rules, one Python dict lookup per block."""

    def __init__(self, bytes_per_token: int, tokens_per_block: int, media: dict[str, str] | None = None,
                 engine: str = "vllm"):
        self.bpt = bytes_per_token
        self.default_block = tokens_per_block
        self.media = {k.upper(): TIER[v] for k, v in (media or MEDIA).items()}
        clear = CLEAR_MEDIA.get(engine, CLEAR_MEDIA["vllm"])
        self.clear_tiers = tuple(dict.fromkeys(t for t in (self.media.get(m) for m in clear) if t is not None))
        self.tenants: list[str] = ["default"]
        self.scopes: list[str] = []
        self._tenant_code: dict[str, int] = {"default": 0}
        self._scope_code: dict[tuple, int] = {}
        self._session_code: dict[str, int] = {}
        self._tier_of: dict[tuple, int | None] = {}
        self._ids: dict[tuple, dict[int, int]] = {}  # (instance, group) -> block hash -> object id (last one made)
        self._groups: dict[str, list] = {}  # instance -> its groups, in order seen
        self._mask: list[int] = [0]  # per object id: bit t set while tier t holds a copy
        self._obj: list[tuple] = [(0, 0, 0, 0, 0)]  # per object id: (nbytes, parent, tenant, scope, key) when made
        self._rows: list[int] = []  # NCOLS ints per lifecycle event, flat (one numpy conversion per take)
        self._last_ts = 0
        self.unknown_media: dict[str, int] = {}
        self.counts = {"stored_blocks": {}, "removed_blocks": {}, "cleared": 0, "repeat_stores": 0,
                       "removes_of_absent_blocks": 0, "objects": 0, "placeholder_stores": 0,
                       "placeholder_stores_default_size": 0}

    # the naming helpers (media -> tier, scope, tenant and session codes) are the product's own: the kernel
    # replaced the per-block mapping, not these
    _tier = LifecycleMapper._tier
    _scope = LifecycleMapper._scope
    _tenant = LifecycleMapper._tenant
    _session = LifecycleMapper._session
    session_names = LifecycleMapper.session_names

    def _ids_of(self, instance: str, group: int) -> dict[int, int]:
        ids = self._ids.get((instance, group))
        if ids is None:
            ids = self._ids[(instance, group)] = {}
            self._groups.setdefault(instance, []).append(group)
        return ids

    # ------------------------------------------------------------------ mapping
    def feed(self, instance: str, batch: Batch) -> int:
        """Map one batch of ``instance``; returns the lifecycle events it produced."""
        ts = max(int(batch.ts * 1e9), self._last_ts)
        self._last_ts = ts
        rows = self._rows
        before = len(rows)
        c = self.counts
        for ev in batch.events:
            if ev.kind == CLEARED:
                c["cleared"] += 1
                tiers = self.clear_tiers if ev.medium is None else (self._tier(ev.medium, ev.locality),)
                for tier in tiers:
                    if tier is None:
                        continue
                    for g in self._groups.get(instance, ()):
                        ids = self._ids[(instance, g)]
                        bit = 1 << tier
                        mask = self._mask
                        hashes = [h for _, h in sorted((o, h) for h, o in ids.items() if mask[o] & bit)]  # id order
                        self._remove(ids, hashes, tier, None, ts)
                continue
            tier = self._tier(ev.medium, ev.locality)
            if tier is None:
                continue
            ids = self._ids_of(instance, ev.group)
            if ev.kind == STORED:
                self._store(instance, ids, ev, tier, ts)
            else:
                self._remove(ids, ev.hashes, tier, ev.session, ts)
        c["objects"] = len(self._mask) - 1
        return (len(rows) - before) // NCOLS

    def _store(self, instance: str, ids: dict, ev: Any, tier: int, ts: int) -> None:
        add, mask, obj, c = self._rows.extend, self._mask, self._obj, self.counts
        bit = 1 << tier
        bs = ev.block_size
        placeholder = bs == 0
        if placeholder:
            c["placeholder_stores"] += len(ev.hashes)
        elif bs is None:
            bs = self.default_block
        parent = 0 if ev.parent is None else ids.get(ev.parent, 0)
        chain = parent
        if not chain and ev.parent is not None:  # a group that did not hold the parent (sliding window): the
            for g in self._groups.get(instance, ()):  # request chain is the same in every group
                chain = self._ids[(instance, g)].get(ev.parent, 0)
                if chain:
                    break
        lora, salt = ev.lora, ev.salt
        extra = ev.extra
        if extra and isinstance(extra, list) and (lora is None or (salt is None and ev.parent is None)):
            lora, salt = _extra_lora_salt(extra, lora, salt, ev.parent is None)
        if chain and (lora is None or salt is None):  # a chain goes on: its tenant and scope, unless named here
            _, _, p_ten, p_sco, _ = obj[chain]
            tenant = self._tenant(salt) if salt is not None else p_ten
            scope = self._scope(instance, lora) if lora is not None else p_sco
        else:
            tenant = self._tenant(salt)
            scope = self._scope(instance, lora)
        nbytes = bs * self.bpt if not placeholder else 0
        sess = self._session(ev.session)
        mix = (ev.group * GROUP_MIX) & U64
        stored = 0
        for h in ev.hashes:
            oid = ids.get(h)
            if oid is None or mask[oid] == 0:
                if placeholder:  # geometry (and chain) of the block's device-side store, if it was seen
                    if oid is not None:
                        nb, _, o_ten, o_sco, _ = obj[oid]
                        o_bs = nb // self.bpt
                    else:
                        c["placeholder_stores_default_size"] += 1
                        o_bs, o_ten, o_sco = self.default_block, tenant, scope
                        nb = o_bs * self.bpt
                    row_bs, row_nb, row_ten, row_sco = o_bs, nb, o_ten, o_sco
                else:
                    row_bs, row_nb, row_ten, row_sco = bs, nbytes, tenant, scope
                oid = len(mask)
                ids[h] = oid
                mask.append(bit)
                key = h ^ mix
                if key > I64_MAX:  # the rows are int64: the uint64 key as the int64 of the same bits
                    key -= 1 << 64
                obj.append((row_nb, parent, row_ten, row_sco, key))
                add((ts, OP_CREATE, oid, parent, tier, row_nb, row_bs, row_ten, row_sco, sess, key,
                     ts, OP_COMMIT, oid, parent, tier, row_nb, row_bs, row_ten, row_sco, sess, key))
                stored += 1
            elif mask[oid] & bit:
                c["repeat_stores"] += 1
            else:
                mask[oid] |= bit
                nb, par, ten, sco, key = obj[oid]
                add((ts, OP_PERSIST, oid, par, tier, nb, nb // self.bpt, ten, sco, sess, key))
                stored += 1
            parent = oid
        d = c["stored_blocks"]
        tname = TIERS[tier]
        d[tname] = d.get(tname, 0) + stored

    def _remove(self, ids: dict, hashes: list, tier: int, session: Any, ts: int) -> None:
        add, mask, obj, c = self._rows.extend, self._mask, self._obj, self.counts
        bit = 1 << tier
        sess = self._session(session)
        removed = 0
        for h in hashes:
            oid = ids.get(h)
            if oid is None or not mask[oid] & bit:
                c["removes_of_absent_blocks"] += 1
                continue
            m = mask[oid] & ~bit
            mask[oid] = m
            nb, par, ten, sco, key = obj[oid]
            add((ts, OP_EVICT if m else OP_DELETE, oid, par, tier, nb, nb // self.bpt, ten, sco, sess, key))
            removed += 1
        d = c["removed_blocks"]
        tname = TIERS[tier]
        d[tname] = d.get(tname, 0) + removed

    def pending(self) -> int:
        return len(self._rows) // NCOLS

    def take(self) -> EventBatch:
        """The events mapped since the last take, as one batch (sorted: times never go backwards)."""
        rows, self._rows = self._rows, []
        if not rows:
            return EventBatch.empty()
        a = np.fromiter(rows, dtype=np.int64, count=len(rows)).reshape(-1, NCOLS)
        return make_batch(ts_ns=a[:, 0], op=a[:, 1], obj_id=a[:, 2], parent_id=a[:, 3], tier=a[:, 4],
                          nbytes=a[:, 5], ntokens=a[:, 6], tenant=a[:, 7], scope=a[:, 8], session_id=a[:, 9],
                          content_key=a[:, 10].view(np.uint64))
