"""What a recovery contract is: the checks a load runs and what they cost.

A contract is a set of checks on a per-object header that is stored *with* the object (its bytes are added
to the object's length before it is rounded to mapping units, so the device writes and reads exactly what a
real store would: nothing extra when the object's last unit has room, one more unit when the payload fills
its units - the WAF/GC effect is the device model's own), plus what the host-side index keeps per entry.

=========== ================================================== ====================================
check       header fields                                      detects
=========== ================================================== ====================================
checksum    length (8 B), CRC32C of the payload (4 B), magic   torn objects, media errors, trimmed
            (4 B)                                              or foreign extents of another length
version     object id (8 B), scope version (8 B); the index    old versions (missed invalidation),
            keeps the expected version (8 B)                   another object's data
lease       write epoch (8 B), write sequence (8 B); the index any extent rewritten since the entry
            keeps epoch and lease expiry (16 B)                was made (stale index), trimmed data
=========== ================================================== ====================================
"""

from __future__ import annotations

from typing import ClassVar

CHECK_CHECKSUM, CHECK_VERSION, CHECK_LEASE = 1, 2, 4
CHECK_NAMES = {CHECK_CHECKSUM: "checksum", CHECK_VERSION: "version", CHECK_LEASE: "lease"}
HEADER_BYTES = {CHECK_CHECKSUM: 16, CHECK_VERSION: 16, CHECK_LEASE: 16}
INDEX_ENTRY_BYTES = {CHECK_CHECKSUM: 0, CHECK_VERSION: 8, CHECK_LEASE: 16}


class Contract:
    """A registered contract names its checks (a bit set); header and index sizes follow from them."""

    name: ClassVar[str]
    checks: ClassVar[int] = 0

    @classmethod
    def header_bytes(cls) -> int:
        """Bytes of header stored with every object (0 = none)."""
        return sum(b for c, b in HEADER_BYTES.items() if cls.checks & c)

    @classmethod
    def index_entry_bytes(cls) -> int:
        """Bytes the host-side index keeps per entry for the contract."""
        return sum(b for c, b in INDEX_ENTRY_BYTES.items() if cls.checks & c)

    @classmethod
    def check_names(cls) -> list[str]:
        return [n for c, n in CHECK_NAMES.items() if cls.checks & c]
