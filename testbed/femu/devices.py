"""FEMU's device options from kvbed's parameter dataclasses, and refusals of what FEMU cannot express.

FEMU (hw/femu, QEMU 10.1) emulates a flash SSD: the black-box SSD (``femu_mode=1``, conv), the same
with WARP's FDP (``femu_mode=1`` + a ``femu-subsys`` with ``fdp=on``) and a ZNS SSD (``femu_mode=3``).
Its geometry is its own; kvbed derives every option from the model's dataclasses so the FEMU device and
the model of a replay are the same device as far as FEMU can express it. The mapping (FEMU option <-
kvbed field; ``kvbed femu args --device fdp`` prints it for given parameters):

=====================  =========================================================================
``devsz_mb``           FlashParams.logical_bytes / MiB (whole MiB); FEMU keeps it in host RAM
``secsz``              512: FEMU's LBA (lba_index 0); ``secs_per_pg`` = page_bytes / 512, so
                       FEMU's page (its mapping unit) is the model's mapping unit ``page_bytes``
``pgs_per_blk``        FlashParams.pages_per_block (mapping units per block)
``nchs``/``luns_per_ch``  channels / dies_per_channel; ``pls_per_lun`` = 1
``blks_per_pl``        the model's line count (lines of one block per die, from logical_bytes and
                       op_ratio exactly as the model lays them out): FEMU's lines are one block on
                       every LUN, so blocks_per_line must be 0 (full stripe)
``pg_rd_lat``          page_read_ns x NAND pages per unit; ``pg_wr_lat`` likewise with
                       page_program_ns; ``blk_er_lat`` = block_erase_ns x NAND blocks per block;
                       ``ch_xfer_lat`` = the unit's transfer time at channel_bytes_per_s
``gc_thres_pcent``     gc_bg_used_pct when set (FEMU's own semantics: preset=femu); else the integer
                       percent p with int((1 - p/100) x lines) = gc_bg_free_lines (FEMU collects
                       while at most that many lines/RUs are free, so it keeps one more free than
                       the model's gc_bg_free_lines does); ``gc_thres_pcent_high`` likewise from
                       gc_fg_used_pct or gc_fg_free_lines (the write waits)
``gc_policy`` (conv)   greedy, random, cost-benefit, fifo; ``gc_strategy`` (fdp): greedy=0,
                       cost-benefit=1, random=2
``mdts``               log2(VmParams.mdts_bytes / 4 KiB)
``fdp.nruh``/``fdp.nrg``  FdpParams.nruh / nrg (1: placement ids are handle indexes)
``fdp.runs``           FdpParams.ru_bytes, which must be FEMU's RU: one line (dies x
                       pages_per_block x page_bytes); ``fdp.nru`` = the line count
``fdp.isolation_mode`` 0: every RUH persistently isolated (ruh_type=persistently); 1: the last RUH
                       initially isolated, collected into its own host RU (ruh_type=last-initially,
                       ii_gc_dest=last-ruh)
``zns_num_ch``/``zns_num_lun``  channels / dies_per_channel; ``zns_num_plane`` = 1
``zns_num_blk``        zones (logical_bytes / zone_bytes, at most 255): FEMU's zone is
                       chnls x luns x planes x (size / 16 KiB / (chnls x luns x blks)) x 16 KiB,
                       which equals zone_bytes when zone_bytes is a multiple of 16 KiB x dies
``zns_zone_cap``       ZnsParams.zone_cap_bytes; ``zns_max_open``/``zns_max_active`` likewise
``zns_flash_type``     the FEMU flash type whose fixed read/program latency equals
                       page_read_ns/page_program_ns (FEMU's ZNS timing is per type)
=====================  =========================================================================

FEMU behaviours that are not options (GC after every command, a victim with under 1/8 invalid pages
left for later, victims cleaned block by block, a reclaim unit open for every RUH from the start) are
what ``--param preset=femu`` gives the model (devicemodels/presets.py); they are not refused, so the
model beside a FEMU VM may keep its own (the device-vs-model figures then show the difference).

Refused (one line naming each field and what FEMU would need): blocks_per_line other than a full
stripe; ru_bytes other than one line; ruh_type=initially (FEMU isolates every RUH persistently, or all
but the last); ruh_type=last-initially with ii_gc_dest=gc-ru; nrg > 1; gc_bg_trigger=idle (FEMU
collects on a threshold); gc_separate_frontier=true
for conv (FEMU's GC writes at the host's write pointer); write_buffer_bytes > 0; timing=false; a GC
policy FEMU does not have; sizes that are not whole MiB; ZNS timing that is none of FEMU's types.
Fields FEMU has no notion of and that do not change the device (seed, pe_cycles_rated,
nand_page_bytes beyond the latencies, gc_d_choices for other policies) are ignored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from devicemodels.params import FdpParams, FlashParams, MiB, ZnsParams
from kvbed.core.errors import KvbedError
from kvbed.core.params import format_size
from kvbed.core.registry import Registry

FEMU_LBA_BYTES = 512
ZNS_PAGE_BYTES = 16 * 1024  # hw/femu/zns/zns.h ZNS_PAGE_SIZE
#: hw/femu/zns/zns.h: (read ns, program ns) of FEMU's ZNS flash types, by the nand.h FlashType value
ZNS_FLASH_TYPES = {"slc": (1, 4_000, 75_000), "tlc": (3, 32_000, 937_500), "qlc": (4, 85_000, 12_196_000)}
CONV_GC_POLICIES = ("greedy", "random", "cost-benefit", "fifo")  # hw/femu/bbssd/ftl-line-gc.c
FDP_GC_STRATEGIES = {"greedy": 0, "cost-benefit": 1, "random": 2}  # hw/femu/bbssd/ftl.h GC_GLOBAL_*
INT32_MAX = 2**31 - 1
#: host memory FEMU's QEMU needs beyond the guest's RAM and the in-RAM device (QEMU itself, FTL tables)
HOST_OVERHEAD_BYTES = 512 * MiB


class Row(NamedTuple):
    device: str  # femu | femu-subsys
    option: str
    value: Any
    source: str  # the kvbed field (or fixed reason) it comes from


class Refusal(NamedTuple):
    """What FEMU cannot express: the message, and the values that would work (field -> value) where one
    choice is FEMU's own (a default kvbed may pick when the user did not give the field)."""

    text: str
    fix: dict[str, Any]


