"""``kvbed replay`` and ``kvbed report``.

Options of ``replay`` are generated from :class:`kvreplay.replay.params.ReplayParams`
(fields marked ``cli``); every other field of the replay, layout, hint policy and
device parameter dataclasses is a ``--param k=v`` (units accepted: ``ru_bytes=1GiB``,
``op_ratio=7%``, ``half_life_ns=30s``). ``--config RUN/config.json`` reruns a
finished run exactly.

``--target vm`` runs the same ops through a QEMU guest (``testbed.vm.replay``):
on ``--vm NAME`` (a VM from ``kvbed up``, whose geometry the replay adopts) or
on an ephemeral VM sized from the trace and torn down afterwards. Exit status:
0 done; 1 a VM cross-check failed (run written, each failure on one stderr
line); 2 bad input or a VM that failed during the run (one line; the completed
part is written as a partial result); 130 interrupted (Ctrl-C: the run is
written marked incomplete, see testbed.interrupt, or nothing if no row was
replayed yet).
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import click

from kvreplay.replay.params import ReplayParams
from testbed.cli.options import field_option, param_option
from testbed.cli.registry_help import LazyChoice, LazyHelpOption, names, pairs
from testbed.plot_helper import draw_plots, plot_helper
from kvbed.core.errors import Interrupted, KvbedError
from testbed.interrupt import interruptible

if TYPE_CHECKING:  # rich, the plots and the run files are imported where they are used (a replay's start-up)
    from rich.console import Console
    from rich.progress import Progress


def _console(err: bool = False) -> Console:
    from testbed.cli.console import console

    return console(err)


def _replay_options(f: Callable) -> Callable:
    """One ``--field-name`` per ReplayParams field marked cli (flags for booleans)."""
    defaults = ReplayParams()
    for fld in reversed(dataclasses.fields(ReplayParams)):
        if not fld.metadata.get("cli"):
            continue
        default = str(getattr(defaults, fld.name))
        if fld.type in (bool, "bool"):
            f = field_option(fld, default, is_flag=True, default=None)(f)
        else:
            metavar = {"int": "N", "float": "X"}.get(str(fld.type), "NAME")
            f = field_option(fld, default, type=str, default=None, metavar=metavar)(f)
    return f


def _param_epilog() -> str:
    """Every --param key, from the dataclasses themselves (``kvbed params`` shows defaults and meaning)."""
    from testbed.paramdocs import keys_epilog, parameter_sets

    sets = [n for n in parameter_sets() if n not in ("tier", "synth", "crossover") and not n.startswith("fault.")]
    return (
        "\b\n--param keys (units accepted: 1GiB, 2ms, 7%; `kvbed params` gives defaults, units, meaning):\n"
        + keys_epilog(sets) + "\n"
        "Defaults: 1 MiB mapping unit, full-stripe RUs/zones, capacity = peak live data / fill ratio,\n"
        "dies raised until the busiest second of writes fits (see kvreplay/replay/sizing.py).\n"
        "--vm NAME: the VM's namespace size, page, FDP/ZNS/CXL geometry are fixed at `kvbed up`;\n"
        "other device fields (timing, channels, op_ratio, GC) shape the model that gives WAF/GC/erases.\n"
        "Ephemeral VM: sized like an embedded run; namespace on QEMU null-co (backing=null: no host disk,\n"
        "reads return zeros) unless backing=file. result.json `sources` says where each figure comes from\n"
        "(guest: latency; device log: FDP host bytes; model: WAF/GC/erases).\n"
        "Exit status: 0 done; 1 a VM cross-check failed (one stderr line each); 2 bad input, or the VM\n"
        "failed mid-run (the completed part is written as a partial result); 130 Ctrl-C (what was replayed\n"
        "is written marked incomplete; a second Ctrl-C aborts, writing nothing)."
    )


class _RichProgress:
    def __init__(self, prog: Progress):
        self.prog = prog
        self.task = None

    def phase(self, name: str, total: int) -> None:
        if self.task is not None:
            self.prog.update(self.task, visible=False)
        self.task = self.prog.add_task(name, total=total)

    def advance(self, n: int) -> None:
        if self.task is not None:
            self.prog.advance(self.task, n)


@contextmanager
def _progress(enabled: bool) -> Iterator[_RichProgress | None]:
    if not enabled:
        yield None
        return
    console = _console(err=True)
    if not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("events"), TimeElapsedColumn(), console=console, transient=True) as prog:
        yield _RichProgress(prog)


class _ReplayCommand(click.Command):
    """The --param keys of the epilog come from every parameter set (VM, capture, ... included): imported for
    --help only, not by every replay."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.epilog is None:
            self.epilog = _param_epilog()
        super().format_epilog(ctx, formatter)


