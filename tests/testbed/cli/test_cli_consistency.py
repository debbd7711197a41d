"""The command tree as a whole: every option has help, an option that takes a registry's names lists them,
parameters are spelled ``-p/--param K=V`` everywhere, and a usage error is one line like every other error."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import click
import pytest

from kvbed.core.registry import Registry
from testbed.cli import cli
from tests.support.cli import kvbed, one_line_error
from tests.support.paths import ROOT


def walk(cmd: click.Command, path: tuple[str, ...] | None = None):
    path = path or (cmd.name or "kvbed",)
    yield path, cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from walk(cmd.get_command(ctx, name), path + (name,))


def registries() -> dict[str, Registry]:
    """Every module-level Registry of the code, by the names an option taking its entries would have (its
    variable, singular, and the first word of its kind: DEVICES -> devices, device; GC_POLICIES -> gc)."""
    out: dict[str, Registry] = {}
    for pkg in ("kvbed", "kvreplay", "devicemodels", "testbed"):
        root = ROOT / pkg
        for info in pkgutil.walk_packages([str(root)], prefix=f"{pkg}."):
            rel = info.name.split(".")[1:]
            src = root.joinpath(*rel).with_suffix(".py")
            if not src.exists() or "Registry(" not in src.read_text():
                continue
            mod = importlib.import_module(info.name)
            for var, obj in vars(mod).items():
                if isinstance(obj, Registry) and var.isupper():
                    low = var.lower()
                    singular = low[:-3] + "y" if low.endswith("ies") else low.rstrip("s")
                    for n in {low, singular, obj.kind.split()[0].lower()}:
                        out.setdefault(n, obj)
    return out


def option_problems(root: click.Command, regs: dict[str, Registry]) -> list[str]:
    """One line per option without help, or taking a registry's names as text without listing them."""
    problems = []
    for path, cmd in walk(root):
        for p in cmd.params:
            if not isinstance(p, click.Option) or p.name == "help":
                continue
            where = f"{' '.join(path)} {p.opts[-1]}"
            if not (p.help or "").strip():
                problems.append(f"{where}: no help")
                continue
            reg = regs.get(p.name.lower())
            if reg is not None and isinstance(p.type, click.types.StringParamType):
                missing = [n for n in reg.names() if n not in p.help]
                if missing:
                    problems.append(f"{where}: takes {reg.kind} names but neither is a Choice nor lists {missing}")
    return problems


def test_every_option_has_help_and_lists_its_registry_choices():
    regs = registries()
    assert {"device", "hints", "gc", "workload", "contract", "fault", "backend"} <= set(regs)  # the finder works
    assert option_problems(cli, regs) == []


def test_the_option_check_finds_what_it_is_for():
    regs = registries()

    @click.command("bad")
    @click.option("--seed", type=int)
    @click.option("--device", help="a device")
    @click.option("--hints", help="one of oracle, none")
    @click.option("--gc", type=click.Choice(["greedy"]), help="victim policy")
    def bad(seed, device, hints, gc):
        pass

    probs = option_problems(bad, regs)
    assert probs[0] == "bad --seed: no help"
    assert probs[1].startswith("bad --device: takes device names but neither is a Choice nor lists ['conv',")
    assert probs[2].startswith("bad --hints: takes hint policy names") and "'predicted'" in probs[2]
    assert len(probs) == 3  # a Choice passes


def test_parameters_are_dash_p_or_dash_dash_param_everywhere():
    seen = []
    for path, cmd in walk(cli):
        for p in cmd.params:
            if isinstance(p, click.Argument):
                assert p.name not in ("kv", "params"), f"{' '.join(path)} takes K=V as arguments"
            if p.name == "params" and isinstance(p, click.Option):
                assert sorted(p.opts) == ["--param", "-p"] and p.multiple and p.metavar == "K=V", (path, p.opts)
                seen.append(" ".join(path[1:]))
            elif isinstance(p, click.Option):
                assert "-p" not in p.opts and "--param" not in p.opts, (path, p.opts)
    assert {"replay", "up", "femu args", "device run", "crossover", "trace synth", "trace import",
            "trace capture"} <= set(seen)


def test_up_and_femu_args_take_param_and_refuse_positional_pairs():
    one_line_error(kvbed("femu", "args", "-d", "fdp", "nruh=4"), "femu args: Got unexpected extra argument (nruh=4)")
    res = kvbed("femu", "args", "-d", "fdp", "-p", "nruh=4", "-p", "ruh_type=persistently", "-p", "ru_bytes=64MiB",
                "--param", "gc_bg_trigger=threshold", "--param", "op_ratio=0.25")
    assert res.exit_code == 0, res.output
    assert "fdp.nruh=4," in res.output and "fdp.runs=67108864," in res.output  # both spellings reached FEMU
    one_line_error(kvbed("up", "--device", "fdp", "--param", "nrg=2"), "nrg must be 1")


@pytest.mark.parametrize("args, text", [
    (("replay", "t.parquet", "--device", "nope"),
     "kvbed: error: replay: Invalid value for '--device': 'nope' is not one of 'conv', 'cxl', 'cxl-ssd', 'dram', "
     "'fdp', 'zns' (`kvbed replay --help`)"),
    (("report",), "kvbed: error: report: Missing argument 'RUN_DIR...' (`kvbed report --help`)"),
    (("device", "run", "--seed", "x"),
     "kvbed: error: device run: Invalid value for '--seed': 'x' is not a valid integer (`kvbed device run --help`)"),
    (("replay", "--bogus"), "kvbed: error: replay: No such option '--bogus' (`kvbed replay --help`)"),
    (("nosuch",), "kvbed: error: No such command 'nosuch' (`kvbed --help`)"),
    (("--bogus",), "kvbed: error: No such option '--bogus' (`kvbed --help`)"),
])
def test_usage_errors_are_one_line(args, text):
    res = kvbed(*args)
    one_line_error(res)
    assert res.stderr.strip() == text
    assert "Usage:" not in res.output + res.stderr


def test_a_group_without_a_command_still_shows_its_help():
    res = kvbed("device")
    assert "Usage: kvbed device" in res.output and "run " in res.output
