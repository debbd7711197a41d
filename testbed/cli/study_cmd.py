"""``kvbed study``: validate, run, status and report a grid of replay runs (testbed.study)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from kvbed.core.errors import Interrupted, KvbedError


@click.group("study")
def study() -> None:
    """Grids of replay runs: trace settings x device x hints x parameters x seeds -> table, plots, report.

    \b
    Example:
      kvbed study validate studies/kv-hints-fdp.toml
      kvbed study run studies/kv-hints-fdp.toml -o results/studies/kv-hints-fdp -j 2
      kvbed study status results/studies/kv-hints-fdp
      kvbed study report results/studies/kv-hints-fdp
    """


@study.command("validate")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the expanded grid as JSON")
def validate_cmd(spec: Path, as_json: bool) -> None:
    """Check every point of the grid; print the number of points, the axes and the traces to build.

    Every point's keys and values, ranges included, are checked as the replay would check them, without reading
    a trace (--json: the same counts as JSON). Exit status: 0 valid, 2 bad spec (one line naming the file, line
    and key)."""
    from testbed.study.spec import load

    st = load(spec)
    traces = st.traces()
    if as_json:
        click.echo(json.dumps({"name": st.name, "points": len(st.points), "axes": st.axes,
                               "traces": {h: t.label() for h, t in traces.items()}}, indent=2, default=str))
        return
    click.echo(f"{spec}: study {st.name!r}: {len(st.points)} points "
               f"({len(st.points) // len(st.seeds)} settings x {len(st.seeds)} seeds), {len(traces)} trace(s) to build")
    for k, v in st.axes.items():
        click.echo(f"  axis {k}: {', '.join(map(str, v))}")
    for h, t in traces.items():
        click.echo(f"  trace {h}: {t.label()}")


class _Bar:
    """One rich progress bar for the grid: done / failed / skipped, with an ETA."""

    def __init__(self, prog: Any, total: int, skipped: int):
        self.prog = prog
        self.done = self.failed = 0
        self.skipped = skipped
        self.task = prog.add_task("points", total=total, completed=skipped, info=self._info())

    def _info(self) -> str:
        return f"{self.done} done, {self.failed} failed, {self.skipped} skipped"

    def __call__(self, ok: bool, error: str | None = None) -> None:
        if ok:
            self.done += 1
        else:
            self.failed += 1
            self.prog.console.print(f"[yellow]point failed:[/yellow] {error}")
        self.prog.update(self.task, advance=1, info=self._info())


@study.command("run")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="study directory [default: results/studies/<name>]")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local processes, or Ray tasks")
@click.option("--ray-address", default=None, metavar="ADDR",
              help="a running Ray cluster (ray.init(address=...)); without it a local Ray is started")
@click.option("-j", "--jobs", type=int, default=None, help="points at once [default: the cores]")
@click.option("--no-report", is_flag=True, help="write the table only")
@click.option("-q", "--quiet", is_flag=True, help="no progress bar")
def run_cmd(spec: Path, out: Path | None, executor: str, ray_address: str | None, jobs: int | None,
            no_report: bool, quiet: bool) -> None:
    """Run every point not yet done (traces first), then write table, summary and report.

    Ctrl-C stops submitting, keeps what finished and stops the workers; study.json then says
    "incomplete": true and no report is left; running the same command again continues where it stopped. Exit status: 0 all points done, 1 some points failed (see `study status`),
    2 bad spec, 130 interrupted."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    from testbed.cli.console import console
    from kvbed.core.atomicio import check_can_make_dir
    from testbed.study.report import write_report
    from testbed.study.run import run_study
    from testbed.study.spec import load

    if jobs is not None and jobs < 1:
        raise KvbedError(f"-j must be >= 1, got {jobs}")
    if ray_address and executor != "ray":
        raise KvbedError("--ray-address needs --executor ray")
    st = load(spec)
    out = out or Path("results") / "studies" / st.name
    check_can_make_dir(out, str(out))
    if out.exists() and any(out.iterdir()) and not (out / "study.json").exists():
        raise KvbedError("exists, is not empty and is not a study directory; choose another -o", where=str(out))
    con = console(True)
    show = not quiet and con.is_terminal
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                  console=con, disable=not show) as prog:
        res = run_study(st, out, executor=executor, jobs=jobs, address=ray_address,
                        progress=lambda total, skipped: _Bar(prog, total, skipped),
                        log=(lambda s: prog.console.print(f"[dim]{s}[/dim]")) if show else (lambda s: None))
    click.echo(f"{st.name}: {res.points} points: {res.ran} ran, {res.skipped} already done, {res.failed} failed"
               f"{', interrupted' if res.interrupted else ''}; {res.traces_built} trace(s) built; "
               f"{res.wall_s:.1f} s -> {out}")
    if res.interrupted:
        _drop_report(out)
        raise Interrupted(f"{res.ran} point(s) ran and were kept, study.json says incomplete, no report is left; "
                          "rerun the same command to run the missing points")
    if not no_report:
        try:
            write_report(out)
        except KeyboardInterrupt:
            _drop_report(out)
            raise Interrupted(f"while writing the report: every point and the table are kept, no report is left; "
                              f"`kvbed study report {out}` writes it") from None
    if res.failed:
        sys.exit(1)


def _drop_report(out: Path) -> None:
    """An interrupted run: the table says what ran, and an older report (or one of a report being written:
    report.md and report.html may then be of two different runs) would disagree with it; none is kept."""
    for name in ("report.md", "report.html"):
        (out / name).unlink(missing_ok=True)


@study.command("status")
@click.argument("study_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print every point's state as JSON")
def status_cmd(study_dir: Path, as_json: bool) -> None:
    """Which points are done, failed (with their error) or missing.

    Exit status: 0 no point failed (some may be missing: see the counts), 1 some points failed, 2 not a
    study directory."""
    from testbed.study.run import status

    st = status(study_dir)
    if as_json:
        click.echo(json.dumps(st, indent=2, default=str))
        if st["counts"]["failed"]:
            sys.exit(1)
        return
    c = st["counts"]
    click.echo(f"{st['name']}: {len(st['points'])} points: {c['done']} done, {c['failed']} failed, "
               f"{c['missing']} missing" + (" (the last `study run` did not finish)" if st["incomplete"] else ""))
    for p in st["points"]:
        if p["state"] != "done":
            axes = ", ".join(f"{k}={v}" for k, v in p["axes"].items())
            click.echo(f"  {p['state']:8s} runs/{p['run_hash']} ({axes}; seed {p['seed']})"
                       + (f": {p['error']}" if p["error"] else ""))
    if c["failed"]:
        sys.exit(1)


@study.command("report")
@click.argument("study_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
def report_cmd(study_dir: Path) -> None:
    """Rebuild table, summary and report.md/html from the saved runs (nothing is rerun)."""
    from testbed.study import table
    from testbed.study.report import write_report

    if not (study_dir / "study.json").exists():
        raise KvbedError("not a study directory (no study.json)", where=str(study_dir))
    table.refresh(study_dir)
    for p in write_report(study_dir):
        click.echo(str(p))
