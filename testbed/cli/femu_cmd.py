"""`kvbed femu build|status|args`: FEMU built once per source hash, and the device options kvbed gives it."""

from __future__ import annotations

import json
import time

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kvbed.core.params import format_value
from testbed.cli.options import param_option
from testbed.cli.registry_help import LazyChoice


@click.group("femu")
def femu():
    """Build FEMU (cached by source hash) and show how kvbed's parameters map onto its devices."""


@femu.command("build")
@click.option("--src", default=None, metavar="DIR|TARBALL",
              help="a FEMU checkout or tarball (default: ../shared/vendor/femu-*.tar.xz)")
@click.option("--jobs", "-j", type=int, default=None, help="parallel compile jobs (default: CPU count)")
@click.option("--force", is_flag=True, help="rebuild even if this source's build is cached")
@click.option("-q", "--quiet", is_flag=True, help="no progress display")
def build_cmd(src, jobs, force, quiet):
    """Build FEMU's qemu-system-x86_64 (about 5 minutes on 2 cores), or find it cached."""
    from testbed.femu import build as fb

    console = Console(stderr=True)
    t0 = time.monotonic()
    with Progress(TextColumn("[dim]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, disable=quiet, transient=True) as prog:
        task = prog.add_task("FEMU", total=None)

        def progress(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total, description="compiling")

        def log(s: str) -> None:
            prog.update(task, description=s)
            if not quiet:
                console.print(f"[dim]{s}[/dim]")

        b, built = fb.build(src, log=log, progress=progress, jobs=jobs, force=force)
    m = b.manifest()
    took = time.monotonic() - t0
    click.echo(f"FEMU {m.get('qemu_version', '?')}: {'built in ' + format(took, '.0f') + ' s' if built else 'cached'}"
               f" ({b.binary})")


@femu.command("status")
@click.option("--src", default=None, metavar="DIR|TARBALL", help="the source to check (default: the vendored tarball)")
@click.option("--json", "as_json", is_flag=True, help="print the status as JSON")
def status_cmd(src, as_json):
    """Whether FEMU is built for the source, the build packages, the cached builds."""
    from testbed.femu import build as fb

    st = fb.status(src)
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    click.echo(f"source: {st['source'] or st['source_error'] or 'none (pass --src)'}")
    if st["key"]:
        click.echo(f"key:    {st['key']}")
        click.echo(f"built:  {'yes, ' + st['binary'] if st['built'] else 'no: `kvbed femu build`'}")
    if st["interrupted_build"]:
        click.echo(f"an interrupted build resumes from {st['interrupted_build']}")
    if st["missing_packages"]:
        click.echo(f"missing build packages: {', '.join(st['missing_packages'])} (scripts/setup_host.sh --femu)")
    if st["builds"]:
        t = Table(title="cached FEMU builds")
        for c in ("key", "version", "build s", "built", "source"):
            t.add_column(c)
        for b in st["builds"]:
            t.add_row(b["key"][:16], b["qemu_version"] or "?", f"{b['build_s'] or 0:.0f}",
                      time.strftime("%Y-%m-%d %H:%M", time.localtime(b["built_unix"] or 0)), b["source"] or "?")
        Console().print(t)


@femu.command("args")
@click.option("--device", "-d", required=True, type=LazyChoice("testbed.femu.devices:FEMU_DEVICES"),
              help="FEMU device kind the parameters are mapped onto")
@param_option("device or VM parameter, e.g. nruh=8 ru_bytes=16MiB")
@click.option("--json", "as_json", is_flag=True, help="print the options and their mapping as JSON")
def args_cmd(device, params, as_json):
    """The FEMU device options for DEVICE with these parameters, and where each value comes from.

    Parameters not given that FEMU cannot express take a value it can (its reclaim unit is one line, its
    handles are persistently isolated, it collects on a threshold checked after every command, ...): listed
    under "chosen for FEMU", as `kvbed up --backend femu` chooses them."""
    from testbed.femu import devices as fd
    from testbed.femu.defaults import femu_params

    p, chosen = femu_params(device, list(params))
    m = fd.femu_mapping(device, p)
    if as_json:
        click.echo(json.dumps({"args": m.args(), "mapping": [r._asdict() for r in m.rows],
                               "chosen": [{"field": c.field, "value": c.value, "model_default": c.model_default,
                                           "why": c.why} for c in chosen],
                               "host_bytes": m.host_bytes}, indent=2, default=str))
        return
    con = Console()
    if chosen:
        ct = Table(title="chosen for FEMU (not given; the model's default is not expressible)", title_justify="left")
        for c in ("parameter", "value", "model default", "why"):
            ct.add_column(c)
        for c in chosen:
            ct.add_row(c.field, format_value(c.field, c.value), format_value(c.field, c.model_default), c.why)
        con.print(ct)
    t = Table(title=f"FEMU {device}: -device options from kvbed's parameters")
    for c in ("device", "option", "value", "from"):
        t.add_column(c)
    for r in m.rows:
        t.add_row(r.device, r.option, str(r.value), r.source)
    con.print(t)
    click.echo(" ".join(m.args()))
