"""The ``kvbed`` command line.

Subcommands live in their own modules and are imported only when invoked, so
``kvbed --help`` stays fast and a broken optional dependency (e.g. QEMU tooling)
does not break the trace or device commands.
"""

from __future__ import annotations

import gc
import importlib
import sys

import click

from kvbed.core.version import __version__
from kvbed.core.errors import Interrupted, KvbedError

# command name -> "module:attribute"; one line per command group.
_COMMANDS = {
    "trace": ("testbed.cli.trace_cmd:trace", "Import, synthesise, validate and summarise KV lifecycle traces."),
    "device": ("testbed.cli.device_cmd:device", "Run synthetic workloads on the flash device models."),
    "replay": ("testbed.cli.replay_cmd:replay", "Replay a KV lifecycle trace on a device with a placement-hint policy."),
    "report": ("testbed.cli.replay_cmd:report", "Compare finished runs: table and plot."),
    "study": ("testbed.cli.study_cmd:study", "Grids of replay runs to a table, plots and a report (local or Ray)."),
    "crossover": ("testbed.cli.crossover_cmd:crossover", "From which object size loading KV from a tier beats recomputing it."),
    "params": ("testbed.cli.params_cmd:params", "Every parameter: defaults, units, choices, meaning."),
    "up": ("testbed.cli.vm_cmd:up", "Start a QEMU VM with an emulated conv/FDP/ZNS NVMe or CXL device."),
    "down": ("testbed.cli.vm_cmd:down", "Stop VMs and clean up their overlays."),
    "status": ("testbed.cli.vm_cmd:status", "List running VMs."),
    "image": ("testbed.cli.vm_cmd:image", "Build, list and remove guest images."),
    "femu": ("testbed.cli.femu_cmd:femu", "Build FEMU (cached by source hash); its device options from kvbed's parameters."),
}

#: allocations between two collections of the young generation in a kvbed process (Python's default: 700)
YOUNG_GC_THRESHOLD = 50_000


class UserError(click.ClickException):
    exit_code = 2

    def show(self, file=None) -> None:  # one line, no traceback
        click.echo(f"kvbed: error: {self.format_message()}", err=True, file=file)


def usage_error(exc: click.UsageError) -> UserError:
    """A click usage error (missing argument, bad choice, unknown option) as the one line every other error is:
    the command, click's message, where help is."""
    path = exc.ctx.command_path if exc.ctx is not None else "kvbed"
    cmd = path.partition(" ")[2]
    msg = " ".join(exc.format_message().split()).rstrip(".")
    return UserError(f"{cmd + ': ' if cmd else ''}{msg} (`{path} --help`)")


class InterruptedExit(click.ClickException):
    """Ctrl-C: one line saying what was kept, exit status 130 (128 + SIGINT)."""

    exit_code = 130

    def show(self, file=None) -> None:
        msg = self.format_message()
        click.echo(f"kvbed: interrupted{': ' + msg if msg else ''}", err=True, file=file)


class KvbedGroup(click.Group):
    def list_commands(self, ctx):
        return list(_COMMANDS)

    def get_command(self, ctx, name):
        if name not in _COMMANDS:
            return None
        mod, attr = _COMMANDS[name][0].split(":")
        try:
            return getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as exc:
            # A command whose module is missing still shows in --help, and says why if run.
            @click.command(name, help=_COMMANDS[name][1], context_settings={"ignore_unknown_options": True})
            @click.argument("args", nargs=-1, type=click.UNPROCESSED)
            def unavailable(args, _exc=exc):
                raise UserError(f"'{name}' is not available in this build: {_exc}")

            return unavailable

    def format_commands(self, ctx, formatter):
        rows = [(n, h) for n, (_, h) in _COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise usage_error(exc) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.exceptions.NoArgsIsHelpError:  # a group given no command shows its help, as click does
            raise
        except click.UsageError as exc:
            raise usage_error(exc) from None
        except KvbedError as exc:
            raise UserError(str(exc)) from None
        except Interrupted as exc:
            raise InterruptedExit(str(exc)) from None
        except KeyboardInterrupt:  # a command without its own handling: every writer renames whole files
            raise InterruptedExit("") from None


@click.group("kvbed", cls=KvbedGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="kvbed")
def cli() -> None:
    """kvbed: does the KV cache's lifecycle (lifetime, hotness, type) cut write
    amplification, GC stalls and tail latency on FDP/ZNS SSDs and CXL memory?

    \b
    Typical session:
      kvbed trace synth -o sample.parquet
      kvbed replay sample.parquet --device fdp --hints none   -o results/none
      kvbed replay sample.parquet --device fdp --hints oracle -o results/oracle
      kvbed report results/none results/oracle
    """


def main(argv: list[str] | None = None) -> None:
    """The ``kvbed`` process: the command, its one-line errors and exit status.

    The garbage collector is set for a process that builds ~180k long-lived objects importing numba, matplotlib
    and pyarrow, then computes on numpy arrays: the young generation is collected every 50,000 allocations
    instead of every 700, which in a replay made ~420 collections, 3 of them full (~0.1-0.15 s of CPU). What the
    command built is frozen out of the collector on the way out: the interpreter's own collections at exit would
    walk all of it again (~0.15 s), and the process ends right after. (Code that runs commands and goes on, the
    tests for one, calls ``cli`` instead: frozen objects are never collected.)"""
    gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
    try:
        _run(argv)
    finally:
        gc.freeze()


def _run(argv: list[str] | None) -> None:
    try:
        cli.main(args=argv, prog_name="kvbed", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("kvbed: aborted", err=True)
        sys.exit(130)
    except KvbedError as exc:
        click.echo(f"kvbed: error: {exc}", err=True)
        sys.exit(2)
    except BrokenPipeError:
        sys.exit(1)
