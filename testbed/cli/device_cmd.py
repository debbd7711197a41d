"""``kvbed device``: run synthetic workloads on the device models, list them, show their params.

``kvbed device run`` prints a fio-like summary (WAF, GC, latency percentiles,
simulator speed) or, with ``--json``, the result dict; ``-o DIR`` also writes
``DIR/result.json`` atomically.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import click

from kvbed.core.errors import Interrupted, KvbedError
from kvbed.core.params import with_options
from testbed.cli.options import param_option
from testbed.cli.registry_help import LazyHelpOption, names


def _devices():
    import devicemodels  # registers devices and GC policies

    return devicemodels


@click.group("device")
def device() -> None:
    """Run synthetic workloads on the flash (conv/fdp/zns), memory (dram/cxl) and CXL-SSD device models."""


@device.command("list")
def list_cmd() -> None:
    """Devices, GC victim policies, CXL-SSD cache policies and workloads."""
    dm = _devices()
    from devicemodels.workloads import WORKLOADS

    click.echo("devices:      " + ", ".join(dm.DEVICES.names()))
    for name, text in dm.DEVICES.summaries().items():
        click.echo(f"device        {name:13s} {text}")
    for name, text in dm.GC_POLICIES.summaries().items():
        click.echo(f"gc policy     {name:13s} {text}")
    for name, text in dm.CACHE_POLICIES.summaries().items():
        click.echo(f"cache policy  {name:13s} {text} (cxl-ssd)")
    for name, text in WORKLOADS.summaries().items():
        click.echo(f"workload      {name:13s} {text}")


@device.command("params")
@click.argument("name")
def params_cmd(name: str) -> None:
    """Parameters of device NAME (``--param`` keys), with defaults, units or choices, and meaning."""
    from kvbed.core.params import describe

    dm = _devices()
    cls = dm.DEVICES.get(name)
    for group, pcls in cls.param_classes.items():
        click.echo(f"[{group}] {pcls.__name__}")
        for r in describe(pcls):
            kind = "|".join(r["choices"]) if r["choices"] else (r["unit"] or "")
            click.echo(f"  {r['name']:22s} {r['type']:5s} {r['default']:>12s} {kind:14s} {r['help']}")


def _fmt_ns(v: float) -> str:
    for unit, div in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if v >= div:
            return f"{v / div:.2f}{unit}"
    return f"{v:.0f}ns"


def _print_summary(res: dict) -> None:
    cfg, job, sim = res["config"], res["job"], res["sim"]
    geo = job.get("geometry", {})
    head = f"{cfg['device']}: (workload={cfg['workload']}, writes={cfg['writes_x']}x, warmup={cfg['warmup_x']}x"
    if "op_ratio_effective" in geo:
        head += f", op={geo['op_ratio_effective'] * 100:.2f}%"
    if "gc" in job:
        head += f", gc={job['gc']['policy']}"
    head += f", placement={cfg['placement']}, bs={cfg['bs_pages']} pages)"
    click.echo(head)
    sim_s = job.get("simulated_time_ns", 0) / 1e9
    for opname, e in job.get("latency", {}).items():
        lat = e["lat_ns"]
        line = f"  {opname}: ios={e['ios']}"
        if "io_bytes" in e:
            line += f", io={e['io_bytes'] / 2**20:.1f}MiB"
        if sim_s > 0:
            line += f", IOPS={e['ios'] / sim_s:.0f}"
            if "io_bytes" in e:
                line += f", BW={e['io_bytes'] / sim_s / 2**20:.1f}MiB/s"
        click.echo(line)
        click.echo(f"    lat (nsec): min={lat['min']}, max={lat['max']}, avg={lat['mean']:.2f}, stdev={lat['stddev']:.2f}")
        pct = lat.get("percentile", {})
        items = [f"{float(k):5.2f}th=[{_fmt_ns(v):>8s}]" for k, v in pct.items()]
        click.echo("    lat percentiles:")
        for i in range(0, len(items), 4):
            click.echo("     | " + ", ".join(items[i:i + 4]))
    click.echo(f"  WAF={job['waf']:.4f}  host={job['host_bytes_written'] / 2**30:.2f}GiB  "
               f"media={job['media_bytes_written'] / 2**30:.2f}GiB")
    if "gc" in job:
        g = job["gc"]
        click.echo(f"  GC: runs={g['runs']} (fg={g['fg_runs']}, bg={g['bg_runs']}), pages moved={g['pages_moved']}, "
                   f"valid/victim={g['valid_pages_per_victim_mean']:.1f}")
        line = f"  fg GC stall: total={_fmt_ns(g['fg_stall_ns'])} (sum over {g['fg_stall_lat_ns']['N']} stalls)"
        if "write_cmds" in g:  # per write command: how many waited (of all), and how long (among them)
            line += (f", write cmds stalled={g['fg_stalled_write_cmds']} of {g['write_cmds']} "
                     f"({100 * g['fg_stalled_write_cmds_ratio']:.3f}%)")
            w = g["fg_stall_per_write_cmd_ns"]
            if w["N"]:
                p = w["percentile"]
                line += (f", wait among them p50={_fmt_ns(p['50.000000'])} p99={_fmt_ns(p['99.000000'])} "
                         f"max={_fmt_ns(w['max'])}")
        click.echo(line)
    if "zones" in job:
        z = job["zones"]
        click.echo(f"  zones: resets={z['resets']}, finishes={z['finishes']}, open={z['open']}, active={z['active']}, "
                   f"implicit closes={z['implicit_closes']}")
    if "fdp" in job:
        s = job["fdp"]["stats_log"]
        click.echo(f"  FDP log 0x22: HBMW={s['hbmw']} MBMW={s['mbmw']} MBE={s['mbe']}")
    if "cache" in job:
        k = job["cache"]
        click.echo(f"  cache: {k['policy']}, {k['cache_bytes'] / 2**20:.1f}MiB in {k['sets']} sets x {k['ways']} "
                   f"ways of {k['unit_bytes'] // 1024}KiB; read hit ratio={k['read_hit_ratio']:.4f}, write hit "
                   f"ratio={k['write_hit_ratio']:.4f}, fills={k['fills']}, write-backs={k['writebacks']}, "
                   f"flash WAF={job['flash']['waf']:.4f}")
        for what in ("hit", "miss"):
            lat = k[f"read_{what}_latency"]["lat_ns"]
            if lat["N"]:
                p = lat["percentile"]
                click.echo(f"    read {what}: ios={lat['N']}, avg={_fmt_ns(lat['mean'])}, "
                           f"p50={_fmt_ns(p['50.000000'])}, p99={_fmt_ns(p['99.000000'])}")
    w = job.get("wear")
    if w:
        click.echo(f"  wear: erase count max={w['erase_count_max']} mean={w['erase_count_mean']:.2f}, "
                   f"lifetime consumed={w['lifetime_consumed'] * 100:.3f}% (worst block "
                   f"{w['lifetime_consumed_worst_block'] * 100:.3f}%)")
    click.echo(f"  sim: {sim['page_programs_per_s'] / 1e6:.1f}M page programs/s (measured phase "
               f"{sim['measured_wall_s']:.2f}s, total {sim['wall_s']:.2f}s wall)")


@device.command("run")
@click.option("--device", "device_name", default="conv", show_default=True, cls=LazyHelpOption,
              lazy_help={"names": names("devicemodels:DEVICES")},
              help="Device model: {names} (see `device list`).")
@click.option("--workload", default="uniform", show_default=True, cls=LazyHelpOption,
              lazy_help={"names": names("devicemodels.workloads:WORKLOADS")}, help="Workload: {names}.")
@click.option("--op", "op_ratio", type=float, default=None, help="Over-provisioning (physical-logical)/logical, e.g. 0.07.")
@click.option("--gc", "gc_policy", default=None, cls=LazyHelpOption,
              lazy_help={"names": names("devicemodels:GC_POLICIES")},
              help="GC victim policy: {names} (see `device list`).")
@click.option("--pages", type=int, default=None, help="Logical pages (sets logical_bytes = pages x page_bytes).")
@click.option("--writes-x", type=float, default=10.0, show_default=True, help="Measured host writes, x capacity.")
@click.option("--warmup-x", type=float, default=1.0, show_default=True,
              help="Warm-up writes after the sequential fill (counted apart), x capacity.")
@click.option("--no-fill", is_flag=True, help="Skip the sequential fill before the warm-up.")
@click.option("--bs-pages", type=int, default=1, show_default=True, help="Pages per op.")
@click.option("--read-frac", type=float, default=0.0, show_default=True, help="Fraction of ops that are reads.")
@click.option("--iops", type=float, default=None, help="Op arrival rate (default: from --load).")
@click.option("--load", type=float, default=0.5, show_default=True,
              help="Share of the dies' program bandwidth used by host writes plus GC (warm-up WAF).")
@click.option("--placement", type=click.Choice(["mixed", "separate"]), default=None,
              help="Placement ids per stream (default: separate for hotcold on a multi-RUH device).")
@param_option("device parameter override, e.g. op_ratio=7% nruh=8")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the workload's and the device's random choices.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("-o", "--output", type=click.Path(file_okay=False), default=None, help="Write DIR/result.json.")
def run_cmd(device_name, workload, op_ratio, gc_policy, pages, writes_x, warmup_x, no_fill, bs_pages, read_frac,
            iops, load, placement, params, seed, as_json, output) -> None:
    """Run a synthetic workload on a device model and report WAF, GC, latency and speed."""
    dm = _devices()
    from devicemodels.synthetic import run_synthetic
    from kvbed.core.atomicio import check_can_make_dir, write_json

    cls = dm.DEVICES.get(device_name)
    # options that are parameters take the --param path
    fields = {f.name for g in cls.param_classes.values() for f in dataclasses.fields(g)}
    for opt, key, val in (("--op", "op_ratio", op_ratio), ("--gc", "gc_policy", gc_policy)):
        if val is not None and key not in fields:
            raise KvbedError(f"{opt} does not apply to device {device_name}")
    overrides = with_options(params, {"op_ratio": op_ratio, "gc_policy": gc_policy})
    if pages is not None:
        if pages <= 0:
            raise KvbedError(f"--pages must be positive, got {pages}")
        groups = cls.param_groups(overrides)
        owner, key = next((g, k) for g in groups.values() for k in ("logical_bytes", "dram_bytes", "cxl_bytes")
                          if hasattr(g, k))
        overrides = with_options(overrides, {key: pages * owner.page_bytes})
    if output:
        check_can_make_dir(output, f"-o {output}")
    kwargs = dict(overrides=overrides, writes_x=writes_x, warmup_x=warmup_x, fill=not no_fill, bs_pages=bs_pages,
                  read_frac=read_frac, iops=iops, load=load, placement=placement, seed=seed)
    try:  # Ctrl-C: the figures are those of the whole measured phase or none, so nothing is kept
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import Progress

            with Progress(console=Console(stderr=True), transient=True) as bar:
                task = bar.add_task("simulating (measured phase)", total=None)
                res = run_synthetic(device_name, workload, **kwargs,
                                    progress=lambda done, total: bar.update(task, completed=done, total=total))
        else:
            res = run_synthetic(device_name, workload, **kwargs)
        if output:
            try:
                write_json(f"{output}/result.json", res)
            except OSError as exc:
                raise KvbedError(f"cannot write result.json: {exc.strerror or exc}", where=output) from None
    except KeyboardInterrupt:
        where = f" ({output}/result.json not written)" if output else ""
        raise Interrupted(f"during the simulation: nothing written{where}") from None
    if as_json:
        click.echo(json.dumps(res, indent=2, default=str))
    else:
        _print_summary(res)