@click.command("replay", cls=_ReplayCommand)
@click.argument("trace", metavar="[TRACE]", required=False, type=click.Path(dir_okay=False))
@click.option("--device", type=LazyChoice("devicemodels:DEVICES"), default=None,
              help="device model (`kvbed device list` says what each is) [default: fdp]")
@click.option("--hints", default=None, metavar="POLICY", cls=LazyHelpOption,
              lazy_help={"names": names("kvreplay.hints:HINTS")},
              help="placement-hint policy: {names} [default: none], or one of your own: module:Class, "
                   "path/file.py:Class (docs/development/extending.md); "
                   "with --tiers also TIER=POLICY,... (tiers not named keep none)")
@click.option("--tiers", default=None, metavar="T1,T2,...", cls=LazyHelpOption,
              lazy_help={"names": names("kvreplay.replay.multitier:TIER_DEVICES")},
              help="multi-tier replay: every named tier ({names}) on its own device in one run, plus "
                   "request-level KV-ready and TTFT (one fio job per tier)")
@click.option("--tier-device", "tier_devices", multiple=True, metavar="TIER=DEVICE", cls=LazyHelpOption,
              lazy_help={"pairs": pairs("kvreplay.replay.multitier:TIER_DEVICES")},
              help="with --tiers: the device of a tier [defaults: {pairs}] (repeatable)")
@click.option("--on-hit", "on_hit", type=LazyChoice("kvreplay.replay.ttft:ON_HIT"), default=None,
              help="with --tiers: a chunk held in a lower tier is loaded, recomputed, or the cheaper of the two "
                   "per request (all three are reported; this one heads the summary) [default: load]")
@_replay_options
@click.option("--fault", "faults", multiple=True, metavar="KIND@TIME[,K=V...]", cls=LazyHelpOption,
              lazy_help={"names": names("kvreplay.faults:FAULTS")},
              help="inject a fault (repeatable), KIND one of {names}; TIME in trace time from the first event, "
                   "e.g. power-loss@2s,index=stale (keys: `kvbed params fault.KIND`)")
@click.option("--fault-file", "fault_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="faults as [[fault]] tables in a TOML file (kind = \"power-loss\", at = \"2s\", index = ...)")
@click.option("--contract", "contract", default=None, metavar="NAME", cls=LazyHelpOption,
              lazy_help={"names": names("kvreplay.faults:CONTRACTS")},
              help="recovery contract every load is checked with: {names} [default: none]")
@param_option("any replay/layout/hint/device parameter, e.g. ru_bytes=1GiB op_ratio=7% error_rate=0.1 "
              "classes=4 logical_bytes=2TiB")
@click.option("--target", "target", type=click.Choice(["embedded", "vm"]), default=None,
              help="where the ops go: the embedded device model, or a QEMU VM (guest kernel + emulated device; "
                   "the model of the same geometry still gives WAF/GC) [default: embedded; vm with --vm]")
@click.option("--vm", "vm_name", default=None, metavar="NAME",
              help="--target vm on this running VM (`kvbed up`); without it an ephemeral VM sized from the trace "
                   "is started and torn down")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="rerun a finished run from its config.json (other options must not be given)")
@click.option("-o", "--output", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="run directory [default: results/<trace>-<device>-<hints>[-<fault>...][-contract-<name>]-s<seed>; "
                   "with --tiers results/<trace>-<tier>.<device>[.<hints>]...-s<seed>]")
