"""One module per fault kind; importing this package registers them all."""

from kvreplay.faults.kinds import (  # noqa: F401
    media_error, partial_offload, power_loss, stale_index, tier_loss, version_drift,
)
