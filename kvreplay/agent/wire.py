"""Wire format between the host and the guest agent (version 1).

Every message is a ZMQ multipart message: frame 0 is a UTF-8 JSON header, the
following frames are raw little-endian arrays named in the header's ``cols``
list (``[[name, typecode], ...]``, in frame order). JSON keeps control fields
readable and versioned; raw frames keep op batches and completions cheap
(numpy on the host, :mod:`array` in the guest, no msgpack needed in the image).

Requests carry ``v`` (this WIRE_VERSION), ``id`` (echoed in the reply) and
``cmd``. Replies carry ``v``, ``id``, ``ok`` and, when ``ok`` is false,
``error`` (one line). Commands: ``hello``, ``ping``, ``ops``, ``log``, ``hist``,
``reset``, ``scan`` (read back object payloads after a power loss), ``shutdown``, and the fault-injection
commands ``stall``, ``crash``.

Stdlib only: imported by the guest agent and by the host client.
"""

from __future__ import annotations

import array
import json
import struct
import sys
import zlib

WIRE_VERSION = 1
AGENT_PORT = 5555  # the agent's TCP port inside the guest

# Op codes: the same numbers as devicemodels.base (a host test checks they agree).
OP_READ, OP_WRITE, OP_TRIM, OP_ZONE_APPEND, OP_ZONE_RESET, OP_ZONE_FINISH, OP_RUH_UPDATE = range(7)
OP_NAMES = ("read", "write", "trim", "zone_append", "zone_reset", "zone_finish", "ruh_update")

# Op batch columns sent to the agent, and completion columns it returns.
# typecodes are array-module codes with fixed sizes on x86-64 Linux (b=1, h=2, i=4, q=8 bytes).
OP_COLUMNS = (("op", "b"), ("lba", "q"), ("npages", "i"), ("pid", "h"))
DONE_COLUMNS = (
    ("status", "i"),  # 0 ok; >0 NVMe status (SCT<<8|SC); <0 -errno; NOT_RUN if skipped after an error
    ("lat_ns", "q"),  # guest-measured latency of the op (all its split commands)
    ("done_ns", "q"),  # guest monotonic time at completion, ns since the agent started
    ("lba_out", "q"),  # assigned LBA for zone append, else -1
    ("ncmds", "i"),  # device commands the op became (MDTS/ZASL/range splits)
    ("crc", "I"),  # crc32 of the data read (reads with crc on), else 0
)
NOT_RUN = -(1 << 30)
# Object payloads (payload.py), optional on an ops batch: write id (-1: none), object, page of the write
# the op starts at, pages of the whole write.
PAYLOAD_COLUMNS = (("wid", "q"), ("obj", "q"), ("wpage", "i"), ("wpages", "i"))
# ``scan``: one row per extent of the writes to read back; the reply has one row per write.
SCAN_COLUMNS = (("wid", "q"), ("obj", "q"), ("lba", "q"), ("npages", "i"), ("wpage", "i"), ("wpages", "i"))
SCAN_DONE_COLUMNS = (("wid", "q"), ("status", "b"), ("present", "i"))

# Stamped payloads: each written page starts with (lba, tag) so reads can be verified.
STAMP = struct.Struct("<qq")
FILL_BYTE = 0x5A

if sys.byteorder != "little":  # pragma: no cover - x86-64 only
    raise RuntimeError("the kvbed wire format assumes a little-endian machine")


class WireError(Exception):
    """A malformed or incompatible message."""


def encode(header: dict, arrays: dict | None = None, cols=None) -> list[bytes]:
    """Header dict plus named arrays -> multipart frames."""
    frames = []
    spec = []
    for name, code in cols or ():
        a = arrays[name]
        if isinstance(a, array.array):
            if a.typecode != code:
                a = array.array(code, a)
            frames.append(a.tobytes())
        else:  # numpy array or bytes-like with the right layout
            frames.append(memoryview(a).cast("B").tobytes() if not isinstance(a, bytes) else a)
        spec.append([name, code])
    h = dict(header)
    h["v"] = WIRE_VERSION
    if spec:
        h["cols"] = spec
    return [json.dumps(h, separators=(",", ":")).encode()] + frames


def decode(frames: list[bytes]) -> tuple[dict, dict[str, array.array]]:
    """Multipart frames -> (header, {name: array}); checks the version and frame count."""
    if not frames:
        raise WireError("empty message")
    try:
        header = json.loads(bytes(frames[0]))
    except ValueError as exc:
        raise WireError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise WireError("header is not an object")
    if header.get("v") != WIRE_VERSION:
        raise WireError(f"wire version {header.get('v')!r}, expected {WIRE_VERSION}")
    spec = header.get("cols") or []
    if len(spec) != len(frames) - 1:
        raise WireError(f"header names {len(spec)} columns but {len(frames) - 1} data frames follow")
    arrays = {}
    n = None
    for (name, code), buf in zip(spec, frames[1:]):
        a = array.array(code)
        if len(buf) % a.itemsize:
            raise WireError(f"column {name}: {len(buf)} bytes is not a multiple of {a.itemsize}")
        a.frombytes(bytes(buf))
        if n is not None and len(a) != n:
            raise WireError(f"column {name} has {len(a)} rows, expected {n}")
        n = len(a)
        arrays[name] = a
    return header, arrays


def stamp_page(buf, offset: int, page_bytes: int, lba: int, tag: int) -> None:
    """Fill one page of ``buf`` at ``offset`` with the verifiable pattern."""
    STAMP.pack_into(buf, offset, lba, tag)
    buf[offset + STAMP.size : offset + page_bytes] = FILLER(page_bytes)


_FILLERS: dict[int, bytes] = {}


def FILLER(page_bytes: int) -> bytes:
    f = _FILLERS.get(page_bytes)
    if f is None:
        f = _FILLERS[page_bytes] = bytes([FILL_BYTE]) * (page_bytes - STAMP.size)
    return f


def expected_crc(lba: int, npages: int, page_bytes: int, tag: int) -> int:
    """crc32 a read of ``npages`` pages from ``lba`` returns after a stamped write with ``tag``."""
    crc = 0
    filler = FILLER(page_bytes)
    for p in range(lba, lba + npages):
        crc = zlib.crc32(STAMP.pack(p, tag), crc)
        crc = zlib.crc32(filler, crc)
    return crc
