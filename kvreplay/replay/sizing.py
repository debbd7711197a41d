"""Device parameters for a replay: coarse defaults, and capacity sized from the trace.

Why coarse: KV objects are MBs (Llama-3-8B: 128 KiB per token; a 256-token
chunk is 32 MiB), so mapping them in 4 KiB pages would cost 8192 page
operations per object and turn a one-minute replay into an hour. The replay's
defaults (each overridable with ``--param``) are:

- ``page_bytes = 1 MiB`` mapping unit (32 units per 32 MiB object; an object
  smaller than a unit still takes one);
- ``pages_per_block = 1``: a 1 MiB block, which is FEMU's NAND erase block of
  256 pages of 4 KiB (``nand_pages_per_block``), erased in ``block_erase_ns``
  (2 ms);
- lines / reclaim units striped over every die (a superblock: 1 MiB x dies,
  64 MiB on FEMU's 8 x 8, 1 GiB on 1024 dies), since a write stream's bandwidth
  is the number of dies its open line spans; halved for small devices until the
  device has at least ``MIN_LINES`` of them, so GC has victims to choose from;
- ZNS zones striped over every die in the same way (zone = 1 MiB x dies, with
  the ZnsParams share of it writable, 3/4), halved for small devices until
  there are at least ``MIN_LINES`` zones;
- memory (``dram``, ``cxl``): a 1 MiB addressing unit.

Capacity: unless ``logical_bytes`` (``dram_bytes``, ``cxl_bytes``) is given, the logical
capacity is the tier's peak live data (in mapping units, from the first pass)
divided by ``fill_ratio`` (0.9), so the device runs at the fill level the KV
tier itself ran at and GC has to work. An explicit capacity below the peak live
data is refused unless ``strict_capacity=false``.

Parallelism: a tier simulator's SSD tier is the cluster's aggregate (Mooncake's
conversation trace writes ~4 GB/s to it on average and ~12.5 GB/s while
prefill runs), while FEMU's 8 channels x 8 dies sustain ~1.3 GB/s of programs;
replayed on that device every latency would be queueing. Unless
``channels``/``dies_per_channel`` are given, they are raised (powers of two,
never below 8 x 8) until the busiest second of the trace (times ``time_scale``)
uses at most ``write_utilization`` (0.8) of the program and channel bandwidth:
the device then stands for the tier's drives together, and queues form only
where GC or reads add work.
"""

from __future__ import annotations

import math
from typing import Any

from devicemodels import ftl_state
from devicemodels.params import MiB
from kvreplay.layout.zone import gc_reserve_zones
from kvbed.core.errors import KvbedError
from kvbed.core.params import format_size, with_overrides

MIN_LINES = 256  # GC needs (frontiers + reserved + 1) spare lines: ~183 at 7% OP with 8 RUHs

#: typed defaults applied to device param groups before the user's --param overrides
REPLAY_DEFAULTS: dict[str, dict[str, Any]] = {
    "flash": {"page_bytes": 1 * MiB, "pages_per_block": 1},
    "cxl": {"page_bytes": 1 * MiB},
    "dram": {"page_bytes": 1 * MiB},
}

#: the device fields a replay sets itself unless the user gives them, by parameter group: field -> how.
#: ``kvbed params`` marks them, ``kvbed params RUN_DIR`` marks the values a run got this way. A test checks
#: that every field REPLAY_DEFAULTS or the sizing below changes is listed here.
AUTO_SIZED: dict[str, dict[str, str]] = {
    "flash": {"page_bytes": "1MiB mapping unit", "pages_per_block": "1 (a block is one mapping unit)",
              "logical_bytes": "peak live data / fill_ratio",
              "channels": "raised until the trace's write rate fits (write_utilization)",
              "dies_per_channel": "raised until the trace's write rate fits (write_utilization)",
              "blocks_per_line": "full stripe, halved on small devices"},
    "fdp": {"ru_bytes": "full stripe of the reclaim group, halved on small devices"},
    "zns": {"zone_bytes": "over every die, halved on small devices",
            "zone_cap_bytes": "zone_bytes x the default writable share"},
    "cxl": {"page_bytes": "1MiB mapping unit", "cxl_bytes": "peak live data / fill_ratio"},
    "dram": {"page_bytes": "1MiB mapping unit", "dram_bytes": "peak live data / fill_ratio"},
}