@click.option("--no-plots", is_flag=True, help="do not draw the PNG plots")
@click.option("-q", "--quiet", is_flag=True, help="no progress bar and no summary table")
@click.option("--json", "as_json", is_flag=True, help="print the job summary as JSON")
def replay(trace: str | None, device: str | None, hints: str | None, tiers: str | None,
           tier_devices: tuple[str, ...], on_hit: str | None, faults: tuple[str, ...], fault_file: Path | None,
           contract: str | None, params: tuple[str, ...],
           target: str | None, vm_name: str | None, config_path: Path | None, out: Path | None, no_plots: bool,
           quiet: bool, as_json: bool, **options: Any) -> None:
    """Replay the TRACE's tier (default ssd) on a device with a placement-hint policy: an embedded device
    model, or (--target vm) a QEMU guest whose emulated device gets the same ops as NVMe commands.

    \b
    Examples:
      kvbed replay sample.parquet --device fdp --hints oracle -o results/oracle
      kvbed replay mc.parquet --device zns --hints predicted --param fill_ratio=1.0
      kvbed replay --config results/oracle/config.json -o results/oracle-again
      kvbed replay sample.parquet --target vm --device fdp --hints oracle   # ephemeral VM
      kvbed up --device fdp --name f0 --param logical_bytes=8GiB && kvbed replay sample.parquet --vm f0
      kvbed replay mc.parquet --tiers cpu,cxl,ssd --tier-device cxl=cxl-ssd --hints ssd=oracle --on-hit best
    """
    from kvreplay.replay.engine import Replay, RunConfig, build_config
    from testbed.results import check_out_dir, is_run_dir, write_run
    from testbed.runname import default_run_dir

    given = {k: v for k, v in options.items() if v is not None}
    fault_texts = list(faults)
    if fault_file is not None:
        from kvreplay.faults import faults_from_file

        fault_texts += faults_from_file(fault_file)
    if fault_texts:
        given["fault"] = ";".join(fault_texts)
    if contract is not None:
        given["contract"] = contract
    if (fault_texts or contract) and tiers is not None:
        raise KvbedError("--fault/--contract with --tiers: not yet (faults run on a single-tier replay)")
    multi_only = {"--tier-device": tier_devices, "--on-hit": on_hit}
    if tiers is not None or (config_path is not None and _is_multitier(config_path)):
        if device or target or vm_name:
            raise KvbedError("--tiers gives each tier its device (--tier-device TIER=DEVICE); --device, --target "
                             "and --vm are for single-tier runs")
        return _replay_tiers(trace, tiers, tier_devices, hints, on_hit, params, config_path, out, no_plots, quiet,
                             as_json, given)
    for opt, val in multi_only.items():
        if val:
            raise KvbedError(f"{opt} needs --tiers")
    if vm_name is not None and target == "embedded":
        raise KvbedError("--vm runs on a VM: it needs --target vm (or no --target)")
    on_vm = target == "vm" or vm_name is not None
    if config_path is not None:
        if trace or device or hints or params or given or target or vm_name:
            raise KvbedError("--config reruns a saved run: give no TRACE, --device, --hints, --param, --fault, --contract, --target, "
                             "--vm or replay options")
        try:
            raw = json.loads(config_path.read_text())
        except FileNotFoundError:
            raise KvbedError("no such file", where=str(config_path)) from None
        except ValueError as exc:
            raise KvbedError(f"not valid JSON ({exc})", where=str(config_path)) from None
        cfg = RunConfig.from_dict(raw, where=str(config_path))
        on_vm = (cfg.target or {}).get("kind") == "vm"
    else:
        if not trace:
            raise KvbedError("missing TRACE (or --config RUN/config.json)")
        if "time_scale" in given and given.get("as_fast_as_possible"):
            raise KvbedError("--time-scale and --as-fast-as-possible exclude each other")
        if on_vm:
            from testbed.vm.replay_config import build_vm_config

            cfg = build_vm_config(trace, device, hints or "none", list(params), given, vm=vm_name)
        else:
            cfg = build_config(trace, device or "fdp", hints or "none", list(params), given)
    out = check_out_dir(out or default_run_dir(cfg, on_vm=on_vm))
    earlier = is_run_dir(out)

    with plot_helper(not no_plots) as helper, interruptible() as intr:
        intr.enter("replay")
        with _progress(not quiet) as prog:
            if on_vm:
                from testbed.vm.replay import replay_vm

                con = _console(err=True)
                log = (lambda s: None) if quiet else (lambda s: con.print(f"[dim]{s}[/dim]"))
                parts = replay_vm(cfg, progress=prog, should_stop=intr, log=log)
            else:
                parts = Replay(cfg, progress=prog, should_stop=intr).run()
        run_dir = write_run(out, parts, plots=None if no_plots else partial(draw_plots, helper), interrupt=intr)
    job = parts["result"]["jobs"][0]
    if as_json:
        click.echo(json.dumps(_summary(job, parts), indent=2, default=str))
    elif not quiet:
        _print_summary(_console(), job, parts, run_dir)
    res = parts["result"]
    _warn_saturated(res)
    _note_index_key(res)
    if res.get("error"):  # the target failed mid-run: what completed is saved, the run is not done
        raise KvbedError(f"{res['error']} (partial result, stopped at row {res.get('stopped_at_row')}, in {run_dir})")
    if res.get("interrupted"):
        raise Interrupted(_interrupted_text(res, run_dir))
    _note_replaced(earlier, run_dir)  # after the one-line endings above, which stay one line
    if res["incomplete"]:
        click.echo(f"kvbed: partial result (stopped at row {res.get('stopped_at_row')}) in {run_dir}", err=True)
    failed = [c for c in (res.get("vm") or {}).get("cross_checks") or [] if not c["ok"]]
    for c in failed:
        click.echo(f"kvbed: cross-check FAILED: {c['check']}: expected {c['expected']}, observed {c['observed']} "
                   f"({run_dir / 'result.json'})", err=True)
    if failed:
        click.get_current_context().exit(1)


