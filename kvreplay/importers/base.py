"""Importer contract and the JSON Lines reader shared by the request-trace formats.

An importer turns a source file into either a :class:`~kvreplay.requests.RequestTrace`
(``level = "request"``: Mooncake, Alibaba; run through the tier simulator) or,
for engine KV event streams (vLLM/SGLang, a later issue), lifecycle event batches
written directly (``level = "event"``, :meth:`Importer.write_events`). Register with
``@IMPORTERS.register("name")``; ``kvbed trace import NAME`` then works for it.
"""

from __future__ import annotations

import abc
import hashlib
import os
from pathlib import Path
from typing import Annotated, Any, Callable, ClassVar, NamedTuple, TypeVar

import msgspec
import numpy as np

from kvreplay.requests import RequestTrace
from kvreplay.schema import TraceMeta, TraceWriter
from kvbed.core.errors import KvbedError
from kvbed.core.registry import Registry

S = TypeVar("S", bound=msgspec.Struct)

#: an integer field of a source record: JSON allows any size, the columns are int64, so a value
#: outside int64 is refused by the decoder (naming the line and field) instead of overflowing later
Int64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]


class Importer(abc.ABC):
    """``drop_inconsistent``: request-level sources drop (and count, in the trace's source facts) the lines
    whose block ids do not match their input length, instead of refusing the file at the first one."""

    name: ClassVar[str]
    level: ClassVar[str] = "request"  # "request" | "event"
    description: ClassVar[str] = ""

    def __init__(self, *, drop_inconsistent: bool = False):
        self.drop_inconsistent = drop_inconsistent
        #: where an importer's warnings go (the CLI sets it to print them; the facts keep their counts)
        self.warn: Callable[[str], None] = lambda s: None

    def read_requests(self, path: Path) -> RequestTrace:
        raise NotImplementedError(f"{self.name} does not produce a request trace")

    def write_events(self, path: Path, writer: TraceWriter) -> TraceMeta:
        """Event-level sources: stream sorted EventBatches into ``writer`` (calling
        ``writer.set_string_tables`` as tenants/scopes appear) and return the final metadata
        (source, geometry, source_facts); the caller closes the writer with it."""
        raise NotImplementedError(f"{self.name} does not produce lifecycle events")


IMPORTERS: Registry[type[Importer]] = Registry("importer", summary_attr="description")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def read_jsonl(path: Path, record: type[S]) -> tuple[list[S], np.ndarray, bytes]:
    """Decode every non-blank line of ``path`` as ``record``.

    Returns (records, 1-based line number of each record, raw bytes). A malformed
    line, a missing field or a wrong type raises KvbedError naming the line.
    """
    where = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise KvbedError("no such file", where=where) from None
    except OSError as exc:
        raise KvbedError(f"cannot read ({exc.strerror})", where=where) from None
    lines = data.split(b"\n")
    keep = [i for i, ln in enumerate(lines) if ln.strip()]
    if not keep:
        raise KvbedError("no records (empty file)", where=where)
    body = [lines[i] for i in keep]
    try:
        recs = msgspec.json.Decoder(list[record]).decode(b"[" + b",".join(body) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError):
        one = msgspec.json.Decoder(record)
        for i, ln in zip(keep, body):
            try:
                one.decode(ln)
            except msgspec.ValidationError as exc:
                raise KvbedError(f"line {i + 1}: {_clean(exc)}", where=where) from None
            except msgspec.DecodeError as exc:
                raise KvbedError(f"line {i + 1}: malformed JSON ({_clean(exc)})", where=where) from None
        raise KvbedError("malformed JSON Lines (a record spans lines?)", where=where) from None
    return recs, np.asarray(keep, np.int64) + 1, data


class RequestColumns(NamedTuple):
    """What the JSON Lines request formats share: the validated per-request columns."""

    records: list
    data: bytes  # the file's bytes (hashed for the trace's source info)
    timestamp: np.ndarray  # float64, in the format's own unit
    input_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    block_offsets: np.ndarray  # CSR offsets into block_ids, one row per request
    block_ids: np.ndarray
    extra: dict[str, np.ndarray]  # the format's further integer columns, by field name
    dropped: dict[str, int] | None  # lines dropped as inconsistent, by reason (None: refused instead)