def sized_by_replay(sizing: dict[str, Any] | None, explicit: set[str], groups: Any) -> set[str]:
    """``group.field`` of every device field a run's replay set itself, read from the run's sizing record
    (config.json ``sizing``) and the fields the user gave (``explicit``, bare or ``group.field``)."""
    rec = sizing or {}
    out = set()
    for g in groups:
        for f in AUTO_SIZED.get(g, {}):
            if f in explicit or f"{g}.{f}" in explicit:
                continue
            if f in REPLAY_DEFAULTS.get(g, {}):
                done = True
            elif f == CAPACITY_FIELDS.get(g):
                done = rec.get("mode") == "auto"
            elif f in ("channels", "dies_per_channel"):
                done = (rec.get("parallelism") or {}).get("mode") == "auto"
            else:
                done = f in rec
            if done:
                out.add(f"{g}.{f}")
    return out


# Fields the sizing may set itself when the user did not, by parameter group (the first present wins:
# a cxl-ssd has flash and cxl groups, and its capacity is the flash's).
CAPACITY_FIELDS = {"flash": "logical_bytes", "cxl": "cxl_bytes", "dram": "dram_bytes"}


def capacity_group(groups: dict[str, Any]) -> str:
    """The parameter group that holds the device's capacity."""
    for g in CAPACITY_FIELDS:
        if g in groups:
            return g
    raise KvbedError(f"device has none of the parameter groups {', '.join(CAPACITY_FIELDS)}")


def apply_defaults(groups: dict[str, Any]) -> dict[str, Any]:
    out = dict(groups)
    for g, vals in REPLAY_DEFAULTS.items():
        if g in out:
            out[g] = with_overrides(out[g], vals)
    return out


def page_bytes_of(groups: dict[str, Any]) -> int:
    return int(groups[capacity_group(groups)].page_bytes)