def _note_replaced(earlier: bool, run_dir: Path) -> None:
    """A run written over an earlier one says so: a report made of that directory described another run."""
    if earlier:
        click.echo(f"kvbed: note: replaced the earlier run in {run_dir}", err=True)


def _is_multitier(config_path: Path) -> bool:
    try:
        return "tiers" in json.loads(config_path.read_text())
    except (OSError, ValueError, TypeError):
        return False  # the single-tier path reports the file's problem


def _replay_tiers(trace: str | None, tiers: str | None, tier_devices: tuple[str, ...], hints: str | None,
                  on_hit: str | None, params: tuple[str, ...], config_path: Path | None, out: Path | None,
                  no_plots: bool, quiet: bool, as_json: bool, given: dict[str, Any]) -> None:
    from kvreplay.replay.multitier import MultiTierConfig, MultiTierReplay, build_multitier_config, parse_tier_map
    from testbed.results import check_out_dir, is_run_dir, write_run
    from testbed.runname import default_run_dir

    if config_path is not None:
        if trace or tiers or tier_devices or hints or on_hit or params or given:
            raise KvbedError("--config reruns a saved run: give no TRACE, --tiers, --tier-device, --hints, --on-hit, "
                             "--param or replay options")
        cfg = MultiTierConfig.from_dict(json.loads(config_path.read_text()), where=str(config_path))
    else:
        if not trace:
            raise KvbedError("missing TRACE (or --config RUN/config.json)")
        names = [t.strip() for t in (tiers or "").split(",") if t.strip()]
        hint_map = {"": hints} if hints and "=" not in hints else parse_tier_map([hints or ""], "--hints", names)
        cfg = build_multitier_config(trace, names, parse_tier_map(tier_devices, "--tier-device", names), hint_map,
                                     list(params), {**given, "on_hit": on_hit})
    out = check_out_dir(out or default_run_dir(cfg))
    earlier = is_run_dir(out)
    with plot_helper(not no_plots) as helper, interruptible() as intr:
        intr.enter("replay")
        with _progress(not quiet) as prog:
            parts = MultiTierReplay(cfg, progress=prog, should_stop=intr).run()
        run_dir = write_run(out, parts, plots=None if no_plots else partial(draw_plots, helper), interrupt=intr)
    res = parts["result"]
    if as_json:
        click.echo(json.dumps(_tiers_summary(parts), indent=2, default=str))
    elif not quiet:
        _print_tiers_summary(_console(), parts, run_dir)
    _warn_saturated(res)
    if res.get("error"):
        raise KvbedError(f"{res['error']} (partial result in {run_dir})")
    if res.get("interrupted"):
        raise Interrupted(_interrupted_text(res, run_dir))
    _note_replaced(earlier, run_dir)
    if res["incomplete"]:
        click.echo(f"kvbed: partial result in {run_dir}", err=True)


