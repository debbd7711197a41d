"""Self-describing object payloads, so a scan after a crash can tell an intact object from a torn or missing one.

Every page of a write carries a stamp: magic, its index in the write, the object id, the write id (the
trace row of the write event: unique per write, so a stale copy of the same object never passes for this
one) and the scope version. Page 0 of a write also carries the object header the recovery contract
checks: the payload length and its CRC32C (over every byte of the write after the header). The rest of
each page is a pattern of (write id, page), so a page that landed elsewhere never matches.

CRC32C comes from the kernel's crypto API (AF_ALG ``crc32c``; the guest init loads ``algif_hash``) and
falls back to a table-driven loop in Python where the kernel does not offer it (about 100x slower).
Standard library only: the guest agent and the host's tests share this module.
"""

from __future__ import annotations

import socket
import struct

PAGE_MAGIC = b"KVpg"
#: every page: magic, page index in the write, object id, write id, scope version
PAGE_STAMP = struct.Struct("<4sIqqq")
#: page 0 only, after the stamp: payload length (bytes after the header), CRC32C of the payload
OBJ_HEADER = struct.Struct("<QI4x")
HEADER_BYTES = PAGE_STAMP.size + OBJ_HEADER.size  # 48

#: scan statuses, in the order the host's prediction uses
INTACT, TORN, MISSING, CORRUPT = range(4)
STATUS_NAMES = ("intact", "torn", "missing", "corrupt")

_MASK64 = (1 << 64) - 1


def _table() -> list[int]:
    poly = 0x82F63B78  # Castagnoli, reflected
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        out.append(c)
    return out


_T = _table()


def crc32c_python(data, crc: int = 0) -> int:
    crc ^= 0xFFFFFFFF
    t = _T
    for b in memoryview(data).cast("B"):
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


class Crc32c:
    """CRC32C of a buffer: the kernel's (AF_ALG) when it has one, else :func:`crc32c_python`."""

    def __init__(self, use_kernel: bool = True):
        self._op = None
        self.source = "python"
        if use_kernel and hasattr(socket, "AF_ALG"):
            try:
                alg = socket.socket(socket.AF_ALG, socket.SOCK_SEQPACKET)
                alg.bind(("hash", "crc32c"))
                self._op, _ = alg.accept()
                alg.close()
                self.source = "kernel"
            except OSError:
                self._op = None

    def __call__(self, data) -> int:
        if self._op is None:
            return crc32c_python(data)
        view = memoryview(data).cast("B")
        if not len(view):
            self._op.send(b"")
        step = 1 << 20
        for a in range(0, len(view), step):
            self._op.sendall(view[a:a + step], socket.MSG_MORE if a + step < len(view) else 0)
        return int.from_bytes(self._op.recv(4), "little")

    def close(self) -> None:
        if self._op is not None:
            self._op.close()
            self._op = None


def _pattern(wid: int, page: int) -> bytes:
    """8 bytes that fill a page of write ``wid`` (splitmix64 of both: pages of other writes differ)."""
    z = (wid * 0x9E3779B97F4A7C15 + page * 0xBF58476D1CE4E5B9 + 0x632BE59BD9B4E019) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return struct.pack("<Q", z ^ (z >> 31))


def build_write(obj: int, wid: int, version: int, npages: int, page_bytes: int, crc: Crc32c) -> bytearray:
    """The bytes of a whole write: ``npages`` stamped pages, the object header on page 0."""
    if page_bytes < HEADER_BYTES or page_bytes % 8:
        raise ValueError(f"page_bytes must be a multiple of 8 >= {HEADER_BYTES}, got {page_bytes}")
    buf = bytearray(npages * page_bytes)
    reps = page_bytes // 8
    for j in range(npages):
        off = j * page_bytes
        buf[off:off + page_bytes] = _pattern(wid, j) * reps
        PAGE_STAMP.pack_into(buf, off, PAGE_MAGIC, j, obj, wid, version)
    length = len(buf) - HEADER_BYTES
    OBJ_HEADER.pack_into(buf, PAGE_STAMP.size, length, crc(memoryview(buf)[HEADER_BYTES:]))
    return buf


def page_matches(page, obj: int, wid: int, index: int) -> bool:
    """Whether ``page`` is page ``index`` of write ``wid`` of object ``obj``."""
    magic, j, o, w, _ = PAGE_STAMP.unpack_from(page, 0)
    return magic == PAGE_MAGIC and j == index and o == obj and w == wid


def classify(data, obj: int, wid: int, npages: int, page_bytes: int, crc: Crc32c) -> tuple[int, int]:
    """(status, pages of this write present) of the bytes read back from a write's extents.

    intact: every page is this write's and the header's length and CRC32C match; corrupt: every page
    stamped right but the payload fails the CRC (bits changed in place); torn: some pages are this
    write's, some not; missing: none is."""
    view = memoryview(data)
    present = sum(page_matches(view[j * page_bytes:], obj, wid, j) for j in range(npages))
    if present == 0:
        return MISSING, 0
    if present < npages:
        return TORN, present
    length, want = OBJ_HEADER.unpack_from(view, PAGE_STAMP.size)
    if length != npages * page_bytes - HEADER_BYTES or crc(view[HEADER_BYTES:npages * page_bytes]) != want:
        return CORRUPT, present
    return INTACT, present
