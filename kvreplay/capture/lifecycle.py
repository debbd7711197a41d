"""Block events of engine instances -> lifecycle events (the conventions of kvreplay.tiers.sim).

Per instance and KV cache group, a block hash names one object while some tier holds a copy of it:

* ``BlockStored`` in a medium: a hash with no live object gets a new id (dense from 1) with
  ``create`` + ``commit`` in that tier; a live object gets ``persist`` in a tier it is not in yet (a
  repeat store in the same tier is counted, not emitted). Size = block tokens x bytes per token;
  the parent is the previous block of the event, or the object of ``parent_block_hash``.
  A placeholder store (``block_size`` 0, no tokens: vLLM's offloaded chunks with its default events)
  takes its size, tenant and scope from the block's device-side store (the live object, else the
  last object of that hash), else the model's default block (counted).
* ``BlockRemoved``: ``evict`` of that tier's copy, or ``delete`` when it was the object's last copy
  (the object ends; a later store of the hash makes a new object).
* ``AllBlocksCleared``: the same for every copy in its medium, or when it names none in the media the
  engine's reset empties (:data:`CLEAR_MEDIA`: vLLM's prefix-cache reset the GPU pool only, SGLang's
  radix-cache reset the GPU and the host pool), every group of the instance. A store after it makes
  a new object (the cleared ones ended, unless another tier still holds them).

KV cache groups (vLLM's ``group_idx``: hybrid models publish each hash once per group, full and
sliding-window attention) are part of an object's identity: the same hash in two groups is two
objects, each sized by its own event. Gap, marked: a group holds only its layers' KV, but each
group's block is sized with the model's full bytes per token (the events do not say how the layers
split), so a hybrid model's bytes are counted once per group.

Each event's ``content_key`` is the block hash itself (format v2: what llm-d and Dynamo index on); in
group g > 0 it is the hash XOR ``g * 0x9E3779B97F4A7C15`` (mod 2^64), so the same hash in two groups
is two keys while a single-group stream keeps the engine's hashes unchanged. A block removed and
stored again is a new object with the same key.

An event's ``token_ids`` are not used: its objects are its block hashes, each of ``block_size`` tokens, so
a token list that does not match the hashes changes no object or size: the request importers' "ids cannot
cover the input" hole (kvreplay.importers.base) has no counterpart here.

Scope and tenant are per request chain: a store that continues a chain (its ``parent_block_hash`` or
previous block is a known object) inherits the chain's tenant and scope unless the event names its own.
Scope = instance plus the LoRA name (``lora_name``, else ``id:<lora_id>``, else the name vLLM puts
first in each block's ``extra_keys``); tenant = the cache salt: SGLang's ``cache_salt``, or vLLM's, which
only the first block of a chain carries (the string after the LoRA name in that block's extra keys).
session_id = the event's session id (ints kept, strings numbered from 0 in order seen).
Timestamps are the engine's batch times, clamped to never go backwards across publishers.

Speed: what is per event (tier, KV cache group, size, named tenant and scope, session) is resolved in Python,
one pass per batch; the per-block loop is one call of the numba kernel
:func:`kvreplay.capture.mapkernel.map_events` per batch (tests/kvreplay/capture/test_mapkernel.py holds it to
the plain-Python mapper it replaced). ``python scripts/bench_capture.py`` measures it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvreplay.capture import mapkernel as mk
from kvreplay.capture.wire import CLEARED, STORED, Batch
from kvreplay.schema import NO_ID, TIER, TIERS, EventBatch, make_batch
from kvbed.core.errors import KvbedError

#: engine medium names -> kvbed tiers. vLLM 0.34: GPU, CPU, STORAGE (file and object-store tiers, told
#: apart by ``locality``: NAME@LOCALITY entries come first); SGLang 0.5: GPU, CPU_PINNED, DISK, EXTERNAL;
#: older names (vLLM FS/OBJ, SGLang CPU_TIER1/CPU_TIER2) still read. ``--medium NAME=TIER`` overrides
#: (a NAME without @ also replaces its NAME@LOCALITY entries).
MEDIA = {"GPU": "gpu", "CPU": "cpu", "CPU_TIER1": "cpu", "CPU_PINNED": "cpu", "CPU_TIER2": "cxl",
         "FS": "ssd", "DISK": "ssd", "STORAGE": "ssd", "STORAGE@LOCAL": "ssd", "STORAGE@REMOTE": "remote",
         "OBJ": "remote", "EXTERNAL": "remote"}

#: media an ``AllBlocksCleared`` without a medium empties, per engine (vLLM's reset_prefix_cache frees the
#: GPU block pool only; SGLang's radix cache reset also empties the HiCache host pool)
CLEAR_MEDIA = {"vllm": ("GPU",), "sglang": ("GPU", "CPU_PINNED")}

GROUP_MIX = 0x9E3779B97F4A7C15
U64 = (1 << 64) - 1
I64_MAX = (1 << 63) - 1


def medium_map(overrides: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    """The default medium table with ``NAME=TIER`` overrides applied."""
    out = dict(MEDIA)
    for spec in overrides:
        name, sep, tier = spec.partition("=")
        if not sep or not name.strip() or tier.strip() not in TIER:
            raise KvbedError(f"--medium {spec!r}: expected NAME=TIER with TIER one of {', '.join(TIERS)}")
        name = name.strip().upper()
        if "@" not in name:
            for k in [k for k in out if k.startswith(name + "@")]:
                del out[k]
        out[name] = tier.strip()
    return out


class LifecycleMapper:
    """Stateful: feed decoded batches per instance in sequence order, take EventBatches out.

    Per event (tier, table, size, named tenant and scope, session) in Python; the per-block loop is
    :func:`kvreplay.capture.mapkernel.map_events`, one call per batch."""

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
        self._place: dict[tuple, int] = {}  # (instance, group) -> table place
        self._groups: dict[str, list] = {}  # instance -> its groups, in order seen
        self._places: dict[str, np.ndarray] = {}  # instance -> its groups' places, in that order
        self._known: dict[str, dict] = {}  # instance -> (medium, locality, group) -> (tier, place, name, mix)
        self._st = mk.new_state()
        self._last_ts = 0
        self.unknown_media: dict[str, int] = {}
        self.counts = {"stored_blocks": {}, "removed_blocks": {}, "cleared": 0, "repeat_stores": 0,
                       "removes_of_absent_blocks": 0, "objects": 0, "placeholder_stores": 0,
                       "placeholder_stores_default_size": 0}

    # ------------------------------------------------------------------ helpers
    def _tier(self, medium: Any, locality: str | None) -> int | None:
        k = (medium, locality)
        if k in self._tier_of:
            t = self._tier_of[k]
        else:
            if medium is None:
                t = TIER["gpu"]
            else:
                name = str(medium).upper()
                t = self.media.get(f"{name}@{locality}") if locality else None
                if t is None:
                    t = self.media.get(name)
            self._tier_of[k] = t
        if t is None:
            name = str(medium) + (f"@{locality}" if locality else "")
            self.unknown_media[name] = self.unknown_media.get(name, 0) + 1
        return t

    def _scope(self, instance: str, lora: str | None) -> int:
        key = (instance, lora)
        code = self._scope_code.get(key)
        if code is None:
            code = self._scope_code[key] = len(self.scopes)
            self.scopes.append(instance + (f"|lora={lora}" if lora else ""))
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

    def _place_of(self, instance: str, group: int) -> int:
        p = self._place.get((instance, group))
        if p is None:
            p = self._place[(instance, group)] = len(self._place)
            self._groups.setdefault(instance, []).append(group)
            self._places[instance] = np.array([self._place[(instance, g)] for g in self._groups[instance]],
                                              np.int64)
        return p

    # ------------------------------------------------------------------ mapping
    def feed(self, instance: str, batch: Batch) -> int:
        """Map one batch of ``instance``; returns the lifecycle events it produced."""
        ts = max(int(batch.ts * 1e9), self._last_ts)
        self._last_ts = ts
        st = self._st
        before = int(st.cnt[mk.C_ROWS])
        c = self.counts
        stored_d, removed_d = c["stored_blocks"], c["removed_blocks"]
        known = self._known.get(instance)
        if known is None:
            known = self._known[instance] = {}
        rows: list = []  # per event: the EventCols columns but h0, hs and places
        hs: list = []
        loras: list = []  # per event: the LoRA name of a store that names one (its scope may need making)
        for ev in batch.events:
            kind = ev.kind
            if kind == CLEARED:
                self._run(instance, rows, hs, loras, ts)
                rows, hs, loras = [], [], []
                c["cleared"] += 1
                tiers = self.clear_tiers if ev.medium is None else (self._tier(ev.medium, ev.locality),)
                for tier in tiers:
                    if tier is None:
                        continue
                    for g in self._groups.get(instance, ()):
                        self._clear(instance, self._place[(instance, g)], tier, ts)
                continue
            k = (ev.medium, ev.locality, ev.group)
            tp = known.get(k)
            if tp is None:
                tier = self._tier(ev.medium, ev.locality)
                if tier is None:
                    continue  # counted as an unknown medium, each time
                g = ev.group
                mix = (g * GROUP_MIX) & U64
                tp = known[k] = (tier, self._place_of(instance, g), TIERS[tier],
                                 mix - (1 << 64) if mix > I64_MAX else mix)
            tier, place, tname, mix = tp
            s = ev.session
            sess = NO_ID if s is None else self._session(s)
            n0 = len(hs)
            hs += ev.hashes
            if kind != STORED:
                if tname not in removed_d:
                    removed_d[tname] = 0
                rows.append((mk.REMOVED_K, place, tier, n0, 0, 0, 0, -1, -1, sess, mix))
                loras.append(None)
                continue
            if tname not in stored_d:
                stored_d[tname] = 0
            b = ev.block_size
            if b == 0:
                c["placeholder_stores"] += len(ev.hashes)
            elif b is None:
                b = self.default_block
            parent = ev.parent
            lora, salt = ev.lora, ev.salt
            extra = ev.extra
            if extra and isinstance(extra, list) and (lora is None or (salt is None and parent is None)):
                lora, salt = _extra_lora_salt(extra, lora, salt, parent is None)
            tenant = -1 if salt is None else self._tenant(salt)
            scope = -1
            if lora is not None:
                code = self._scope_code.get((instance, lora))
                scope = mk.NEEDS_SCOPE if code is None else code
            if parent is None:
                rows.append((mk.STORED_K, place, tier, n0, b, 0, 0, tenant, scope, sess, mix))
            else:
                rows.append((mk.STORED_K, place, tier, n0, b, parent - (1 << 64) if parent > I64_MAX else parent, 1,
                             tenant, scope, sess, mix))
            loras.append(lora)
        self._run(instance, rows, hs, loras, ts)
        st = self._st
        c["objects"] = int(st.cnt[mk.C_OBJS])
        c["repeat_stores"] = int(st.cnt[mk.C_REPEAT])
        c["removes_of_absent_blocks"] = int(st.cnt[mk.C_ABSENT])
        c["placeholder_stores_default_size"] = int(st.cnt[mk.C_DEFAULT_SIZE])
        return int(st.cnt[mk.C_ROWS]) - before

    def _run(self, instance: str, rows: list, hs: list, loras: list, ts: int) -> None:
        """Map one instance's events (``rows`` as ``feed`` makes them, no clears) through the kernel."""
        if not rows:
            return
        n = len(rows)
        a = np.array(rows, np.int64).T.copy()  # one contiguous column per field
        h0 = np.empty(n + 1, np.int64)
        h0[:n] = a[3]
        h0[n] = len(hs)
        st = self._st = mk.ensure(self._st, len(hs))
        code = self._scope_code.get((instance, None))
        st.default_scope[0] = mk.NEEDS_SCOPE if code is None else code
        scope = a[8]
        cols = mk.EventCols(ts, a[0], a[1], a[2], h0, np.array(hs, np.uint64), a[4], a[5], a[6], a[7], scope, a[9],
                            a[10], self._places[instance])
        start = 0
        while True:
            start = mk.map_events(cols, st, start, self.bpt, self.default_block)
            if start == mk.ALL_DONE:
                break
            # a store whose scope is made now, in the order the stores ask for scopes
            lora = loras[start]
            code = self._scope(instance, lora)
            if lora is None:
                st.default_scope[0] = code
            else:
                scope[[i for i in range(n) if loras[i] == lora]] = code
        c = self.counts
        for k, d in ((0, c["stored_blocks"]), (1, c["removed_blocks"])):
            row = st.blocks[k]
            for t in np.flatnonzero(row):
                d[TIERS[t]] += int(row[t])
            row[:] = 0

    def _clear(self, instance: str, place: int, tier: int, ts: int) -> None:
        """Remove every copy in ``tier`` of the objects of one (instance, group), in object order."""
        st = self._st
        sel = np.flatnonzero(st.tab[:, mk.T_PLACE] == place)
        oids = st.tab[sel, mk.T_OBJ]
        live = (st.obj[oids, mk.O_MASK] & (1 << tier)) != 0
        sel, oids = sel[live], oids[live]
        hashes = st.tab[sel[np.argsort(oids, kind="stable")], mk.T_KEY].view(np.uint64)
        n = len(hashes)
        st = self._st = mk.ensure(st, n)
        one = lambda v: np.full(1, v, np.int64)  # noqa: E731
        cols = mk.EventCols(ts, one(mk.REMOVED_K), one(place), one(tier), np.array([0, n], np.int64), hashes, one(0),
                            one(0), one(0), one(-1), one(-1), one(NO_ID), one(0), self._places[instance])
        self.counts["removed_blocks"].setdefault(TIERS[tier], 0)
        mk.map_events(cols, st, 0, self.bpt, self.default_block)
        row = st.blocks[1]
        self.counts["removed_blocks"][TIERS[tier]] += int(row[tier])
        row[:] = 0

    def pending(self) -> int:
        return int(self._st.cnt[mk.C_ROWS])

    def take(self) -> EventBatch:
        """The events mapped since the last take, as one batch (sorted: times never go backwards)."""
        st = self._st
        n = int(st.cnt[mk.C_ROWS])
        if not n:
            return EventBatch.empty()
        a = st.rows[:, :n]  # handed over: the next rows go to a fresh array (pages only touched as written)
        self._st = st._replace(rows=np.zeros(st.rows.shape, np.int64))
        st.cnt[mk.C_ROWS] = 0
        return make_batch(ts_ns=a[0], op=a[1], obj_id=a[2], parent_id=a[3], tier=a[4], nbytes=a[5], ntokens=a[6],
                          tenant=a[7], scope=a[8], session_id=a[9], content_key=a[10].view(np.uint64))


def _extra_lora_salt(extra: list, lora: str | None, salt: str | None, chain_head: bool) -> tuple:
    """(lora, salt) from vLLM's untagged per-block extra keys: each entry lists the LoRA name first (when the
    request has one), then (mm hash, offset) pairs, the cache salt (first block of a chain only) and prompt
    embedding digests (bytes). A block after the first can name only a LoRA; the first block's lone string is
    the salt unless the event names the LoRA it equals."""
    for i, keys in enumerate(extra):
        if not keys or not isinstance(keys, (list, tuple)):
            continue
        strs = [k for k in keys if isinstance(k, str)]
        if not strs:
            continue
        if i == 0 and chain_head:
            if lora is not None and strs[0] == lora:
                strs = strs[1:]
            elif lora is None and len(strs) >= 2:
                lora, strs = strs[0], strs[1:]
            if salt is None and strs:
                salt = strs[0]
        elif lora is None:
            lora = strs[0]
        if lora is not None and (salt is not None or not chain_head or i > 0):
            break
    return lora, salt