def _interrupted_text(res: dict[str, Any], run_dir: Path) -> str:
    """The one line a run stopped by Ctrl-C ends with: where it stopped and what the directory holds."""
    phase = res["interrupted"]
    if phase == "replay":
        row = res.get("stopped_at_row")
        total = (res.get("scan") or {}).get("rows")
        at = f" (stopped at row {row:,}{f' of {total:,}' if total else ''})" if row is not None else ""
        return f"during the replay{at}: what was replayed is written without plots, marked incomplete, in {run_dir}"
    what = "with its plots partly drawn" if phase == "plotting" else "without plots"
    return f"while {phase}: the run is written whole {what}, marked incomplete, in {run_dir}"


def _note_index_key(res: dict[str, Any]) -> None:
    """One stderr line when faults ran with the host index keyed by object id (no content keys in the trace)."""
    f = res.get("faults")
    if f and f.get("injected") and f.get("index_key") == "object":
        click.echo(f"kvbed: note: {f['index_key_note']}", err=True)


def _warn_saturated(res: dict[str, Any]) -> None:
    """One stderr line per saturated job (also with --quiet and --json): its tails are queueing. Not for a run
    that failed or was interrupted: that one ends with its own single line."""
    from testbed.labels import saturation_warning

    if res.get("error") or res.get("interrupted"):
        return
    jobs = res["jobs"]
    for j in jobs:
        w = saturation_warning(j.get("saturation"))
        if w:
            tier = f" (tier {j['tier']})" if len(jobs) > 1 else ""
            click.echo(f"kvbed: warning{tier}: {w}", err=True)


def _tiers_summary(parts: dict[str, Any]) -> dict[str, Any]:
    res = parts["result"]
    req = res.get("requests") or {}
    pct = lambda lat, p: (lat or {}).get("percentile", {}).get(p)  # noqa: E731
    hit = lambda tier, k: (req.get("tiers") or {}).get(tier, {}).get(k)  # noqa: E731
    return {
        "tiers": {j["tier"]: {"device": j["device"], "hints": j["hints"], "waf": j["waf"],
                              "ref_hit_ratio": hit(j["tier"], "ref_hit_ratio"),
                              "lookup_hit_ratio": hit(j["tier"], "lookup_hit_ratio"),
                              "object_read_p50_ns": pct((j.get("object_read") or {}).get("lat_ns"), "50.000000"),
                              "object_read_p99_ns": pct((j.get("object_read") or {}).get("lat_ns"), "99.000000"),
                              "gc_stall": j.get("gc_stall"), "saturation": j.get("saturation")}
                  for j in res["jobs"]},
        "on_hit": req.get("on_hit"),
        "ttft": {m: {"mean_ns": v["ttft_ns"]["mean"], "p50_ns": pct(v["ttft_ns"], "50.000000"),
                     "p99_ns": pct(v["ttft_ns"], "99.000000")} for m, v in (req.get("modes") or {}).items()},
        "incomplete": res["incomplete"],
        "wall_s": parts["runtime"]["wall_s"],
        "jit_s": parts["runtime"]["jit_s"],
        "events_per_s": parts["runtime"]["events_per_s"],
    }


def _print_tiers_summary(con: Console, parts: dict[str, Any], run_dir: Path) -> None:
    from rich.table import Table

    from testbed.labels import saturation_cell
    from testbed.report import fmt_ns

    s = _tiers_summary(parts)
    t = Table(title="multi-tier replay")
    for col in ("tier", "device", "hints", "WAF", "hits / all chunks", "hits / lookups", "load p50", "load p99",
                "writes GC-stalled", "backlogged"):
        t.add_column(col)
    ratio = lambda v: f"{100 * v:.1f}%" if v is not None else "-"  # noqa: E731  (as trace import/stats show them)
    for tier, r in s["tiers"].items():
        gs = r["gc_stall"] or {}
        t.add_row(tier, r["device"], r["hints"], f"{r['waf']:.4f}" if r["waf"] is not None else "-",
                  ratio(r["ref_hit_ratio"]), ratio(r["lookup_hit_ratio"]),
                  fmt_ns(r["object_read_p50_ns"]), fmt_ns(r["object_read_p99_ns"]),
                  f"{100 * gs['stalled_write_cmds_ratio']:.2f}%" if gs else "-", saturation_cell(r["saturation"]))
    t.caption = ("hits / all chunks: the share of every request's chunks the tier served; hits / lookups: among "
                 "the chunks looked up in it (a request stops at its first chunk no tier holds)")
    con.print(t)
    q = Table(title=f"TTFT estimate (headline: on-hit {s['on_hit']})")
    for col in ("on hit", "mean", "p50", "p99"):
        q.add_column(col)
    for mode, r in s["ttft"].items():
        q.add_row(mode, fmt_ns(r["mean_ns"]), fmt_ns(r["p50_ns"]), fmt_ns(r["p99_ns"]))
    con.print(q)
    jit = f" + {s['jit_s']:.1f} s compiling kernels" if s["jit_s"] >= 0.05 else ""
    con.print(f"{len(s['tiers'])} tiers in {s['wall_s'] - s['jit_s']:.1f} s ({s['events_per_s'] or 0:,.0f} trace "
              f"events/s){jit}; run directory {run_dir}")  # the seconds events_per_s divides by


