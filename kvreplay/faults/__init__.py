"""Faults and recovery contracts: what happens to stored KV when things fail, and what a contract buys.

- :mod:`~kvreplay.faults.registry` - ``FAULTS`` (fault kinds, one module each in ``kinds/``) and
  ``CONTRACTS`` (one module each in ``contracts/``);
- :mod:`~kvreplay.faults.params` - ``FaultParams`` (``--param fault=... contract=...``; ``--fault``,
  ``--contract``, ``--fault-file``) and the parsing of ``KIND@TIME[,key=value...]``;
- :mod:`~kvreplay.faults.model` - the payload model and the numba kernel that advances it and classifies
  loads; :mod:`~kvreplay.faults.state` - its arrays and what faults do to them;
- :mod:`~kvreplay.faults.analysis` - ``FaultRun``: checks against the trace, the op log recorded during the
  replay, the classification pass and result.json's ``faults`` section.
"""

from kvreplay.faults import contracts, kinds  # noqa: F401  (registration)
from kvreplay.faults.params import FaultParams, faults_from_file, parse_fault
from kvreplay.faults.registry import CONTRACTS, FAULTS

__all__ = ["FAULTS", "CONTRACTS", "FaultParams", "parse_fault", "faults_from_file"]
