"""Device parameters: frozen dataclasses with units in field names.

These are the single source for the embedded models, the CLI ``--param k=v``
options, saved run configs and the QEMU ``-device`` strings of the VM testbed.
Field names listed here are a contract (other modules read them); add fields
freely, rename none.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.core.errors import KvbedError
from testbed.core.params import check_fields, param

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def _presets() -> dict[str, dict]:
    from devicemodels.base import PRESETS  # filled as devicemodels.presets is imported

    return {n: PRESETS.get(n).values for n in PRESETS.names()}


def _gc_policy_names() -> list[str]:
    from devicemodels.base import GC_POLICIES  # the registry fills as devicemodels.gc_policies is imported

    return GC_POLICIES.names()


@dataclass(frozen=True)
class FlashParams:
    """NAND geometry and timing (FEMU defaults), the logical size the host sees, GC and timing knobs.

    Units: ``page_bytes`` is the *mapping unit* (one L2P entry). It may be a
    multiple of the NAND page ``nand_page_bytes`` (coarse mapping for MB-sized
    KV objects); a mapping unit of k NAND pages lives on one die and costs k
    NAND page reads/programs. ``pages_per_block`` counts mapping units; a block
    of them holds k x pages_per_block NAND pages, i.e. that many NAND blocks of
    ``nand_pages_per_block`` pages (at least one), and erasing it costs one
    ``block_erase_ns`` per NAND block.

    A *line* (superblock) of ``blocks_per_line`` blocks is the unit of
    allocation and garbage collection; consecutive pages of a line go to
    consecutive dies (channel first). ``blocks_per_line=0`` means one block on
    every die (a full stripe). FDP reclaim units are lines of ``ru_bytes``.

    GC thresholds count *free lines* (per reclaim group), not fractions: GC
    must keep only a few lines free, and a FEMU-style "start at 75% used" on a
    7%-OP drive would hold most of the spare space empty and inflate WAF.
    Foreground GC runs when a host write needs a new line and at most
    ``gc_fg_free_lines`` are free, and the write waits for it (a stall);
    background GC keeps at least ``gc_bg_free_lines`` free
    (``gc_bg_free_lines <= gc_fg_free_lines`` disables it). The default
    ``bg = fg + 1`` moves GC off the write path without holding more space free.
    When background GC runs is ``gc_bg_trigger``: ``idle`` (default) uses gaps in
    which no host op is in flight, so under a load that never leaves the device
    idle all GC is foreground; ``threshold`` runs it as FEMU does, when a host
    write has opened a line and fewer than ``gc_bg_free_lines`` are free: the GC work is
    queued on the dies from then and the write does not wait for it (later
    host ops queue behind it on the dies it uses); ``per-command`` is FEMU's loop exactly: after every
    host command one victim while fewer than ``gc_bg_free_lines`` are free, also with timing off.
    ``gc_bg_used_pct``/``gc_fg_used_pct`` give the thresholds as FEMU does, in percent of the RUs
    used; ``preset=femu`` (devicemodels/presets.py) sets these and FEMU's other GC behaviours.
    """

    logical_bytes: int = param(4 * GiB, "capacity the host sees")
    page_bytes: int = param(4 * KiB, "mapping unit (one L2P entry); a multiple of nand_page_bytes")
    pages_per_block: int = param(256, "mapping units per block")
    channels: int = param(8, "flash channels (FEMU default 8)")
    dies_per_channel: int = param(8, "dies (LUNs) per channel")
    op_ratio: float = param(0.07, "over-provisioning: (physical - logical) / logical")
    page_read_ns: int = param(40_000, "NAND page read (FEMU default)")
    page_program_ns: int = param(200_000, "NAND page program (FEMU default)")
    block_erase_ns: int = param(2_000_000, "NAND block erase (FEMU default)")
    pe_cycles_rated: int = param(3000, "rated program/erase cycles per block (wear: lifetime consumed)")
    nand_page_bytes: int = param(4 * KiB, "NAND page")
    nand_pages_per_block: int = param(256, "NAND pages per erase block (FEMU: 256 x 4 KiB); sets erase time "
                                           "and wear")
    blocks_per_line: int = param(0, "blocks per line (the allocation and GC unit); 0 = one block per die "
                                    "(full stripe)")
    channel_bytes_per_s: int = param(800_000_000, "ONFI/Toggle bus rate per channel")
    gc_policy: str = param("greedy", "GC victim policy", choices=_gc_policy_names)
    gc_d_choices: int = param(8, "sample size of the d-choices policy")
    gc_bg_free_lines: int = param(2, "background GC keeps at least this many free lines per reclaim group")
    gc_fg_free_lines: int = param(1, "foreground GC runs (and the write waits) at this many free lines")
    gc_bg_trigger: str = param("idle", "when background GC runs: in idle gaps; when a host write opens a line "
                                       "short of gc_bg_free_lines (threshold); or one victim after every "
                                       "host command while short (per-command: FEMU's FTL loop)",
                               choices=("idle", "threshold", "per-command"))
    gc_bg_min_invalid_ratio: float = param(0.0, "background GC leaves a victim with fewer invalid pages than this "
                                                "fraction of its line for later (FEMU: 0.125); foreground GC "
                                                "takes it", quiet_default=True)
    gc_copy_order: str = param("page", "order GC copies a victim's valid pages in: as written (page), or block by "
                                       "block, channel-major, as FEMU cleans a line (block: it scatters a "
                                       "multi-page object over the destination)", choices=("page", "block"),
                               quiet_default=True)
    gc_bg_used_pct: int = param(0, "FEMU's gc_thres_pcent: background GC while at most int((1 - pct/100) x "
                                   "lines per reclaim group) lines are free; 0 = gc_bg_free_lines decides",
                                quiet_default=True)
    gc_fg_used_pct: int = param(0, "FEMU's gc_thres_pcent_high: foreground GC at int((1 - pct/100) x lines "
                                   "per reclaim group) free lines; 0 = gc_fg_free_lines decides",
                                quiet_default=True)
    gc_separate_frontier: bool = param(True, "GC copies go to their own frontier; false (conv only): one "
                                             "frontier, GC copies lead each new host line")
    write_buffer_bytes: int = param(0, "device write buffer; 0 = write-through: a write completes when "
                                       "programmed")
    write_buffer_ns: int = param(2_000, "host write latency into the buffer when it has room")
    timing: bool = param(True, "false: no latency model (faster); completion = arrival")
    seed: int = param(0, "seed of the device's random choices (GC tie breaks, random victims)")
    preset: str = param("none", "a named group of settings applied before the explicit ones (which win): "
                                "femu = FEMU's FTL behaviour (kvbed params --presets)", presets=_presets,
                        quiet_default=True)

    def validate(self) -> "FlashParams":
        for name in ("logical_bytes", "page_bytes", "pages_per_block", "channels", "dies_per_channel",
                     "nand_page_bytes", "nand_pages_per_block", "channel_bytes_per_s", "pe_cycles_rated",
                     "gc_d_choices"):
            if getattr(self, name) <= 0:
                raise KvbedError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("page_read_ns", "page_program_ns", "block_erase_ns", "write_buffer_bytes",
                     "write_buffer_ns", "blocks_per_line", "seed"):
            if getattr(self, name) < 0:
                raise KvbedError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.logical_bytes % self.page_bytes:
            raise KvbedError(f"logical_bytes ({self.logical_bytes}) must be a multiple of page_bytes ({self.page_bytes})")
        if self.page_bytes % self.nand_page_bytes:
            raise KvbedError(f"page_bytes ({self.page_bytes}) must be a multiple of nand_page_bytes ({self.nand_page_bytes})")
        if self.write_buffer_bytes % self.page_bytes:
            raise KvbedError(f"write_buffer_bytes ({self.write_buffer_bytes}) must be a multiple of page_bytes ({self.page_bytes})")
        if not (0.0 < self.op_ratio < 10.0):
            raise KvbedError(f"op_ratio must be in (0, 10), got {self.op_ratio}")
        if self.gc_fg_free_lines < 1:
            raise KvbedError(f"gc_fg_free_lines must be >= 1 (GC needs a free line as its destination), "
                             f"got {self.gc_fg_free_lines}")
        if self.gc_bg_free_lines < 0:
            raise KvbedError(f"gc_bg_free_lines must be >= 0, got {self.gc_bg_free_lines}")
        if not (0.0 <= self.gc_bg_min_invalid_ratio <= 1.0):
            raise KvbedError(f"gc_bg_min_invalid_ratio must be in [0, 1], got {self.gc_bg_min_invalid_ratio}")
        for name in ("gc_bg_used_pct", "gc_fg_used_pct"):
            if not (0 <= getattr(self, name) < 100):
                raise KvbedError(f"{name} must be in 0..99 (0 = off), got {getattr(self, name)}")
        check_fields(self)
        if not self.gc_separate_frontier and self.gc_fg_free_lines < 2:
            raise KvbedError("gc_separate_frontier=false needs gc_fg_free_lines >= 2 (GC copies into the host "
                             "line it just opened and must still have a free line to continue into)")
        if self.logical_pages >= 2**31 - 1:
            raise KvbedError(f"too many logical pages ({self.logical_pages}) for 32-bit maps; raise page_bytes")
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

    @property
    def nand_pages_per_page(self) -> int:
        """NAND pages per mapping unit (k): time of a unit read/program and of a block erase scale by k."""
        return self.page_bytes // self.nand_page_bytes

    @property
    def nand_blocks_per_block(self) -> int:
        """NAND erase blocks in one block of mapping units: a block erase costs this many ``block_erase_ns``."""
        return max(1, -(-(self.nand_pages_per_page * self.pages_per_block) // self.nand_pages_per_block))

    @property
    def line_blocks(self) -> int:
        return self.blocks_per_line or self.dies

    @property
    def gc_reserved_lines(self) -> int:
        """Most lines GC may hold free when it needs to run (enters the OP progress check)."""
        return max(self.gc_fg_free_lines, self.gc_bg_free_lines - 1)

    def gc_free_lines(self, lines: int) -> tuple[int, int]:
        """(foreground, background) GC thresholds in free lines of a reclaim group of ``lines`` lines:
        ``gc_fg_free_lines``/``gc_bg_free_lines``, or FEMU's percent thresholds when set. FEMU collects
        while ``free <= int((1 - pct/100.0) * lines)`` (C double math: 90% of 80 RUs is 7, not 8);
        the model's background GC runs while ``free < bg``, so bg is one more."""
        fg, bg = self.gc_fg_free_lines, self.gc_bg_free_lines
        if self.gc_fg_used_pct:
            fg = max(1, int((1 - self.gc_fg_used_pct / 100.0) * lines))
        if self.gc_bg_used_pct:
            bg = int((1 - self.gc_bg_used_pct / 100.0) * lines) + 1
        return fg, bg

    @property
    def page_xfer_ns(self) -> int:
        """Channel time to move one mapping unit between controller and die."""
        return -(-self.page_bytes * 1_000_000_000 // self.channel_bytes_per_s)


@dataclass(frozen=True)
class FdpParams:
    """NVMe Flexible Data Placement: reclaim groups, reclaim unit handles, reclaim unit size."""

    ru_bytes: int = param(16 * MiB, "reclaim unit (whole blocks)")
    nruh: int = param(8, "reclaim unit handles (placement ids per reclaim group)")
    nrg: int = param(1, "reclaim groups (split the dies evenly)")
    ruh_type: str = param("initially", "GC destination of a RUH's data: initially isolated (one shared GC "
                                       "destination) or persistently isolated (one per RUH); last-initially: "
                                       "all persistently but the last, initially (FEMU's fdp.isolation_mode=1)",
                          choices=("initially", "persistently", "last-initially"))
    ii_gc_dest: str = param("gc-ru", "where GC copies initially isolated data: a reclaim unit of GC copies only "
                                     "(gc-ru) or the last RUH's host reclaim unit, among its host writes "
                                     "(last-ruh: FEMU)", choices=("gc-ru", "last-ruh"), quiet_default=True)
    ru_open_at_start: bool = param(False, "open a reclaim unit for every RUH of every reclaim group when the "
                                          "device starts, used or not (FEMU); false: on a RUH's first write",
                                   quiet_default=True)

    def validate(self) -> "FdpParams":
        if self.ru_bytes <= 0 or self.nruh <= 0 or self.nrg <= 0:
            raise KvbedError("ru_bytes, nruh and nrg must be positive")
        if self.nruh > 128:
            raise KvbedError(f"nruh must be <= 128, got {self.nruh}")
        return check_fields(self)

    def validate_with(self, flash: FlashParams) -> "FdpParams":
        """Checks that need the NAND geometry: an RU is whole blocks, RGs split the dies evenly."""
        self.validate()
        if self.ru_bytes % flash.block_bytes:
            raise KvbedError(
                f"ru_bytes ({self.ru_bytes}) must be a multiple of the block size "
                f"(pages_per_block x page_bytes = {flash.block_bytes})")
        if flash.dies % self.nrg:
            raise KvbedError(f"nrg ({self.nrg}) must divide the number of dies ({flash.dies})")
        return self

    def ru_blocks(self, flash: FlashParams) -> int:
        return self.ru_bytes // flash.block_bytes


@dataclass(frozen=True)
class ZnsParams:
    """NVMe Zoned Namespace: zone size vs writable capacity, open/active limits."""

    zone_bytes: int = param(64 * MiB, "zone size (LBA range)")
    zone_cap_bytes: int = param(48 * MiB, "writable capacity of a zone (<= zone_bytes)")
    max_open_zones: int = param(14, "open zone limit")
    max_active_zones: int = param(14, "active zone limit")
    implicit_close: bool = param(True, "opening a zone beyond the open limit implicitly closes an implicitly "
                                       "opened one (QEMU's auto-transition); false: a too-many-open-zones error")

    def validate(self) -> "ZnsParams":
        if self.zone_bytes <= 0 or self.zone_cap_bytes <= 0:
            raise KvbedError("zone_bytes and zone_cap_bytes must be positive")
        if self.zone_cap_bytes > self.zone_bytes:
            raise KvbedError(f"zone_cap_bytes ({self.zone_cap_bytes}) exceeds zone_bytes ({self.zone_bytes})")
        if not (0 < self.max_open_zones <= self.max_active_zones):
            raise KvbedError("need 0 < max_open_zones <= max_active_zones")
        return self

    def validate_with(self, flash: FlashParams) -> "ZnsParams":
        self.validate()
        for name in ("zone_bytes", "zone_cap_bytes"):
            if getattr(self, name) % flash.page_bytes:
                raise KvbedError(f"{name} ({getattr(self, name)}) must be a multiple of page_bytes ({flash.page_bytes})")
        if flash.logical_bytes % self.zone_bytes:
            raise KvbedError(f"logical_bytes ({flash.logical_bytes}) must be a multiple of zone_bytes ({self.zone_bytes})")
        return self


@dataclass(frozen=True)
class CxlParams:
    """CXL type-3 memory expander (volatile)."""

    cxl_bytes: int = param(512 * MiB, "memory capacity")
    load_ns: int = param(250, "load latency: local DRAM ~100 ns + the CXL hop (reference-figures.md)")
    store_ns: int = param(250, "store latency")
    bandwidth_bytes_per_s: int = param(32_000_000_000, "link and media bandwidth")
    page_bytes: int = param(4 * KiB, "addressing unit of op batches (lba, npages)")

    def validate(self) -> "CxlParams":
        for name in ("cxl_bytes", "load_ns", "store_ns", "bandwidth_bytes_per_s", "page_bytes"):
            if getattr(self, name) <= 0:
                raise KvbedError(f"{name} must be positive, got {getattr(self, name)}")
        if self.cxl_bytes % self.page_bytes:
            raise KvbedError(f"cxl_bytes ({self.cxl_bytes}) must be a multiple of page_bytes ({self.page_bytes})")
        return self


@dataclass(frozen=True)
class CxlSsdParams:
    """CXL-SSD: a set-associative DRAM page cache (write-back) in front of a conventional FTL.

    Hits cost the CXL link transfer plus ``CxlParams.load_ns``/``store_ns``; read misses add a
    NAND read of the backing FTL; evicting a dirty page writes it to flash in the background.
    """

    cache_bytes: int = param(256 * MiB, "DRAM page cache in front of the flash")
    cache_ways: int = param(8, "set associativity of the cache")

    def validate_with(self, flash: FlashParams) -> "CxlSsdParams":
        if self.cache_bytes <= 0 or self.cache_ways <= 0:
            raise KvbedError("cache_bytes and cache_ways must be positive")
        pages = self.cache_bytes // flash.page_bytes
        if self.cache_bytes % flash.page_bytes or pages % self.cache_ways:
            raise KvbedError(f"cache_bytes ({self.cache_bytes}) must be a whole number of sets of cache_ways "
                             f"({self.cache_ways}) pages of page_bytes ({flash.page_bytes})")
        return self