def _summary(job: dict[str, Any], parts: dict[str, Any]) -> dict[str, Any]:
    pct = lambda e, p: (e or {}).get("lat_ns", {}).get("percentile", {}).get(p)  # noqa: E731
    return {
        "device": job["device"], "hints": job["hints"], "waf": job["waf"], "host_waf": job["host_waf"],
        "end_to_end_waf": job["end_to_end_waf"], "gc_count": job["gc_count"],
        "gc_stall_ns": job["gc_stall_ns"],  # a sum over stalls: gc_stall.total_ns
        "gc_stall": job.get("gc_stall"), "saturation": job.get("saturation"),
        "erases": job["erases"], "zone_resets": job["zone_resets"],
        "object_read_p99_ns": pct(job.get("object_read"), "99.000000"),
        "write_p99_ns": pct(job.get("write"), "99.000000"),
        "incomplete": parts["result"]["incomplete"],
        "wall_s": parts["runtime"]["wall_s"],
        "jit_s": parts["runtime"]["jit_s"],
        "events_per_s": parts["runtime"]["events_per_s"],
        **({"target": "vm", "cross_checks_ok": parts["result"]["vm"]["cross_checks_ok"],
            "sources": parts["result"]["sources"]} if "vm" in parts["result"] else {}),
    }


def _device_size(sz: dict[str, Any]) -> str:
    """The drive's size and how full it was at the peak; on a zoned drive the fill is of the space left for data
    (zone capacity below zone size, less the zones kept for GC and open streams: sizing's ``usable_pages``),
    which the logical size alone would overstate."""
    from testbed.report import fmt_bytes

    fill = f"{sz.get('fill_ratio_effective', 0):.3f}"
    if "zones" in sz:
        usable = sz["usable_pages"] * sz["page_bytes"]
        return (f"{fmt_bytes(sz.get('logical_bytes'))} logical, {fmt_bytes(usable)} usable for data (zone "
                f"capacity, less GC-reserve and open-stream zones) ({sz.get('mode')}, fill {fill} of that at peak)")
    return f"{fmt_bytes(sz.get('logical_bytes'))} logical ({sz.get('mode')}, fill {fill} at peak)"


