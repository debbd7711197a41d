"""Device parameters: frozen dataclasses with units in field names.

These are the single source for the embedded models, the CLI ``--param k=v``
options, saved run configs and the QEMU ``-device`` strings of the VM testbed.
Field names listed here are a contract (other modules read them); add fields
freely, rename none.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbed.core.errors import KvbedError
from kvbed.core.params import check_fields, format_size, param

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


#: CXL 2.0 HDM decoders interleave across these numbers of devices (powers of two and 3, 6, 12)
CXL_INTERLEAVE_WAYS = (1, 2, 3, 4, 6, 8, 12, 16)
#: and at these granularities (256 B to 16 KiB, powers of two)
CXL_GRANULES = tuple(256 << i for i in range(7))


def _cache_policy_names() -> list[str]:
    from devicemodels.cache_policies import CACHE_POLICIES

    return CACHE_POLICIES.names()


def _check_bandwidths(obj, positive: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    """Bandwidths in bytes per second: ``positive`` ones must be > 0, ``optional`` ones >= 0 (0 = not modelled)."""
    for name in positive:
        if getattr(obj, name) <= 0:
            raise KvbedError(f"{name} must be positive, got {getattr(obj, name)}")
    for name in optional:
        if getattr(obj, name) < 0:
            raise KvbedError(f"{name} must be >= 0 (0 = not modelled), got {getattr(obj, name)}")


@dataclass(frozen=True)
class DramParams:
    """Host DRAM as a KV tier: its media bandwidth and the link that carries it to the GPU.

    Timing (devicemodels/memory.py): a transfer holds the DRAM media (shared by both directions) and the
    GPU link (full duplex: one queue per direction) for its bytes at their bandwidths; load_ns/store_ns
    are added once per op. Defaults: local DDR5 ~100 ns idle load latency (Pond, ASPLOS'23, puts a CXL
    hop at +70-90 ns over it, about 2x); 8 channels of DDR5-4800 (38.4 GB/s each, JEDEC) = 307.2 GB/s;
    PCIe 5.0 x16 to the GPU, ~64 GB/s per direction (32 GT/s x 16 lanes). A GH200's NVLink-C2C is
    450 GB/s per direction (900 GB/s total, NVIDIA Grace Hopper datasheet): ``link_bytes_per_s=450e9``.
    """

    dram_bytes: int = param(512 * MiB, "capacity of the DRAM pool")
    page_bytes: int = param(4 * KiB, "addressing unit of op batches (lba, npages)")
    load_ns: int = param(100, "load latency: local DDR5 ~100 ns (Pond, ASPLOS'23: a CXL hop adds 70-90 ns to it)")
    store_ns: int = param(100, "store latency (as load_ns)")
    media_bytes_per_s: int = param(307_200_000_000, "DRAM bandwidth, both directions together: 8 x DDR5-4800 "
                                                    "channels of 38.4 GB/s")
    link_bytes_per_s: int = param(64_000_000_000, "link to the GPU, per direction: PCIe 5.0 x16 ~64 GB/s; "
                                                  "GH200 NVLink-C2C 450e9; 0 = not modelled")

    def validate(self) -> "DramParams":
        for name in ("dram_bytes", "page_bytes", "load_ns", "store_ns"):
            if getattr(self, name) <= 0:
                raise KvbedError(f"{name} must be positive, got {getattr(self, name)}")
        _check_bandwidths(self, ("media_bytes_per_s",), ("link_bytes_per_s",))
        if self.dram_bytes % self.page_bytes:
            raise KvbedError(f"dram_bytes ({self.dram_bytes}) must be a multiple of page_bytes ({self.page_bytes})")
        return self


@dataclass(frozen=True)
class CxlParams:
    """CXL type-3 memory expanders (volatile), ``interleave_ways`` of them in one interleave set.

    Timing (devicemodels/memory.py): each device has its media (shared by both directions) and its CXL
    link (full duplex); all of them reach the GPU through one host link (full duplex). Bytes map to
    devices round-robin by ``interleave_granule_bytes`` (the HDM decoder's interleave granularity); a
    transfer holds each resource it crosses for its share of the bytes; load_ns/store_ns once per op.
    Defaults: load/store 250 ns, inside the 140-410 ns (2-5x local DRAM) measured on real CXL expanders
    (arXiv 2409.14317, 2405.14209; Pond, ASPLOS'23, puts the CXL hop at +70-90 ns); a Samsung CMM-D
    (CXL 2.0, PCIe 5.0 x8 E3.S card) is rated 36 GB/s; its x8 link carries ~32 GB/s per direction;
    the GPU link is PCIe 5.0 x16, ~64 GB/s per direction. One device (the default) with reads or writes
    alone is today's single 32 GB/s link queue; mixed, the two directions overlap up to the media's 36 GB/s.
    """

    cxl_bytes: int = param(512 * MiB, "memory capacity (all interleaved devices together)")
    load_ns: int = param(250, "load latency: measured CXL expanders 140-410 ns, 2-5x local DRAM "
                              "(arXiv 2409.14317, 2405.14209)")
    store_ns: int = param(250, "store latency (as load_ns)")
    bandwidth_bytes_per_s: int = param(32_000_000_000, "each device's CXL link, per direction: PCIe 5.0 x8 "
                                                       "~32 GB/s (CMM-D)")
    page_bytes: int = param(4 * KiB, "addressing unit of op batches (lba, npages)")
    media_bytes_per_s: int = param(36_000_000_000, "each device's DRAM media, both directions together: "
                                                   "Samsung CMM-D (CXL 2.0) is rated 36 GB/s")
    gpu_link_bytes_per_s: int = param(64_000_000_000, "host link to the GPU that every transfer crosses, per "
                                                      "direction: PCIe 5.0 x16 ~64 GB/s; 0 = not modelled")
    interleave_ways: int = param(1, "devices in the interleave set (CXL HDM decoder: 1, 2, 3, 4, 6, 8, 12, 16)")
    interleave_granule_bytes: int = param(256, "interleave granularity: consecutive granules go to consecutive "
                                               "devices (CXL: 256 B to 16 KiB, powers of two)")

    def validate(self) -> "CxlParams":
        for name in ("cxl_bytes", "load_ns", "store_ns", "page_bytes"):
            if getattr(self, name) <= 0:
                raise KvbedError(f"{name} must be positive, got {getattr(self, name)}")
        _check_bandwidths(self, ("bandwidth_bytes_per_s", "media_bytes_per_s"), ("gpu_link_bytes_per_s",))
        if self.cxl_bytes % self.page_bytes:
            raise KvbedError(f"cxl_bytes ({self.cxl_bytes}) must be a multiple of page_bytes ({self.page_bytes})")
        if self.interleave_ways not in CXL_INTERLEAVE_WAYS:
            raise KvbedError(f"interleave_ways must be one of {', '.join(map(str, CXL_INTERLEAVE_WAYS))} "
                             f"(CXL HDM decoders), got {self.interleave_ways}")
        if self.interleave_granule_bytes not in CXL_GRANULES:
            raise KvbedError(f"interleave_granule_bytes must be a power of two from 256 to 16384 (CXL HDM "
                             f"decoders), got {self.interleave_granule_bytes}")
        return self


@dataclass(frozen=True)
class CxlSsdParams:
    """CXL-SSD: a set-associative DRAM cache (write-back) in front of a conventional FTL.

    The cache holds *units* of ``cache_unit_bytes`` (whole flash pages): a miss fills the whole unit
    from flash, an evicted dirty unit is written back whole. Sets are ``cache_ways`` units; a unit goes
    to set ``unit % sets``; each set keeps its own replacement state (``cache_policy``). Hits cost the
    CXL link transfer plus ``CxlParams.load_ns``/``store_ns``; read misses wait for the NAND read.
    ``cache_bytes=0`` sizes the cache at 1/20 of the flash's logical capacity, rounded down to whole
    sets: Cylon's default DRAM buffer (Yoon et al., FAST'26; its artifact's run-cxlssd.sh sets
    ``bufsz = ssd_size / 20``).
    """

    cache_bytes: int = param(0, "DRAM cache in front of the flash; 0 = 1/20 of logical_bytes (Cylon, FAST'26), "
                                "rounded down to whole sets")
    cache_ways: int = param(8, "set associativity of the cache (units per set)")
    cache_policy: str = param("lru", "replacement policy within a set", choices=_cache_policy_names)
    cache_unit_bytes: int = param(0, "cache unit: filled from and written back to flash whole; a multiple of "
                                     "page_bytes; 0 = page_bytes")

    def unit_bytes(self, flash: FlashParams) -> int:
        return self.cache_unit_bytes or flash.page_bytes

    def set_bytes(self, flash: FlashParams) -> int:
        return self.unit_bytes(flash) * self.cache_ways

    def resolved_cache_bytes(self, flash: FlashParams) -> int:
        """The cache size in bytes: as given, or 1/20 of the logical capacity rounded down to whole sets
        (at least one set)."""
        if self.cache_bytes:
            return self.cache_bytes
        sb = self.set_bytes(flash)
        return max(1, flash.logical_bytes // 20 // sb) * sb

    def validate_with(self, flash: FlashParams) -> "CxlSsdParams":
        if self.cache_bytes < 0:
            raise KvbedError(f"cache_bytes must be >= 0 (0 = 1/20 of logical_bytes), got {self.cache_bytes}")
        if self.cache_ways <= 0:
            raise KvbedError(f"cache_ways must be positive, got {self.cache_ways}")
        if self.cache_unit_bytes < 0:
            raise KvbedError(f"cache_unit_bytes must be >= 0 (0 = page_bytes), got {self.cache_unit_bytes}")
        check_fields(self)
        unit = self.unit_bytes(flash)
        if unit % flash.page_bytes:
            raise KvbedError(f"cache_unit_bytes ({unit}) must be a multiple of page_bytes ({flash.page_bytes})")
        if flash.logical_bytes % unit:
            raise KvbedError(f"logical_bytes ({flash.logical_bytes}) must be a multiple of cache_unit_bytes ({unit})")
        if self.cache_bytes % self.set_bytes(flash):
            raise KvbedError(f"cache_bytes ({format_size(self.cache_bytes)}) must be a whole number of sets of "
                             f"cache_ways ({self.cache_ways}) units of {format_size(unit)}")
        size = self.resolved_cache_bytes(flash)
        if size > flash.logical_bytes:
            what = "cache_bytes" if self.cache_bytes else f"one set ({self.cache_ways} units of {format_size(unit)})"
            raise KvbedError(f"{what} ({format_size(size)}) is larger than the device "
                             f"(logical_bytes {format_size(flash.logical_bytes)})")
        return self
