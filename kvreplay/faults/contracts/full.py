"""Contract ``full``: checksum, version and lease together."""

from __future__ import annotations

from kvreplay.faults.contract import CHECK_CHECKSUM, CHECK_VERSION, CHECK_LEASE, Contract
from kvreplay.faults.registry import CONTRACTS


@CONTRACTS.register("full")
class FullContract(Contract):
    checks = CHECK_CHECKSUM | CHECK_VERSION | CHECK_LEASE
