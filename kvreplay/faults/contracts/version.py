"""Contract ``version``: a header with object id and scope version, compared with the index's expectation."""

from __future__ import annotations

from kvreplay.faults.contract import CHECK_VERSION, Contract
from kvreplay.faults.registry import CONTRACTS


@CONTRACTS.register("version")
class VersionContract(Contract):
    checks = CHECK_VERSION