@dataclass
class FemuMapping:
    """FEMU's options for one device with where each comes from, plus the host memory it needs."""

    rows: list[Row] = field(default_factory=list)
    host_bytes: int = 0
    refusals: list[Refusal] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return [r.text for r in self.refusals]

    def add(self, device: str, option: str, value: Any, source: str) -> None:
        self.rows.append(Row(device, option, value, source))

    def refuse(self, msg: str, **fix: Any) -> None:
        self.refusals.append(Refusal(msg, fix))

    def args(self, *, bus: str = "pcie.0") -> list[str]:
        out = []
        for dev, ident in (("femu-subsys", "id=femu-subsys-0"), ("femu", "id=femu0")):
            opts = [f"{r.option}={r.value}" for r in self.rows if r.device == dev]
            if opts:
                extra = [f"bus={bus}"] if dev == "femu" else []
                out += ["-device", ",".join([dev, ident, *opts, *extra])]
        return out


FEMU_DEVICES: Registry[Callable[[dict[str, Any], FemuMapping], None]] = Registry("FEMU device")


def _percent_for(lines: int, free: int) -> int | None:
    """The integer percent p FEMU turns into ``int((1 - p / 100.0) * lines)`` free lines (C double math)."""
    for p in range(0, 101):
        if int((1 - p / 100.0) * lines) == free:
            return p
    return None


