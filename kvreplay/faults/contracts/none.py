"""Contract ``none``: no checks: whatever the index points at is served (the baseline: how much would be served wrong)."""

from __future__ import annotations

from kvreplay.faults.contract import Contract
from kvreplay.faults.registry import CONTRACTS


@CONTRACTS.register("none")
class NoneContract(Contract):
    checks = 0
