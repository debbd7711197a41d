"""One module per recovery contract; importing this package registers them all."""

from kvreplay.faults.contracts import checksum, full, lease, none, version  # noqa: F401
