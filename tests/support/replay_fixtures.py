"""Small lifecycle traces built with ``kvreplay.schema.make_batch`` for the replay tests.

``two_lifetimes`` writes objects to the SSD tier at a steady rate; a share of
them die soon after (short-lived, e.g. a session's private tail), the rest live
long (shared prefixes). Kind and tenant follow the lifetime when
``typed=True`` so the ``type`` policy has something to separate, and long-lived
objects are hit three times in GPU before they are persisted when
``hot_long=True`` (a signal for ``hotness``). Every
object is created and committed in GPU first and some are reused, so policies
that read other tiers see realistic surroundings.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvreplay import schema as S

MiB = 1 << 20


def layout_ops(layout, events, max_pages=64):
    """Run (obj, action[, pages[, pid]]) events through a layout; the ops as
    (op, lba, npages, pid, event, src) tuples, resuming whenever the kernel stops early."""
    from kvreplay.layout import OpBuffer
    from kvreplay.layout.common import S_BUFFER_FULL, S_DONE, S_GROW

    obj = np.array([e[0] for e in events], np.uint64)
    act = np.array([e[1] for e in events], np.int8)
    pages = np.array([e[2] if len(e) > 2 else 0 for e in events], np.int32)
    pid = np.array([e[3] if len(e) > 3 else 0 for e in events], np.int16)
    buf = OpBuffer(1 << 14)
    out, start = [], 0
    while start < len(events):
        nxt, n, status = layout.run(obj, act, pages, pid, pid, start, len(events), buf.ob, layout.op_bound(max_pages))
        assert status in (S_DONE, S_BUFFER_FULL, S_GROW), status
        cols = buf.columns(n)
        out += list(zip(*(cols[k].tolist() for k in ("op", "lba", "npages", "pid", "event", "src"))))
        start = nxt
    return out


def two_lifetimes(path: Path, *, n_objects: int = 3000, obj_bytes: int = 4 * MiB, short_frac: float = 0.6,
                  short_life_ns: int = 50_000_000, long_life_ns: int = 2_000_000_000, gap_ns: int = 1_000_000,
                  seed: int = 0, typed: bool = True, reads: bool = True, row_group_rows: int = 4096,
                  live_tail: bool = True, hot_long: bool = True) -> Path:
    rng = np.random.default_rng(seed)
    t_write = np.arange(n_objects, dtype=np.int64) * gap_ns + 1_000
    short = rng.random(n_objects) < short_frac
    life = np.where(short, rng.integers(short_life_ns // 2, short_life_ns * 2, n_objects),
                    rng.integers(long_life_ns // 2, long_life_ns * 2, n_objects)).astype(np.int64)
    t_death = t_write + life
    end = int(t_write[-1]) + gap_ns
    dies = t_death < end if live_tail else np.ones(n_objects, bool)
    obj = np.arange(1, n_objects + 1, dtype=np.uint64)
    kind = np.where(short & typed, S.KIND["quantized"], S.KIND["exact"]).astype(np.int8)
    tenant = np.where(short & typed, 1, 0).astype(np.int32)
    sess = (np.arange(n_objects) // 4).astype(np.int64)
    req = (np.arange(n_objects) // 2).astype(np.int64)
    parent = np.where(np.arange(n_objects) % 4 == 0, 0, obj - 1).astype(np.uint64)

    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("ts_ns", "op", "obj_id", "parent_id", "tier", "nbytes",
                                                          "kind", "tenant", "request_id", "session_id", "order")}

    def add(ts, op, tier, mask=None, order=0):
        m = np.ones(n_objects, bool) if mask is None else mask
        cols["ts_ns"].append(ts[m])
        cols["op"].append(np.full(m.sum(), op, np.int8))
        cols["obj_id"].append(obj[m])
        cols["parent_id"].append(parent[m])
        cols["tier"].append(np.full(m.sum(), tier, np.int8))
        cols["nbytes"].append(np.full(m.sum(), obj_bytes, np.int64))
        cols["kind"].append(kind[m])
        cols["tenant"].append(tenant[m])
        cols["request_id"].append(req[m])
        cols["session_id"].append(sess[m])
        cols["order"].append(np.full(m.sum(), order, np.int64))

    add(t_write - 500, S.OP_CREATE, S.TIER_GPU, order=0)
    add(t_write - 200, S.OP_COMMIT, S.TIER_GPU, order=1)
    if hot_long:  # long-lived objects are reused in GPU before they are persisted (shared prefixes are hot)
        for k in range(3):
            add(t_write - 150 + 10 * k, S.OP_HIT, S.TIER_GPU, mask=~short, order=1)
    add(t_write, S.OP_PERSIST, S.TIER_SSD, order=2)
    add(t_write + 100, S.OP_EVICT, S.TIER_GPU, order=3)
    if reads:
        hot = rng.random(n_objects) < 0.5
        t_read = t_write + life // 2
        add(t_read, S.OP_LOAD, S.TIER_SSD, mask=hot & (t_read < end), order=4)
        # loaded back into GPU (its copy there was evicted after the write), then used there
        add(t_read + 5, S.OP_PERSIST, S.TIER_GPU, mask=hot & (t_read < end), order=5)
        add(t_read + 10, S.OP_HIT, S.TIER_GPU, mask=hot & (t_read < end), order=5)
    add(t_death, S.OP_EVICT, S.TIER_SSD, mask=dies, order=6)
    allc = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.lexsort((allc["order"], allc["obj_id"], allc["ts_ns"]))
    batch = S.make_batch(**{k: v[order] for k, v in allc.items() if k != "order"})
    meta = S.TraceMeta(source={"importer": "test"}, geometry={"bytes_per_token": 131072, "tokens_per_object": 32},
                       generator={"ssd_policy": "lru", "seed": seed})
    with S.TraceWriter(path, meta, tenants=["a", "b"], row_group_rows=row_group_rows) as w:
        w.write(batch)
    return path


def truncate(src: Path, dst: Path, rows: int, row_group_rows: int = 1000) -> Path:
    """The first ``rows`` events of ``src`` (the trace with its future removed)."""
    batch, reader = S.read_trace(src)
    with S.TraceWriter(dst, reader.meta, tenants=reader.tenants, scopes=reader.scopes,
                       row_group_rows=row_group_rows) as w:
        w.write(batch.take(slice(0, rows)))
    return dst


def rewrite(src: Path, dst: Path, row_group_rows: int) -> Path:
    """The same events cut into different row groups."""
    batch, reader = S.read_trace(src)
    with S.TraceWriter(dst, reader.meta, tenants=reader.tenants, scopes=reader.scopes,
                       row_group_rows=row_group_rows) as w:
        w.write(batch)
    return dst