def expressible_free_lines(lines: int) -> list[int]:
    """Every free-line count FEMU's integer-percent thresholds can state for ``lines`` lines (ascending)."""
    return sorted({int((1 - p / 100.0) * lines) for p in range(0, 101)})


def _at_or_above(lines: int, free: int) -> int:
    """The smallest expressible count >= ``free`` (``free`` itself when FEMU can state it)."""
    ok = [f for f in expressible_free_lines(lines) if f >= max(1, free)]
    return ok[0] if ok else free


def _nearest_free(lines: int, free: int, *, up: bool) -> int:
    """The expressible count nearest ``free``: the smallest above it (``up``) or the largest below it,
    never under 1 line."""
    ok = [f for f in expressible_free_lines(lines) if f >= 1]
    above = [f for f in ok if f > free]
    below = [f for f in ok if f < free]
    if up:
        return above[0] if above else below[-1]
    return below[-1] if below else above[0]


def _geometry(m: FemuMapping, fl: FlashParams, fdp: FdpParams | None) -> int:
    """The black-box SSD's geometry and timing (conv and fdp); returns the line count."""
    from devicemodels import ftl_state

    if fl.logical_bytes % MiB:
        m.refuse(f"logical_bytes={fl.logical_bytes} (FEMU's devsz_mb needs whole MiB)")
    if fl.page_bytes % FEMU_LBA_BYTES:
        m.refuse(f"page_bytes={fl.page_bytes} (FEMU's page is a whole number of 512-byte sectors)")
    if fl.blocks_per_line not in (0, fl.dies):
        m.refuse(f"blocks_per_line={fl.blocks_per_line} (FEMU's line is one block on every die: 0 or {fl.dies})",
                 blocks_per_line=0)
    if fl.gc_bg_trigger == "idle":
        m.refuse(f"gc_bg_trigger={fl.gc_bg_trigger} (FEMU collects when free lines reach its threshold: "
                 f"per-command, or threshold)", gc_bg_trigger="per-command")
    if fl.write_buffer_bytes:
        m.refuse(f"write_buffer_bytes={format_size(fl.write_buffer_bytes)} (FEMU's SSD has no write buffer: 0)",
                 write_buffer_bytes=0)
    if not fl.timing:
        m.refuse("timing=false (FEMU always emulates NAND latency: true)", timing=True)
    try:
        geo, _ = ftl_state.build(fl, fdp) if not m.refusals else (None, None)
    except KvbedError as exc:
        m.refuse(str(exc) + _lower_thresholds(fl, fdp), **_smaller_lines(fl, fdp))
        geo = None
    if geo is None:
        return 0
    lines = geo.N
    m.add("femu", "devsz_mb", fl.logical_bytes // MiB, "logical_bytes / MiB")
    m.add("femu", "namespaces", 1, "one namespace")
    m.add("femu", "femu_mode", 1, "black-box SSD")
    m.add("femu", "secsz", FEMU_LBA_BYTES, "FEMU's LBA (lba_index 0)")
    m.add("femu", "secs_per_pg", fl.page_bytes // FEMU_LBA_BYTES, "page_bytes / 512")
    m.add("femu", "pgs_per_blk", fl.pages_per_block, "pages_per_block")
    m.add("femu", "blks_per_pl", lines, "lines of the model's layout (logical_bytes, op_ratio)")
    m.add("femu", "pls_per_lun", 1, "one plane")
    m.add("femu", "luns_per_ch", fl.dies_per_channel, "dies_per_channel")
    m.add("femu", "nchs", fl.channels, "channels")
    for opt, v, src in (("pg_rd_lat", geo.read_ns, "page_read_ns x NAND pages per page"),
                        ("pg_wr_lat", geo.prog_ns, "page_program_ns x NAND pages per page"),
                        ("blk_er_lat", geo.erase_ns, "block_erase_ns x NAND blocks per block"),
                        ("ch_xfer_lat", geo.xfer_ns, "page_bytes / channel_bytes_per_s")):
        if v > INT32_MAX:
            m.refuse(f"{src.split()[0]} gives {opt}={v} ns (FEMU's option is a 32-bit int)")
        m.add("femu", opt, v, src)
    # the values that would work: the nearest expressible counts at or above the model's (never fewer free
    # lines than asked for), background GC starting above foreground GC
    fg_fix = _at_or_above(lines, fl.gc_fg_free_lines)
    fixes = {"gc_fg_free_lines": fg_fix, "gc_bg_free_lines": _at_or_above(lines, max(fl.gc_bg_free_lines, fg_fix + 1))}
    for opt, free, name, pct in (("gc_thres_pcent", fl.gc_bg_free_lines, "gc_bg_free_lines", fl.gc_bg_used_pct),
                                 ("gc_thres_pcent_high", fl.gc_fg_free_lines, "gc_fg_free_lines", fl.gc_fg_used_pct)):
        if pct:  # FEMU's own semantics (preset=femu): the percent is the option
            m.add("femu", opt, pct, name.replace("free_lines", "used_pct"))
            continue
        p = _percent_for(lines, free)
        if p is None:
            near = sorted({_nearest_free(lines, free, up=False), _nearest_free(lines, free, up=True)})
            # a new foreground threshold may reach the background one: move that too (bg <= fg turns it off)
            fix = fixes if name == "gc_fg_free_lines" and fl.gc_bg_free_lines <= fg_fix else {name: fixes[name]}
            m.refuse(f"{name}={free} (FEMU's threshold is an integer percent of {lines} lines; no percent gives "
                     f"{free}; the nearest that do: {' and '.join(map(str, near))})", **fix)
        else:
            m.add("femu", opt, p, f"{name}={free} of {lines} lines")
    m.host_bytes = fl.logical_bytes + HOST_OVERHEAD_BYTES
    return lines


def _lower_thresholds(fl: FlashParams, fdp: FdpParams | None) -> str:
    """With FEMU's percent thresholds (preset=femu keeps 25% of the lines free): the largest background
    percent under which GC makes progress, as text to add to the refusal ('' if none or not percent)."""
    from devicemodels import ftl_state

    if not fl.gc_bg_used_pct:
        return ""
    for pct in range(fl.gc_bg_used_pct + 1, 100):
        f2 = dataclasses.replace(fl, gc_bg_used_pct=pct, gc_fg_used_pct=max(fl.gc_fg_used_pct, pct + 1))
        try:
            ftl_state.build(f2, fdp)
        except KvbedError:
            continue
        return (f"; or with gc_bg_used_pct={fl.gc_bg_used_pct}: gc_bg_used_pct={pct}"
                + (f" gc_fg_used_pct={f2.gc_fg_used_pct}" if f2.gc_fg_used_pct != fl.gc_fg_used_pct else ""))
    return ""


def _smaller_lines(fl: FlashParams, fdp: FdpParams | None) -> dict[str, Any]:
    """When the layout is refused (too little over-provisioning for lines this long): the largest block,
    halving pages_per_block down to 16, whose lines (FEMU's reclaim units) let GC make progress; {} if none."""
    from devicemodels import ftl_state

    ppb = fl.pages_per_block // 2
    while ppb >= 16:
        f2 = dataclasses.replace(fl, pages_per_block=ppb)
        d2 = dataclasses.replace(fdp, ru_bytes=f2.dies * ppb * f2.page_bytes) if fdp is not None else None
        try:
            ftl_state.build(f2, d2)
        except KvbedError:
            ppb //= 2
            continue
        return {"pages_per_block": ppb, **({"ru_bytes": d2.ru_bytes} if d2 is not None else {})}
    return {}


def _mdts(m: FemuMapping, vm) -> None:
    m.add("femu", "mdts", (vm.mdts_bytes // 4096).bit_length() - 1, "log2(mdts_bytes / 4 KiB)")


@FEMU_DEVICES.register("conv")
def conv_args(p: dict[str, Any], m: FemuMapping) -> None:
    fl: FlashParams = p["flash"]
    if fl.gc_separate_frontier:
        # GC copying into the host's open line must still find a free line to continue into: the model needs
        # gc_fg_free_lines >= 2 then (and background GC above it)
        m.refuse("gc_separate_frontier=true (FEMU's GC writes at the host's write pointer: false)",
                 gc_separate_frontier=False, gc_fg_free_lines=max(2, fl.gc_fg_free_lines),
                 gc_bg_free_lines=max(3, fl.gc_bg_free_lines, fl.gc_fg_free_lines + 1))
    if fl.gc_policy not in CONV_GC_POLICIES:
        m.refuse(f"gc_policy={fl.gc_policy} (FEMU's line GC has {', '.join(CONV_GC_POLICIES)})", gc_policy="greedy")
    _geometry(m, fl, None)
    if not m.problems:
        m.add("femu", "gc_policy", fl.gc_policy, "gc_policy")
        m.add("femu", "serial", "kvbedfemuconv0", "fixed")
    _mdts(m, p["vm"])


@FEMU_DEVICES.register("fdp")
def fdp_args(p: dict[str, Any], m: FemuMapping) -> None:
    fl: FlashParams = p["flash"]
    fd: FdpParams = p["fdp"]
    line_bytes = fl.dies * fl.pages_per_block * fl.page_bytes
    if fd.ru_bytes != line_bytes:
        m.refuse(f"ru_bytes={format_size(fd.ru_bytes)} (FEMU's reclaim unit is one line: channels x "
                 f"dies_per_channel x pages_per_block x page_bytes = {format_size(line_bytes)})", ru_bytes=line_bytes)
    if fd.nrg != 1:
        m.refuse(f"nrg={fd.nrg} (placement ids are handle indexes: 1)", nrg=1)
    if fd.ruh_type == "initially":
        m.refuse(f"ruh_type={fd.ruh_type} (FEMU isolates every RUH persistently, or all but the last: "
                 f"persistently or last-initially)", ruh_type="persistently")
    if fd.ruh_type == "last-initially" and fd.ii_gc_dest != "last-ruh":
        m.refuse(f"ii_gc_dest={fd.ii_gc_dest} (FEMU's initially isolated RUH collects into its own host RU: "
                 f"last-ruh)", ii_gc_dest="last-ruh")
    if fl.gc_policy not in FDP_GC_STRATEGIES:
        m.refuse(f"gc_policy={fl.gc_policy} (FEMU's FDP GC has {', '.join(FDP_GC_STRATEGIES)})", gc_policy="greedy")
    lines = _geometry(m, fl, fd if not m.problems else None)
    if m.problems:
        return
    m.add("femu-subsys", "nqn", "kvbed-fdp", "fixed")
    m.add("femu-subsys", "fdp", "on", "FDP")
    m.add("femu-subsys", "fdp.nruh", fd.nruh, "nruh")
    m.add("femu-subsys", "fdp.nrg", fd.nrg, "nrg")
    m.add("femu-subsys", "fdp.nru", lines, "one RU per line")
    m.add("femu-subsys", "fdp.runs", fd.ru_bytes, "ru_bytes (= one line)")
    iso = int(fd.ruh_type == "last-initially")
    m.add("femu-subsys", "fdp.isolation_mode", iso, f"ruh_type={fd.ruh_type}")
    m.add("femu", "gc_strategy", FDP_GC_STRATEGIES[fl.gc_policy], f"gc_policy={fl.gc_policy}")
    m.add("femu", "serial", "kvbedfemufdp0", "fixed")
    _mdts(m, p["vm"])
    m.add("femu", "subsys", "femu-subsys-0", "the FDP subsystem")


@FEMU_DEVICES.register("zns")
def zns_args(p: dict[str, Any], m: FemuMapping) -> None:
    fl: FlashParams = p["flash"]
    z: ZnsParams = p["zns"]
    vm = p["vm"]
    if fl.logical_bytes % MiB:
        m.refuse(f"logical_bytes={fl.logical_bytes} (FEMU's devsz_mb needs whole MiB)")
    nzones = fl.logical_bytes // z.zone_bytes
    if nzones > 255:
        m.refuse(f"zone_bytes={format_size(z.zone_bytes)} gives {nzones} zones (FEMU's zns_num_blk is 8 bits: "
                 f"at most 255 zones)")
    unit = ZNS_PAGE_BYTES * fl.dies
    if z.zone_bytes % unit:
        m.refuse(f"zone_bytes={format_size(z.zone_bytes)} (FEMU's zone is whole 16 KiB pages on every die: "
                 f"a multiple of {format_size(unit)})")
    ftype = next((k for k, (_, r, w) in ZNS_FLASH_TYPES.items()
                  if (r, w) == (fl.page_read_ns, fl.page_program_ns)), None)
    if ftype is None:
        kinds = ", ".join(f"{k}: page_read_ns={r} page_program_ns={w}" for k, (_, r, w) in ZNS_FLASH_TYPES.items())
        # FEMU's own default is qlc (12 ms programs: slow under TCG); tlc's read latency is the nearest to the
        # model's default 40 us
        m.refuse(f"page_read_ns={fl.page_read_ns} page_program_ns={fl.page_program_ns} (FEMU's ZNS timing is "
                 f"one of its flash types: {kinds})", page_read_ns=ZNS_FLASH_TYPES["tlc"][1],
                 page_program_ns=ZNS_FLASH_TYPES["tlc"][2])
    if m.problems:
        return
    m.add("femu", "devsz_mb", fl.logical_bytes // MiB, "logical_bytes / MiB")
    m.add("femu", "namespaces", 1, "one namespace")
    m.add("femu", "femu_mode", 3, "ZNS SSD")
    m.add("femu", "zns_num_ch", fl.channels, "channels")
    m.add("femu", "zns_num_lun", fl.dies_per_channel, "dies_per_channel")
    m.add("femu", "zns_num_plane", 1, "one plane")
    m.add("femu", "zns_num_blk", nzones, "logical_bytes / zone_bytes (one block row per zone)")
    m.add("femu", "zns_zone_cap", z.zone_cap_bytes, "zone_cap_bytes")
    m.add("femu", "zns_max_open", z.max_open_zones, "max_open_zones")
    m.add("femu", "zns_max_active", z.max_active_zones, "max_active_zones")
    m.add("femu", "zns_flash_type", ZNS_FLASH_TYPES[ftype][0], f"page_read_ns/page_program_ns = {ftype}")
    m.add("femu", "zns_zasl_bs", vm.zasl_bytes, "zasl_bytes (0 = mdts)")
    m.add("femu", "serial", "kvbedfemuzns0", "fixed")
    _mdts(m, vm)
    m.host_bytes = fl.logical_bytes + HOST_OVERHEAD_BYTES


def femu_mapping(device: str, p: dict[str, Any], *, check: bool = True) -> FemuMapping:
    """FEMU's options for ``device`` with parameters ``p`` (resolved groups incl. ``vm``); with ``check``,
    anything FEMU cannot express is one KvbedError line naming every such field."""
    if device not in FEMU_DEVICES:
        raise KvbedError(f"FEMU has no {device} device (FEMU devices: {', '.join(FEMU_DEVICES.names())})")
    m = FemuMapping()
    FEMU_DEVICES.get(device)(p, m)
    m.host_bytes += p["vm"].mem_bytes
    if check and m.problems:
        raise KvbedError(f"FEMU cannot express: {'; '.join(m.problems)}")
    return m
