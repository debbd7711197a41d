"""The two extension points of the fault model: fault kinds and recovery contracts, by lowercase name.

Kept apart from the package ``__init__`` so a kind or contract module can register itself without importing
the rest of the package.
"""

from __future__ import annotations

from kvbed.core.registry import Registry

#: fault kinds (``--fault KIND@TIME``): one module each under :mod:`kvreplay.faults.kinds`
FAULTS: Registry[type] = Registry("fault kind")
#: recovery contracts (``--contract NAME``): one module each under :mod:`kvreplay.faults.contracts`
CONTRACTS: Registry[type] = Registry("contract")
