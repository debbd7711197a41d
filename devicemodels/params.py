"""Device parameters: frozen dataclasses with units in field names.

These are the single source for the embedded models, the CLI ``--param k=v``
options, saved run configs and the QEMU ``-device`` strings of the VM testbed.
Field names listed here are a contract (other modules read them); add fields
freely, rename none.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.errors import KvbedError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class FlashParams:
    """NAND geometry and timing (FEMU defaults) and the logical size the host sees."""

    logical_bytes: int = 4 * GiB
    page_bytes: int = 4 * KiB
    pages_per_block: int = 256
    channels: int = 8
    dies_per_channel: int = 8
    op_ratio: float = 0.07  # (physical - logical) / logical
    page_read_ns: int = 40_000
    page_program_ns: int = 200_000
    block_erase_ns: int = 2_000_000
    pe_cycles_rated: int = 3000

    def validate(self) -> "FlashParams":
        for name in ("logical_bytes", "page_bytes", "pages_per_block", "channels", "dies_per_channel"):
            if getattr(self, name) <= 0:
                raise KvbedError(f"{name} must be positive, got {getattr(self, name)}")
        if self.logical_bytes % self.page_bytes:
            raise KvbedError(f"logical_bytes ({self.logical_bytes}) must be a multiple of page_bytes ({self.page_bytes})")
        if not (0.0 < self.op_ratio < 10.0):
            raise KvbedError(f"op_ratio must be in (0, 10), got {self.op_ratio}")
        return self

    @property
    def logical_pages(self) -> int:
        return self.logical_bytes // self.page_bytes

    @property
    def dies(self) -> int:
        return self.channels * self.dies_per_channel

    @property
    def block_bytes(self) -> int:
        return self.pages_per_block * self.page_bytes


@dataclass(frozen=True)
class FdpParams:
    """NVMe Flexible Data Placement: reclaim groups, reclaim unit handles, reclaim unit size."""

    ru_bytes: int = 16 * MiB
    nruh: int = 8
    nrg: int = 1
    ruh_type: str = "initially"  # "initially" (II, shared GC destination) or "persistently" (PI)

    def validate(self) -> "FdpParams":
        if self.ru_bytes <= 0 or self.nruh <= 0 or self.nrg <= 0:
            raise KvbedError("ru_bytes, nruh and nrg must be positive")
        if self.nruh > 128:
            raise KvbedError(f"nruh must be <= 128, got {self.nruh}")
        if self.ruh_type not in ("initially", "persistently"):
            raise KvbedError(f"ruh_type must be 'initially' or 'persistently', got {self.ruh_type!r}")
        return self


@dataclass(frozen=True)
class ZnsParams:
    """NVMe Zoned Namespace: zone size vs writable capacity, open/active limits."""

    zone_bytes: int = 64 * MiB
    zone_cap_bytes: int = 48 * MiB
    max_open_zones: int = 14
    max_active_zones: int = 14

    def validate(self) -> "ZnsParams":
        if self.zone_bytes <= 0 or self.zone_cap_bytes <= 0:
            raise KvbedError("zone_bytes and zone_cap_bytes must be positive")
        if self.zone_cap_bytes > self.zone_bytes:
            raise KvbedError(f"zone_cap_bytes ({self.zone_cap_bytes}) exceeds zone_bytes ({self.zone_bytes})")
        if not (0 < self.max_open_zones <= self.max_active_zones):
            raise KvbedError("need 0 < max_open_zones <= max_active_zones")
        return self


@dataclass(frozen=True)
class CxlParams:
    """CXL type-3 memory expander (volatile)."""

    cxl_bytes: int = 512 * MiB
    load_ns: int = 250  # local DRAM ~100 ns + CXL hop; see reference-figures.md
    store_ns: int = 250
    bandwidth_bytes_per_s: int = 32_000_000_000

    def validate(self) -> "CxlParams":
        if self.cxl_bytes <= 0 or self.load_ns <= 0 or self.store_ns <= 0 or self.bandwidth_bytes_per_s <= 0:
            raise KvbedError("cxl_bytes, load_ns, store_ns, bandwidth_bytes_per_s must be positive")
        return self