def read_request_columns(path: Path, record: type[S], block_tokens: int, extra_counts: tuple[str, ...] = (),
                         drop_inconsistent: bool = False) -> RequestColumns:
    """Read records with ``timestamp``, ``input_length``, ``output_length`` and ``hash_ids`` (one id
    per ``block_tokens`` input tokens, the last one possibly partly filled) and refuse, naming the line, a
    timestamp that is negative, not finite or goes backwards, a negative length (or a negative
    ``extra_counts`` field), a negative id, or a block list that does not match the input: exactly
    ceil(input_length / block_tokens) ids. Fewer cannot cover the input (the tokens past the last id would
    silently be treated as not cacheable); more name blocks the input does not have. With
    ``drop_inconsistent`` those lines are dropped instead and counted (``dropped``)."""
    where = str(path)
    recs, lineno, data = read_jsonl(path, record)
    n = len(recs)
    ts = np.fromiter((r.timestamp for r in recs), np.float64, n)
    inp = np.fromiter((r.input_length for r in recs), np.int64, n)
    out = np.fromiter((r.output_length for r in recs), np.int64, n)
    extra = {name: np.fromiter((getattr(r, name) for r in recs), np.int64, n) for name in extra_counts}
    off, ids = flatten_ids([r.hash_ids for r in recs])
    check_column(where, lineno, ~np.isfinite(ts) | (ts < 0), "timestamp must be a finite number >= 0")
    check_column(where, lineno, np.r_[False, np.diff(ts) < 0], "timestamp goes backwards (lines must be in time order)")
    check_column(where, lineno, inp < 0, "input_length must be >= 0")
    check_column(where, lineno, out < 0, "output_length must be >= 0")
    for name, col in extra.items():
        check_column(where, lineno, col < 0, f"{name} must be >= 0")
    check_column(where, lineno, negative_id_rows(off, ids), "hash_ids must be >= 0")
    have = np.diff(off)
    need = (inp + block_tokens - 1) // block_tokens
    few, many = have < need, have > need
    dropped = None
    if drop_inconsistent:
        dropped = {"too_few_hash_ids": int(few.sum()), "too_many_hash_ids": int(many.sum())}
        keep = np.flatnonzero(~(few | many))
        if len(keep) < n:
            recs = [recs[i] for i in keep]
            ts, inp, out = ts[keep], inp[keep], out[keep]
            extra = {name: col[keep] for name, col in extra.items()}
            lens = have[keep]
            take = np.repeat(off[keep], lens) + (np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens))
            ids = ids[take]
            off = np.zeros(len(keep) + 1, np.int64)
            np.cumsum(lens, out=off[1:])
            if not len(recs):
                raise KvbedError(f"every line has a block list that does not match its input_length "
                                 f"({dropped['too_few_hash_ids']:,} too few hash_ids, {dropped['too_many_hash_ids']:,}"
                                 " too many): nothing left to import", where=where)
    else:
        bad = np.flatnonzero(few | many)
        if len(bad):
            i = int(bad[0])
            raise KvbedError(
                f"line {int(lineno[i])}: {int(have[i])} hash_ids for input_length {int(inp[i])}, expected "
                f"{int(need[i])} (one per {block_tokens} tokens, the last possibly part-filled): "
                f"{'too few to cover the input' if few[i] else 'more than the input has'} "
                "(--drop-inconsistent drops such lines and counts them)", where=where)
    return RequestColumns(recs, data, ts, inp, out, off, ids, extra, dropped)


def _clean(exc: Exception) -> str:
    s = str(exc).strip().splitlines()
    return s[0] if s else type(exc).__name__


def check_column(where: str, lineno: np.ndarray, bad: np.ndarray, message: str) -> None:
    """Raise for the first record where ``bad`` is true."""
    idx = np.flatnonzero(bad)
    if len(idx):
        raise KvbedError(f"line {int(lineno[idx[0]])}: {message}", where=where)


def flatten_ids(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """CSR (offsets, ids) from a list of id lists."""
    import itertools

    lens = np.fromiter((len(x) for x in lists), np.int64, len(lists))
    off = np.zeros(len(lists) + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    ids = np.fromiter(itertools.chain.from_iterable(lists), np.int64, int(off[-1]))
    return off, ids


def source_info(importer: str, path: Path, data: bytes | None = None) -> dict[str, Any]:
    sha = hashlib.sha256(data).hexdigest() if data is not None else sha256_file(path)
    return {"importer": importer, "path": str(Path(path).resolve()), "sha256": sha,
            "bytes": len(data) if data is not None else Path(path).stat().st_size}


def negative_id_rows(off: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Per request: does its id list hold a negative id?"""
    neg = np.zeros(len(off) - 1, bool)
    bad = np.flatnonzero(ids < 0)
    if len(bad):
        neg[np.searchsorted(off, bad, side="right") - 1] = True
    return neg
