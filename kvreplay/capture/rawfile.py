"""Raw capture files: the frames as received, with arrival times, so a capture can be decoded again.

Format ``kvbed-kvevents-raw`` version 1 (binary, append-only, so a killed capture keeps all it flushed)::

    b"KVBEDRAW" b"\\x01"                      magic and version
    u32 little-endian n, msgpack(header)   header map: engine, endpoints, replay, topic, model, kv_dtype,
                                           tokens_per_block, media, started_unix_ns, created_by
    repeated records:
    u32 little-endian n, msgpack([arrival_unix_ns, publisher, source, frames])
        publisher: index into header["endpoints"]; source: 0 live (frames = topic, seq, payload as
        received, any count), 1 replay reply (frames as received from the ROUTER)

Arrival times are wall-clock (``time.time_ns``): the one place capture needs the real clock.
A record cut short at the end (a crash mid-write) is reported, not an error.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any, BinaryIO, Iterator, NamedTuple

import msgspec

from kvbed.core.errors import KvbedError

MAGIC = b"KVBEDRAW"
VERSION = 1
FORMAT_NAME = "kvbed-kvevents-raw"
LIVE, REPLAY = 0, 1
_LEN = struct.Struct("<I")


class RawRecord(NamedTuple):
    arrival_ns: int
    publisher: int
    source: int
    frames: list


class RawWriter:
    """Append records; ``flush()`` makes them durable against a crash of this process."""

    def __init__(self, path: str | os.PathLike, header: dict[str, Any]):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f: BinaryIO = open(self.path, "wb")
        except OSError as exc:
            raise KvbedError(f"cannot write the raw capture ({exc.strerror or exc})", where=str(self.path)) from None
        self._enc = msgspec.msgpack.Encoder()
        body = self._enc.encode({"format": FORMAT_NAME, "version": VERSION, **header})
        self._f.write(MAGIC + bytes([VERSION]) + _LEN.pack(len(body)) + body)
        self.records = 0

    def write(self, arrival_ns: int, publisher: int, source: int, frames: list[bytes]) -> None:
        body = self._enc.encode([arrival_ns, publisher, source, frames])
        self._f.write(_LEN.pack(len(body)))
        self._f.write(body)
        self.records += 1

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


class RawReader:
    """Read a raw capture: ``header`` then ``records()``; ``truncated`` tells if the tail was cut short."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        where = str(self.path)
        try:
            self._data = self.path.read_bytes()
        except FileNotFoundError:
            raise KvbedError("no such file", where=where) from None
        except OSError as exc:
            raise KvbedError(f"cannot read ({exc.strerror})", where=where) from None
        d = self._data
        if d[:8] != MAGIC:
            raise KvbedError(f"not a kvbed raw capture (no {MAGIC.decode()} magic)", where=where)
        if len(d) < 13 or d[8] != VERSION:
            raise KvbedError(f"raw capture version {d[8] if len(d) > 8 else '?'}; this kvbed reads {VERSION}",
                             where=where)
        (n,) = _LEN.unpack_from(d, 9)
        try:
            self.header = msgspec.msgpack.decode(d[13:13 + n])
        except msgspec.DecodeError:
            raise KvbedError("raw capture header is cut short or not msgpack", where=where) from None
        if not isinstance(self.header, dict) or not isinstance(self.header.get("endpoints"), list):
            raise KvbedError("raw capture header has no endpoints list", where=where)
        self._start = 13 + n
        self.truncated = False

    def records(self) -> Iterator[RawRecord]:
        d, pos, end = self._data, self._start, len(self._data)
        dec = msgspec.msgpack.Decoder()
        i = 0
        while pos < end:
            if pos + 4 > end:
                self.truncated = True
                return
            (n,) = _LEN.unpack_from(d, pos)
            if pos + 4 + n > end:
                self.truncated = True
                return
            try:
                rec = dec.decode(d[pos + 4:pos + 4 + n])
                r = RawRecord(int(rec[0]), int(rec[1]), int(rec[2]), list(rec[3]))
            except (msgspec.DecodeError, TypeError, ValueError, IndexError):
                raise KvbedError(f"record {i} (byte {pos}) is not a raw capture record", where=str(self.path)) from None
            pos += 4 + n
            i += 1
            yield r
