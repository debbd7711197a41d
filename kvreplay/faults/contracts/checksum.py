"""Contract ``checksum``: a header with the payload's length and CRC32C: torn and corrupt objects are caught."""

from __future__ import annotations

from kvreplay.faults.contract import CHECK_CHECKSUM, Contract
from kvreplay.faults.registry import CONTRACTS


@CONTRACTS.register("checksum")
class ChecksumContract(Contract):
    checks = CHECK_CHECKSUM