def _print_summary(con: Console, job: dict[str, Any], parts: dict[str, Any], run_dir: Path) -> None:
    from rich.table import Table

    from testbed import labels
    from testbed.report import fmt_bytes, fmt_ns

    res = parts["result"]
    t = Table(title=f"{job['device']} / hints={job['hints']} / tier={job['tier']}", show_header=False)
    t.add_column("", style="bold")
    t.add_column("")
    t.add_row("WAF (device)", f"{job['waf']:.4f}" if job["waf"] is not None else "-")
    if job["host_waf"] and job["host_waf"] != 1.0:
        t.add_row("WAF (host GC)", f"{job['host_waf']:.4f}")
        t.add_row("WAF (end to end)", f"{job['end_to_end_waf']:.4f}")
    t.add_row("user / media written", f"{fmt_bytes(job['user_bytes_written'])} / {fmt_bytes(job['media_bytes_written'])}")
    gs = job.get("gc_stall")
    t.add_row("GC runs", f"{job['gc_count']:,}")
    t.add_row("GC stall, total", labels.stall_total(gs, job["gc_stall_ns"]))
    if gs:
        t.add_row("writes that waited for GC", labels.stalled_writes(gs))
    if job.get("zone_resets"):
        t.add_row("zone resets / host GC relocated",
                  f"{job['zone_resets']:,} / {fmt_bytes(job['host_gc']['relocated_bytes'])}")
    t.add_row("erases", f"{job['erases']:,}")
    for name in ("object_read", "object_write", "read", "write"):
        e = job.get(name)
        if not e or not e["total_ios"]:
            continue
        p = e["lat_ns"]["percentile"]
        t.add_row(f"{name} p50/p99/p99.9", f"{fmt_ns(p['50.000000'])} / {fmt_ns(p['99.000000'])} / {fmt_ns(p['99.900000'])}")
    sat = job.get("saturation")
    if sat:
        warn = labels.saturation_warning(sat)
        t.add_row("device load", f"[red]{warn}[/red]" if warn else labels.saturation(sat))
    lay = job["layout"]
    if lay.get("forced_evictions"):
        t.add_row("forced evictions", f"{lay['forced_evictions']} ({lay['read_misses']} later reads missed)")
    sz = res.get("sizing") or {}
    t.add_row("device", _device_size(sz))
    for note in sz.get("notes", []):
        t.add_row("sizing note", f"[yellow]{note}[/yellow]")
    rt = parts["runtime"]
    lab_s = rt.get("hint_lab_s", 0.0)
    run_s = rt["wall_s"] - rt["jit_s"] - lab_s  # the time events_per_s divides by
    jit = f" + {rt['jit_s']:.1f} s compiling kernels" if rt["jit_s"] >= 0.05 else ""
    lab_part = f" + {lab_s:.1f} s hint lab (its replays)" if "hint_lab_s" in rt else ""
    t.add_row("events", f"{job['events']['rows_replayed']:,} in {run_s:.1f} s ({rt['events_per_s'] or 0:,.0f} "
                        f"events/s){jit}{lab_part}" + (" [red]INCOMPLETE[/red]" if res["incomplete"] else ""))
    vm = res.get("vm")
    if vm:
        tg, rv = res["target"], parts["runtime"].get("vm") or {}
        t.add_row("VM", f"{tg['vm']} ({tg['device']}, {tg['accel']}{', ephemeral' if tg['ephemeral'] else ''}); "
                        f"latency from the {job['sources']['lat_ns']}, host bytes from the "
                        f"{job['sources']['host_bytes_written']}, WAF/GC/erases from the model")
        if rv.get("submit_s"):
            t.add_row("through the guest", f"{rv['ops']:,} ops, {rv['commands']:,} device commands in {rv['submit_s']:.1f} s "
                                           f"({rv['mb_per_s'] or 0:,.0f} MB/s, {rv['commands_per_s'] or 0:,.0f} cmds/s)")
        pl = vm.get("power_loss")
        if pl:
            g, cyc = pl["guest"], pl["power_cycle"]
            verdict = (f"the model agrees on all {pl['agree']}" if pl["ok"] else
                       f"[red]the model disagrees on {pl['disagree']} (+{pl['writes_not_scanned']} not scanned)[/red]")
            t.add_row("power loss (guest)", f"QEMU killed at {pl['at_ns'] / 1e6:g} ms of trace time, up again in "
                                            f"{cyc.get('reboot_s', 0):.1f} s; scan of {pl['writes_scanned']} writes: "
                                            f"{g['intact']} intact, {g['torn']} torn, {g['missing']} missing, "
                                            f"{g['corrupt']} corrupt; {verdict}")
        checks = vm["cross_checks"]
        if checks:
            bad = [c["check"] for c in checks if not c["ok"]]
            t.add_row("cross-checks", f"{len(checks) - len(bad)}/{len(checks)} ok" +
                      (f" [red]FAILED: {', '.join(bad)}[/red]" if bad else ""))
        elif vm.get("cross_checks_skipped"):
            t.add_row("cross-checks", f"skipped: {vm['cross_checks_skipped']}")
    fr = res.get("faults")
    if fr:
        ct = fr["contract"]
        t.add_row("contract", f"{ct['name']}: +{fmt_bytes(ct['extra_bytes_written'])} written, "
                              f"+{fmt_bytes(ct['extra_bytes_read'])} read, {ct['verified_loads']:,} loads verified")
        for i in fr["injected"]:
            o = {k: v["objects"] for k, v in i["outcomes"].items()}
            t.add_row(f"after {i['spec']}", f"reused {o['reused']:,}, detected {o['detected']:,}, missing "
                                            f"{o['missing']:,}, [red]wrong {o['wrong']:,}[/red]; recompute "
                                            f"{i['recompute_tokens']:,} tokens")
    lab = (job.get("hint_policy") or {}).get("lab")
    if lab:
        rho, cap = lab["spearman"], lab["oracle_waf_cut_captured_ratio"]
        t.add_row("hint lab (vs oracle)",
                  f"accuracy {100 * lab['accuracy']:.1f}% of writes (every write in the oracle's largest class: "
                  f"{100 * lab['accuracy_one_class']:.1f}%), Spearman {'-' if rho is None else f'{rho:+.3f}'}; "
                  f"WAF none / this / oracle {lab['waf']['none']:.3f} / {lab['waf']['policy']:.3f} / "
                  f"{lab['waf']['oracle']:.3f}: " + (f"{100 * cap:.0f}% of the oracle's cut captured" if cap is not None
                                                     else "the oracle cuts nothing here"))
    t.add_row("run directory", str(run_dir))
    con.print(t)


