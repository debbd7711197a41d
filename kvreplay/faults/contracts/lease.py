"""Contract ``lease``: an epoch/sequence in the header matched against the index entry's lease."""

from __future__ import annotations

from kvreplay.faults.contract import CHECK_LEASE, Contract
from kvreplay.faults.registry import CONTRACTS


@CONTRACTS.register("lease")
class LeaseContract(Contract):
    checks = CHECK_LEASE