def _line_fields(groups: dict[str, Any], explicit: set[str], logical_bytes: int) -> tuple[dict[str, Any], list[str]]:
    """Shrink the default line/RU size for small devices (unless set explicitly)."""
    notes: list[str] = []
    flash = groups["flash"]
    block = flash.block_bytes
    phys = logical_bytes * (1.0 + flash.op_ratio)
    changes: dict[str, Any] = {}
    if "fdp" in groups and "ru_bytes" not in explicit:
        ru = block * (flash.dies // max(1, groups["fdp"].nrg))  # a full stripe of the reclaim group
        while phys / ru < MIN_LINES and ru > block and (ru // 2) % block == 0:
            ru //= 2
        changes["fdp.ru_bytes"] = ru
        notes += _narrow_stripe("reclaim units", "RUH", ru // block, flash.dies // max(1, groups["fdp"].nrg),
                                "ru_bytes")
    elif "fdp" not in groups and "zns" not in groups and "blocks_per_line" not in explicit:
        bpl = flash.dies
        while phys / (bpl * block) < MIN_LINES and bpl > 1:
            bpl //= 2
        changes["flash.blocks_per_line"] = 0 if bpl == flash.dies else bpl
        notes += _narrow_stripe("lines", "write frontier", bpl, flash.dies, "blocks_per_line")
    return changes, notes


def _narrow_stripe(unit: str, stream: str, span: int, dies: int, field: str) -> list[str]:
    """Say when a small device's units span fewer dies than it has: a stream's bandwidth is its span.

    The parallelism sizing raises the dies for the trace's write rate, the line sizing halves units to
    keep MIN_LINES of them; on a small, write-heavy trace both hold only with narrow stripes, and then
    latency differences between policies that use different numbers of streams include stripe width.
    """
    if span >= dies:
        return []
    return [f"{unit} span {span} of {dies} dies (to keep {MIN_LINES} of them on this capacity): one {stream} "
            f"gets {span}/{dies} of the program bandwidth, so write latencies include stripe width; set "
            f"{field} or fewer dies (channels, dies_per_channel) to choose otherwise"]


def _zone_geometry(groups: dict[str, Any], live_bytes: int) -> Any:
    """Zones over every die (as lines are), keeping ZnsParams' writable share, at least MIN_LINES of them."""
    flash, z = groups["flash"], groups["zns"]
    share = z.zone_cap_bytes / z.zone_bytes
    block = flash.block_bytes
    zone = block * flash.dies
    while live_bytes / (zone * share) < MIN_LINES and zone > block and (zone // 2) % block == 0:
        zone //= 2
    cap = max(flash.page_bytes, int(zone * share) // flash.page_bytes * flash.page_bytes)
    return with_overrides(z, {"zone_bytes": zone, "zone_cap_bytes": cap})


def _room_for_gc(groups: dict[str, Any], logical: int, line: int) -> tuple[int, int]:
    """The smallest logical capacity from ``logical`` up, in whole lines, whose layout leaves GC the lines
    it needs (ftl_state.line_budget: the kernel's own check), and those lines (frontiers + reserve + 1).

    The kernel's rule, not a proxy of it: a proxy from the nominal spare (``op_ratio x logical``) with
    every RUH's GC frontier counted raised ``ruh_type=persistently`` (8 RUHs: 16 frontiers) from 275 to
    293 reclaim units on the 0.07-OP synthetic trace, which ``initially`` ran on 275 (fill 0.94 against
    1.0, end-to-end WAF 1.376 against 1.838), while the kernel runs 275 in both (18 spare: 16 + 1 + 1).
    Unreachable (GC thresholds in percent of the lines grow with them): ``logical`` unchanged, and the
    device's build says what would do."""
    fdp = groups.get("fdp")

    def budget(cap: int) -> ftl_state.LineBudget:
        return ftl_state.line_budget(with_overrides(groups["flash"], {"logical_bytes": cap}), fdp)

    b = budget(logical)
    spare = b.frontiers + b.reserved + 1
    if b.short <= 0:
        return logical, spare
    op, nrg = groups["flash"].op_ratio, (fdp.nrg if fdp is not None else 1)
    # lines - live < op x live + 1 per group: below (spare - 1) / op lines each no capacity can do
    cap = max(logical, math.floor(nrg * (spare - 1) / op) * line)
    top = math.ceil(nrg * (spare + 1) / op + nrg) * line  # enough for thresholds in lines
    while cap <= top:
        if budget(cap).short <= 0:
            return cap, spare
        cap += line
    return logical, spare


def _parallelism(groups: dict[str, Any], explicit: set[str], write_bytes_per_s: float,
                 utilization: float) -> dict[str, Any]:
    """Channels and dies per channel so that the tier's mean write rate fits (see the module doc)."""
    flash = groups["flash"]
    rec: dict[str, Any] = {"tier_write_bytes_per_s": write_bytes_per_s, "write_utilization": utilization}
    if utilization <= 0 or write_bytes_per_s <= 0 or not flash.timing or \
            explicit & {"channels", "dies_per_channel", "flash.channels", "flash.dies_per_channel"}:
        rec["mode"] = "given"
    else:
        need = write_bytes_per_s / utilization
        die_bw = flash.nand_page_bytes * 1e9 / flash.page_program_ns if flash.page_program_ns else math.inf
        ch, dpc = flash.channels, flash.dies_per_channel
        while ch * flash.channel_bytes_per_s < need:
            ch *= 2
        while ch * dpc * die_bw < need:
            dpc *= 2
        groups["flash"] = with_overrides(flash, {"channels": ch, "dies_per_channel": dpc})
        rec["mode"] = "auto"
    f = groups["flash"]
    die_bw = f.nand_page_bytes * 1e9 / f.page_program_ns if f.page_program_ns else math.inf
    rec.update(channels=f.channels, dies_per_channel=f.dies_per_channel,
               program_bytes_per_s=min(f.dies * die_bw, f.channels * f.channel_bytes_per_s))
    return rec


def size_device(groups: dict[str, Any], explicit: set[str], *, peak_live_pages: int, max_object_pages: int,
                fill_ratio: float, strict: bool, zone_streams: int = 0, gc_free_zones: int = 0,
                tier: str = "ssd", write_bytes_per_s: float = 0.0, write_utilization: float = 0.0,
                owner: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return the device param groups with capacity (and line size) filled in, and a sizing record.

    ``explicit`` holds the field names the user set (bare and ``group.field``). ``owner`` names what
    fixed the capacity if the replay may not change it (a running VM): the "too small" errors then say
    how to get a bigger one there.
    """
    groups = dict(groups)
    pb = page_bytes_of(groups)
    cap_group = capacity_group(groups)
    cap_field = CAPACITY_FIELDS[cap_group]
    is_explicit = cap_field in explicit or f"{cap_group}.{cap_field}" in explicit
    need_pages = max(1, math.ceil(peak_live_pages / fill_ratio))
    rec: dict[str, Any] = {
        "mode": "explicit" if is_explicit else "auto",
        "fill_ratio": fill_ratio,
        "page_bytes": pb,
        "peak_live_pages": int(peak_live_pages),
        "peak_live_bytes_paged": int(peak_live_pages) * pb,
        "max_object_pages": int(max_object_pages),
        "notes": [],
    }
    if "flash" in groups:
        rec["parallelism"] = _parallelism(groups, explicit, write_bytes_per_s, write_utilization)
        op = groups["flash"].op_ratio
        if op >= 1.0:  # legal (a drive may be mostly spare), but 7 is a likely slip for 7%: say what it means
            rec["notes"].append(f"op_ratio {op:g}: the spare area is {op:g}x the logical capacity (7% is "
                                f"op_ratio=0.07); a GC with that much room moves almost nothing")
    if "zns" in groups:
        if not ({"zone_bytes", "zone_cap_bytes"} & explicit):
            groups["zns"] = _zone_geometry(groups, need_pages * pb)
            rec["zone_bytes"], rec["zone_cap_bytes"] = groups["zns"].zone_bytes, groups["zns"].zone_cap_bytes
            fl = groups["flash"]
            rec["notes"] += _narrow_stripe("zones", "open zone", groups["zns"].zone_bytes // fl.block_bytes,
                                           fl.dies, "zone_bytes")
        z = groups["zns"]
        zone_pages, cap_pages = z.zone_bytes // pb, z.zone_cap_bytes // pb
        if is_explicit:
            n_zones = groups["flash"].logical_bytes // z.zone_bytes
        else:
            data_zones = math.ceil(need_pages / cap_pages)
            n_zones = data_zones + zone_streams
            for _ in range(8):  # gc_free_zones=0 means max(2, zones/20): iterate to a fixed point
                reserve = gc_reserve_zones(n_zones, gc_free_zones)
                n_zones = data_zones + zone_streams + reserve
            n_zones = max(n_zones, z.max_active_zones)
            groups["flash"] = with_overrides(groups["flash"], {"logical_bytes": n_zones * z.zone_bytes})
        reserve = gc_reserve_zones(n_zones, gc_free_zones)
        usable = max(0, n_zones - zone_streams - reserve) * cap_pages
        rec.update(zones=n_zones, zone_pages=zone_pages, zone_cap_pages=cap_pages, usable_pages=usable)
        logical = groups["flash"].logical_bytes
    elif cap_group == "flash":
        if is_explicit:
            logical = groups["flash"].logical_bytes
        else:
            logical = need_pages * pb
        changes, notes = _line_fields(groups, explicit, logical)
        rec["notes"] += notes
        for k, v in changes.items():
            g, f = k.split(".")
            groups[g] = with_overrides(groups[g], {f: v})
            rec[f] = v
        if not is_explicit:
            # The FTL needs a few lines outside the live data; a tiny trace gets a device big enough for that.
            flash = groups["flash"]
            line = (groups["fdp"].ru_bytes if "fdp" in groups else flash.line_blocks * flash.block_bytes)
            min_logical, spare = _room_for_gc(groups, logical, line)
            if logical < min_logical:
                rec["notes"].append(
                    f"logical capacity raised from {format_size(logical)} to {format_size(min_logical)}: the FTL keeps "
                    f"{spare} lines of {format_size(line)} per reclaim group outside the live data")
                logical = min_logical
            logical = -(-logical // pb) * pb
            groups["flash"] = with_overrides(groups["flash"], {"logical_bytes": logical})
        usable = groups["flash"].logical_bytes // pb
        logical = groups["flash"].logical_bytes
    else:  # memory: the capacity is the live data's pages over the fill ratio
        if not is_explicit:
            groups[cap_group] = with_overrides(groups[cap_group], {cap_field: need_pages * pb})
        logical = getattr(groups[cap_group], cap_field)
        usable = logical // pb
    rec["logical_bytes"] = int(logical)
    rec["usable_pages"] = int(usable)
    rec["fill_ratio_effective"] = peak_live_pages / usable if usable else math.inf
    what = f"{owner} is" if owner else "device"
    if max_object_pages > usable:
        raise KvbedError(
            f"{what} too small: the trace's largest object needs {max_object_pages} units of {format_size(pb)} but the "
            f"{'namespace' if owner else 'device'} holds {usable} (logical {format_size(logical)})")
    if strict and peak_live_pages > usable:
        if owner:
            need = format_size(math.ceil(peak_live_pages / max(usable, 1) * logical / MiB) * MiB)
            fix = (f"start a VM with {cap_field} of at least ~{need} (`kvbed up ... --param {cap_field}=...`), or drop "
                   f"--vm for a VM sized from the trace, or --param strict_capacity=false to let the layout "
                   f"evict by the tier's policy")
        else:
            fix = (f"raise {cap_field}, or --param strict_capacity=false to let the layout evict by the tier's "
                   f"policy")
        raise KvbedError(
            f"{what} too small for the live data: tier {tier} peaks at {format_size(peak_live_pages * pb)} "
            f"({peak_live_pages} units of {format_size(pb)}) but the {'namespace' if owner else 'device'} holds "
            f"{format_size(usable * pb)}; {fix}")
    return groups, rec


def explicit_keys(pairs: list[str]) -> set[str]:
    out = set()
    for p in pairs:
        k = p.split("=", 1)[0].strip().replace("-", "_")
        out.add(k)
        out.add(k.rpartition(".")[2])
    return out
