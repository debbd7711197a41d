"""KV lifecycle trace format, version 2: the single source of truth.

A trace is a Parquet file, one row per lifecycle event, sorted by ``ts_ns``.
Strings (op, tier, tenant, scope, kind) are dictionary-encoded; compression is
zstd. File-level facts live in the Arrow schema metadata under the key ``kvbed``
as JSON (see :class:`TraceMeta`).

Event semantics (``tier`` is where the event happens):

=========== ==================================================================
create      the object's KV is being produced in ``tier`` (prefill started)
commit      the object is complete and may be shared (prefill of its tokens done)
persist     a copy is written into ``tier`` (offload to CPU/CXL, write to SSD)
load        the object is read from ``tier`` into a faster tier
hit         the object is reused in place in ``tier`` (prefix-cache hit)
transform   a derived object (quantized, compressed, ...) is made; parent_id = source
invalidate  the copy in ``tier`` becomes stale (model/adapter version change)
evict       the copy in ``tier`` is dropped for capacity
delete      the object ends everywhere; its id is never used again
recover     the object is rebuilt in ``tier`` after a loss (recompute or parity)
=========== ==================================================================

Every event carries its object's ``content_key`` (uint64, the same on every event of an object): what the
object's bytes are, as opposed to ``obj_id``, which is never reused. A chunk evicted and later recomputed is a
new object with the same key; derived copies (quantized, compressed) keep their source's key with their own
kind. For imported and synthetic traces it is the chunk's prefix-chain hash within its sharing domain
(:mod:`kvreplay.tiers.chunking`); for captured traces the engine's block hash. 0 means "no key known".

Version 1 (no ``content_key`` column) is still read: the column reads as 0 and :attr:`TraceReader.has_content_key`
is False (a v1 key cannot be derived: an object id says nothing about its content). Writers write version 2.

In memory, readers and writers exchange :class:`EventBatch` objects: a dict of
numpy columns with enums as small integer codes (index into OPS/TIERS/KINDS)
and tenant/scope as integer codes into the trace's string tables.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kvbed.core.atomicio import json_default, temp_path_for
from kvbed.core.errors import KvbedError
from kvreplay.arrow_numpy import column_to_numpy, to_numpy

FORMAT_NAME = "kvbed-lifecycle"
FORMAT_VERSION = 2
#: versions this kvbed reads (1: before ``content_key``)
READ_VERSIONS = (1, 2)
NO_KEY = 0  # content_key when none is known (a v1 trace, an event source without content identity)
#: columns a version lacks, read as zeros (what a v1 trace means by them: no key known)
ADDED_IN = {"content_key": 2}
META_KEY = b"kvbed"

OPS = ("create", "commit", "persist", "load", "hit", "transform", "invalidate", "evict", "delete", "recover")
TIERS = ("gpu", "cpu", "cxl", "ssd", "remote")
KINDS = ("exact", "quantized", "compressed", "sparse", "recomputed", "parity")

OP = {name: i for i, name in enumerate(OPS)}
TIER = {name: i for i, name in enumerate(TIERS)}
KIND = {name: i for i, name in enumerate(KINDS)}

# Integer codes, for numba kernels and vectorised code.
OP_CREATE, OP_COMMIT, OP_PERSIST, OP_LOAD, OP_HIT, OP_TRANSFORM, OP_INVALIDATE, OP_EVICT, OP_DELETE, OP_RECOVER = range(10)
TIER_GPU, TIER_CPU, TIER_CXL, TIER_SSD, TIER_REMOTE = range(5)

NO_PARENT = 0  # object ids start at 1; parent_id 0 means "no parent"
NO_ID = -1  # request_id / session_id when unknown

ENUM_COLUMNS = {"op": OPS, "tier": TIERS, "kind": KINDS}
STRING_COLUMNS = ("tenant", "scope")

# column -> (arrow type on disk, numpy dtype in memory)
COLUMNS: dict[str, tuple[pa.DataType, np.dtype]] = {
    "ts_ns": (pa.int64(), np.dtype(np.int64)),
    "op": (pa.dictionary(pa.int8(), pa.string()), np.dtype(np.int8)),
    "obj_id": (pa.uint64(), np.dtype(np.uint64)),
    "parent_id": (pa.uint64(), np.dtype(np.uint64)),
    "tier": (pa.dictionary(pa.int8(), pa.string()), np.dtype(np.int8)),
    "nbytes": (pa.int64(), np.dtype(np.int64)),
    "ntokens": (pa.int32(), np.dtype(np.int32)),
    "tenant": (pa.dictionary(pa.int32(), pa.string()), np.dtype(np.int32)),
    "scope": (pa.dictionary(pa.int32(), pa.string()), np.dtype(np.int32)),
    "kind": (pa.dictionary(pa.int8(), pa.string()), np.dtype(np.int8)),
    "request_id": (pa.int64(), np.dtype(np.int64)),
    "session_id": (pa.int64(), np.dtype(np.int64)),
    "content_key": (pa.uint64(), np.dtype(np.uint64)),
}
COLUMN_NAMES = tuple(COLUMNS)
ARROW_SCHEMA = pa.schema([pa.field(n, t, nullable=False) for n, (t, _) in COLUMNS.items()])

DEFAULT_ROW_GROUP_ROWS = 1 << 20


@dataclass
class TraceMeta:
    """File-level facts. ``geometry`` holds model, bytes_per_token, tokens_per_object."""

    source: dict[str, Any] = field(default_factory=dict)  # importer name, input path, sha256
    geometry: dict[str, Any] = field(default_factory=dict)
    generator: dict[str, Any] = field(default_factory=dict)  # settings of the importer / tier sim / synth
    source_facts: dict[str, Any] = field(default_factory=dict)  # facts of the request-level source
    tier_stats: dict[str, Any] = field(default_factory=dict)  # per-tier hit ratio, bytes in/out
    extra: dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT_NAME
    format_version: int = FORMAT_VERSION
    created_by: str = ""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, default=json_default)

    @classmethod
    def from_json(cls, text: str | bytes, *, where: str) -> "TraceMeta":
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise KvbedError(f"file metadata is not valid JSON ({exc})", where=where) from None
        if not isinstance(raw, dict):
            raise KvbedError("file metadata is not a JSON object", where=where)
        if raw.get("format") != FORMAT_NAME:
            raise KvbedError(f"not a kvbed lifecycle trace (format {raw.get('format')!r})", where=where)
        ver = raw.get("format_version")
        if ver not in READ_VERSIONS:
            raise KvbedError(
                f"trace format version {ver!r}; this kvbed reads version "
                f"{' or '.join(map(str, READ_VERSIONS))}", where=where
            )
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})


class EventBatch(dict):
    """Columns of a batch of events as numpy arrays (enum/string columns as codes)."""

    @property
    def n(self) -> int:
        return len(self["ts_ns"]) if "ts_ns" in self else len(next(iter(self.values())))

    @classmethod
    def empty(cls, n: int = 0) -> "EventBatch":
        return cls({name: np.zeros(n, dtype=dt) for name, (_, dt) in COLUMNS.items()})

    @classmethod
    def concat(cls, batches: list["EventBatch"]) -> "EventBatch":
        if not batches:
            return cls.empty()
        return cls({k: np.concatenate([b[k] for b in batches]) for k in batches[0]})

    def take(self, idx: np.ndarray | slice) -> "EventBatch":
        return EventBatch({k: v[idx] for k, v in self.items()})


def make_batch(**cols: Any) -> EventBatch:
    """Build a complete batch; missing columns get defaults (ids -1, parent 0, kind exact, content_key 0: none)."""
    n = len(cols["ts_ns"])
    out = EventBatch()
    defaults = {"parent_id": NO_PARENT, "request_id": NO_ID, "session_id": NO_ID}
    for name, (_, dt) in COLUMNS.items():
        if name in cols:
            arr = np.asarray(cols[name])
            if name in ENUM_COLUMNS and arr.dtype.kind in "US":
                table = {s: i for i, s in enumerate(ENUM_COLUMNS[name])}
                arr = np.array([table[s] for s in arr], dtype=dt)
            out[name] = np.ascontiguousarray(arr, dtype=dt)
        else:
            out[name] = np.full(n, defaults.get(name, 0), dtype=dt)
        if len(out[name]) != n:
            raise ValueError(f"column {name} has {len(out[name])} rows, expected {n}")
    return out


class TraceWriter:
    """Stream batches into a trace file; the file appears only when ``close()`` succeeds.

    Use as a context manager: on an exception the temporary file is removed.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        meta: TraceMeta,
        *,
        tenants: list[str] | None = None,
        scopes: list[str] | None = None,
        row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    ):
        from kvbed.core.version import __version__

        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise KvbedError(f"cannot create the output directory ({exc.strerror or exc})", where=str(self.path)) from None
        self.tmp: Path | None = None  # made when the first row group (or the close) opens the file
        # a copy: the caller's meta stays as it was (a v1 trace's meta, rewritten sorted or cut, is written as v2
        # with its keys 0: none known)
        self.meta = dataclasses.replace(meta, format_version=FORMAT_VERSION,
                                        created_by=meta.created_by or f"kvbed {__version__}")
        self.tenants = list(tenants or ["default"])
        self.scopes = list(scopes or ["default"])
        self.row_group_rows = row_group_rows
        self._dicts = {
            "op": pa.array(OPS, pa.string()),
            "tier": pa.array(TIERS, pa.string()),
            "kind": pa.array(KINDS, pa.string()),
        }
        self._last_ts = np.iinfo(np.int64).min
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._closed = False

    def set_string_tables(self, tenants: list[str], scopes: list[str]) -> None:
        """Tables may grow while writing (codes only ever append)."""
        self.tenants, self.scopes = list(tenants), list(scopes)

    def _open(self, meta_json: str) -> pq.ParquetWriter:
        schema = ARROW_SCHEMA.with_metadata({META_KEY: meta_json.encode()})
        try:
            self.tmp = temp_path_for(self.path)
        except OSError as exc:
            raise KvbedError(f"cannot write the output ({exc.strerror or exc})", where=str(self.path)) from None
        # Dictionary pages for the string columns and content_key only: on ids and times a dictionary never
        # fits and Parquet falls back to plain encoding after trying (measured: 30% slower, 60% larger files).
        # content_key repeats on every event of an object and across objects of one content (a hash of 64
        # random bits: zstd alone cannot shrink it): the Mooncake conversation import is 29.1 MB plain,
        # 23.7 MB with its dictionary (v1, no key: 13.0 MB).
        return pq.ParquetWriter(
            self.tmp, schema, compression="zstd", use_dictionary=[*ENUM_COLUMNS, *STRING_COLUMNS, "content_key"],
            write_statistics=["ts_ns", "obj_id"]
        )

    def write(self, batch: EventBatch) -> None:
        n = batch.n
        if n == 0:
            return
        ts = batch["ts_ns"]
        if ts[0] < self._last_ts or (n > 1 and bool(np.any(ts[1:] < ts[:-1]))):
            raise KvbedError(f"events not sorted by ts_ns near row {self.rows}", where=str(self.path))
        self._last_ts = int(ts[-1])
        if self._writer is None:
            # Metadata is fixed at open; the final metadata is written in close() via a rewrite of the footer.
            self._writer = self._open(self.meta.to_json())
        for start in range(0, n, self.row_group_rows):
            part = batch.take(slice(start, start + self.row_group_rows))
            self._writer.write_table(self._to_table(part), row_group_size=self.row_group_rows)
        self.rows += n

    def copy_row_groups(self, path: str | os.PathLike) -> None:
        """Append every row group of a trace this writer's schema wrote, as stored (no numpy round trip):
        how a live capture rewrites its output with the rows of one more flush."""
        import pyarrow.compute as pc  # here, not at the top: every command reading a trace imports this module

        pf = pq.ParquetFile(path)
        if self._writer is None:
            self._writer = self._open(self.meta.to_json())
        for rg in range(pf.num_row_groups):
            table = pf.read_row_group(rg)
            self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
            if table.num_rows:
                self._last_ts = max(self._last_ts, int(pc.max(table.column("ts_ns")).as_py()))
            self.rows += table.num_rows

    def _to_table(self, b: EventBatch) -> pa.Table:
        arrays = []
        for name, (typ, dt) in COLUMNS.items():
            col = np.ascontiguousarray(b[name], dtype=dt)
            if name in self._dicts:
                arrays.append(pa.DictionaryArray.from_arrays(pa.array(col, pa.int8()), self._dicts[name]))
            elif name in STRING_COLUMNS:
                table = self.tenants if name == "tenant" else self.scopes
                bad = col[(col < 0) | (col >= len(table))]
                if len(bad):
                    raise KvbedError(f"{name} code {int(bad[0])} has no entry in the {name} table "
                                     f"({len(table)} names)", where=str(self.path))
                arrays.append(pa.DictionaryArray.from_arrays(pa.array(col, pa.int32()), pa.array(table, pa.string())))
            else:
                arrays.append(pa.array(col, typ))
        return pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)

    def close(self, meta: TraceMeta | None = None) -> Path:
        """Finish the file. ``meta`` (if given) replaces the metadata, e.g. with stats known only at the end."""
        if self._closed:
            return self.path
        self._closed = True
        if meta is not None:
            self.meta = dataclasses.replace(meta, format_version=FORMAT_VERSION,
                                            created_by=meta.created_by or self.meta.created_by)
        if self._writer is None:
            self._writer = self._open(self.meta.to_json())
        self._writer.add_key_value_metadata({META_KEY.decode(): self.meta.to_json()})
        self._writer.close()
        os.replace(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        self._closed = True
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:
                pass
        if self.tmp is not None:
            self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_trace(path: str | os.PathLike, batch: EventBatch, meta: TraceMeta, *, tenants=None, scopes=None) -> Path:
    with TraceWriter(path, meta, tenants=tenants, scopes=scopes) as w:
        w.write(batch)
    return Path(path)


class TraceReader:
    """Open a trace, check its format and version, and stream row groups as EventBatches."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        where = str(self.path)
        if not self.path.exists():
            raise KvbedError("no such file", where=where)
        try:
            self._pf = pq.ParquetFile(self.path)
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
            raise KvbedError(f"not a readable Parquet file ({_first_line(exc)})", where=where) from None
        kv = self._pf.metadata.metadata or {}
        if META_KEY not in kv:
            raise KvbedError("not a kvbed lifecycle trace (no 'kvbed' file metadata)", where=where)
        self.meta = TraceMeta.from_json(kv[META_KEY], where=where)
        schema = self._pf.schema_arrow
        ver = self.meta.format_version
        #: columns this file's version lacks: read as zeros (v1: no content_key)
        self.absent = tuple(n for n, v in ADDED_IN.items() if ver < v)
        #: False for a v1 trace: every content_key reads as NO_KEY and code needing keys must say so
        self.has_content_key = "content_key" not in self.absent
        for name, (typ, _) in COLUMNS.items():
            if name in self.absent:
                continue
            if name not in schema.names:
                raise KvbedError(f"missing column {name!r}", where=where)
            got = schema.field(name).type
            if pa.types.is_dictionary(typ):
                if not (pa.types.is_dictionary(got) and pa.types.is_string(got.value_type)):
                    raise KvbedError(f"column {name!r} has type {got}, expected dictionary<string>", where=where)
            elif got != typ:
                raise KvbedError(f"column {name!r} has type {got}, expected {typ}", where=where)
        self.num_rows = self._pf.metadata.num_rows
        self.num_row_groups = self._pf.num_row_groups
        self.tenants: list[str] = []
        self.scopes: list[str] = []
        self._string_codes = {"tenant": {}, "scope": {}}
        # per column: the last chunk dictionary seen and its code mapping (None: the dictionary is
        # already the code table, so indices are codes). Row groups of one file nearly always carry
        # the same dictionary (our writer stores the full enum and string tables), so the mapping is
        # built once per file instead of once per chunk.
        self._maps: dict[str, tuple[pa.Array, np.ndarray | None, bool]] = {}

    def require_content_key(self, what: str) -> None:
        """Refuse, in one line, a v1 trace to code that needs content keys (``what`` names it)."""
        if not self.has_content_key:
            raise KvbedError(f"a format v{self.meta.format_version} trace has no content keys; {what} needs them "
                             "(import or synthesize the trace again)", where=str(self.path))

    def _code_map(self, name: str, dictionary: pa.Array) -> tuple[np.ndarray | None, bool]:
        """(mapping from dictionary index to code in the column's dtype, or None if it is the
        identity; True if some dictionary value is an unknown enum name, mapped to -1)."""
        cached = self._maps.get(name)
        if cached is not None and (cached[0] is dictionary or cached[0].equals(dictionary)):
            return cached[1], cached[2]
        values = dictionary.to_pylist()
        if name in ENUM_COLUMNS:
            table = {s: i for i, s in enumerate(ENUM_COLUMNS[name])}
            mapping = np.array([table.get(v, -1) for v in values], dtype=np.int64)
        else:
            codes = self._string_codes[name]
            table_list = self.tenants if name == "tenant" else self.scopes
            mapping = np.empty(len(values), dtype=np.int64)
            for i, v in enumerate(values):
                if v not in codes:
                    codes[v] = len(table_list)
                    table_list.append(v)
                mapping[i] = codes[v]
        unknown = bool(len(mapping)) and bool(mapping.min() < 0)
        identity = not unknown and bool(np.array_equal(mapping, np.arange(len(mapping))))
        out = None if identity else mapping.astype(COLUMNS[name][1])
        self._maps[name] = (dictionary, out, unknown)
        return out, unknown

    def _decode_codes(self, name: str, chunk: pa.DictionaryArray, row0: int) -> np.ndarray:
        """The chunk's values as codes into OPS/TIERS/KINDS or the string tables (a new array)."""
        dt = COLUMNS[name][1]
        if chunk.null_count:  # the schema says not nullable, but a file written elsewhere may hold nulls
            first = int(np.flatnonzero(chunk.is_null().to_numpy(zero_copy_only=False))[0])
            raise KvbedError(f"row {row0 + first}: {name} is null", where=str(self.path))
        idx = to_numpy(chunk.indices)
        mapping, unknown = self._code_map(name, chunk.dictionary)
        if unknown:
            bad = np.flatnonzero(mapping[idx] < 0)
            if len(bad):
                values = chunk.dictionary.to_pylist()
                raise KvbedError(
                    f"row {row0 + int(bad[0])}: unknown {name} {values[int(idx[bad[0]])]!r} "
                    f"(known: {', '.join(ENUM_COLUMNS[name])})",
                    where=str(self.path),
                )
        if mapping is None:
            return idx.astype(dt)  # a copy: callers get writable arrays
        return mapping[idx]

    def iter_batches(self, columns: list[str] | tuple[str, ...] | None = None,
                     max_rows: int | None = None) -> Iterator[EventBatch]:
        """Yield one EventBatch per row group (bounded memory), or with ``max_rows`` consecutive slices of each
        row group of at most that many rows (views of the decoded group): a pipeline of threads overlaps its
        stages better on smaller batches (a kvbed trace's row groups hold 1M rows)."""
        cols = list(columns or COLUMN_NAMES)
        coded = [name for name in cols if name in ENUM_COLUMNS or name in STRING_COLUMNS]
        stored = [name for name in cols if name not in self.absent]
        row0 = 0
        for rg in range(self.num_row_groups):
            try:
                table = self._pf.read_row_group(rg, columns=stored)
            except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
                raise KvbedError(f"row group {rg} unreadable ({_first_line(exc)})", where=str(self.path)) from None
            out = EventBatch()
            for name in cols:
                if name in self.absent:
                    out[name] = np.zeros(self._pf.metadata.row_group(rg).num_rows, COLUMNS[name][1])
                    continue
                chunked = table.column(name)
                if name in coded:
                    chunks = chunked.chunks
                    if len(chunks) == 1:
                        out[name] = self._decode_codes(name, chunks[0], row0)
                        continue
                    parts = []
                    offset = row0
                    for chunk in chunks:
                        parts.append(self._decode_codes(name, chunk, offset))
                        offset += len(chunk)
                    out[name] = np.concatenate(parts) if parts else np.zeros(0, COLUMNS[name][1])
                else:
                    if chunked.null_count:  # not nullable in our schema; a file written elsewhere may hold nulls
                        nulls = chunked.is_null().to_numpy(zero_copy_only=False)
                        raise KvbedError(f"row {row0 + int(np.flatnonzero(nulls)[0])}: {name} is null",
                                         where=str(self.path))
                    out[name] = column_to_numpy(chunked, COLUMNS[name][1])
            n = self._pf.metadata.row_group(rg).num_rows
            row0 += n
            if max_rows is None or n <= max_rows:
                yield out
                continue
            for a in range(0, n, max_rows):
                yield out.take(slice(a, a + max_rows))

    def read_all(self, columns: list[str] | tuple[str, ...] | None = None) -> EventBatch:
        return EventBatch.concat(list(self.iter_batches(columns)))


def read_trace(path: str | os.PathLike, columns=None) -> tuple[EventBatch, TraceReader]:
    r = TraceReader(path)
    return r.read_all(columns), r


def _first_line(exc: BaseException) -> str:
    s = str(exc).strip().splitlines()
    return s[0] if s else type(exc).__name__