def _baseline_first(runs: tuple[Path, ...], baseline: Path) -> tuple[Path, ...]:
    """``runs`` with ``baseline`` moved to the front (the comparison's changes are against the first run)."""
    same = [r for r in runs if r.resolve() == baseline.resolve()]
    if not same:
        raise KvbedError(f"--baseline {baseline}: not one of the runs compared ({', '.join(map(str, runs))})")
    return (same[0], *(r for r in runs if r is not same[0]))


@click.command("report")
@click.argument("runs", metavar="RUN_DIR...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="report directory: report.png, outcomes.png (runs with faults), report.json "
                   "[default: report-<run names> beside the first run]")
@click.option("--force", is_flag=True, help="replace the files of another report in that directory")
@click.option("--no-plot", is_flag=True, help="print the table only; nothing is written")
@click.option("--json", "as_json", is_flag=True, help="print the comparison as JSON")
@click.option("--baseline", type=click.Path(path_type=Path), default=None, metavar="RUN_DIR",
              help="the run the others' changes are against, one of RUN_DIR... (it is listed first) "
                   "[default: the first RUN_DIR given; a shell glob gives them sorted by name]")
def report(runs: tuple[Path, ...], out: Path | None, force: bool, no_plot: bool, as_json: bool,
           baseline: Path | None) -> None:
    """Compare finished runs: a table of WAF, GC and latency percentiles with a column for every setting that
    differs between them, and a plot. Changes are against the first run given, or --baseline.

    The report directory is never shared silently: one that holds another report's files (report.json names
    other runs) is refused unless --force; the same report made again replaces its own files."""
    from testbed import reportdir
    from testbed.report import compare, render_differences, render_lab, render_table
    from testbed.results import load_run

    if baseline is not None:
        runs = _baseline_first(runs, baseline)
    loaded = [load_run(r) for r in runs]
    out = out or reportdir.default_dir(list(runs))
    if not no_plot:
        reportdir.check(out, list(runs), force)
    rows = compare(loaded)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        from testbed.cli.console import print_whole

        con = _console()
        for table in (render_differences(rows), render_table(rows), render_lab(rows)):
            if table is not None:  # a file or a pipe gets every column, however wide; a terminal, whole figures
                print_whole(con, table)
    if no_plot:
        return

    def draw(tmp: Path) -> list[str]:
        from testbed.plots import comparison_plot, plot_contract_outcomes

        comparison_plot(loaded, tmp / "report.png")
        if all("faults" in r.result for r in loaded):
            plot_contract_outcomes(loaded, tmp / "outcomes.png")
            return ["report.png", "outcomes.png"]
        return ["report.png"]

    existed = out.exists()
    try:
        paths = reportdir.write(out, list(runs), rows, draw)
    except KeyboardInterrupt:
        raise Interrupted(f"nothing written ({out} {'left as it was' if existed else 'not created'})") from None
    if not as_json:
        click.echo(f"report: {out} ({', '.join(p.name for p in paths)})")
