"""CLI help and the docs list policies, faults, contracts and devices from the registries (issue 19).

Each option's help is checked against a copy of its registry with one more entry put in its place: the
extra name shows up, so the list is read from the registry, not typed. Importing the CLI modules reads no
registry; the hint table of docs/guides/replay-and-hints.md is generated from ``HINTS`` and the fault and
contract tables of docs/guides/faults.md name exactly the registered kinds and contracts.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys

import click
import pytest

from tests.support.cli import kvbed, ok
from kvbed.core.registry import Registry
from testbed.cli import cli
from testbed.cli.registry_help import LazyChoice, entry_names, markdown_table

from tests.support.paths import ROOT
DUMMY = "zzdummy"


class _Dummy:
    """a test's own entry, registered in a copy of the registry"""

    description = summary = doc = knows = "a test's own entry"


def _with_dummy(obj):
    """A copy of a registry (or tuple, or mapping) with one more entry, ``zzdummy``."""
    if isinstance(obj, Registry):
        copy: Registry = Registry(obj.kind, obj.summary_attr)
        for n in obj:
            copy.register(n)(obj.get(n))
        copy.register(DUMMY)(type("Dummy", (_Dummy,), {"__doc__": _Dummy.__doc__}))
        return copy
    if isinstance(obj, dict):
        return {**obj, DUMMY: "dram"}
    return (*obj, DUMMY)


def _param(path: tuple[str, ...], opt: str) -> tuple[click.Parameter, click.Context]:
    cmd: click.Command = cli
    ctx = click.Context(cli)
    for name in path:
        cmd = cmd.get_command(ctx, name)  # type: ignore[attr-defined]
        ctx = click.Context(cmd, parent=ctx)
    return next(p for p in cmd.params if opt in p.opts), ctx


# (command, option, where its names live); every list of names the CLI shows
OPTIONS = [
    (("replay",), "--device", "devicemodels:DEVICES"),
    (("replay",), "--hints", "kvreplay.hints:HINTS"),
    (("replay",), "--fault", "kvreplay.faults:FAULTS"),
    (("replay",), "--contract", "kvreplay.faults:CONTRACTS"),
    (("replay",), "--tiers", "kvreplay.replay.multitier:TIER_DEVICES"),
    (("replay",), "--on-hit", "kvreplay.replay.ttft:ON_HIT"),
    (("trace", "import"), "fmt", "kvreplay.importers:IMPORTERS"),
    (("trace", "import"), "--policy", "kvreplay.tiers.policies:EVICTION_POLICIES"),
    (("trace", "synth"), "--policy", "kvreplay.tiers.policies:EVICTION_POLICIES"),
    (("device", "run"), "--device", "devicemodels:DEVICES"),
    (("device", "run"), "--workload", "devicemodels.workloads:WORKLOADS"),
    (("device", "run"), "--gc", "devicemodels:GC_POLICIES"),
    (("up",), "--device", "testbed.vm.qemu:VM_DEVICES"),
    (("up",), "--backend", "testbed.vm.backends:BACKENDS"),
    (("femu", "args"), "--device", "testbed.femu.devices:FEMU_DEVICES"),
]


def _listed(param: click.Parameter, ctx: click.Context) -> str:
    """What help shows of a parameter: its help record, or an argument's choices."""
    if isinstance(param, click.Argument):
        return "|".join(param.type.choices)  # type: ignore[attr-defined]
    rec = param.get_help_record(ctx)
    assert rec is not None
    return " ".join(rec)


@pytest.mark.parametrize("path,opt,spec", OPTIONS, ids=[f"{' '.join(p)} {o}" for p, o, _ in OPTIONS])
def test_help_lists_exactly_the_registry_names(monkeypatch, path, opt, spec):
    param, ctx = _param(path, opt)
    real = entry_names(spec)
    assert len(real) >= 2
    text = _listed(param, ctx)
    joined = "|".join(real) if isinstance(param.type, LazyChoice) else ", ".join(real)
    assert joined in text, (joined, text)
    assert DUMMY not in text

    mod, attr = spec.split(":")
    monkeypatch.setattr(importlib.import_module(mod), attr, _with_dummy(getattr(importlib.import_module(mod), attr)))
    more = [*real, DUMMY]
    assert entry_names(spec) == more
    text = _listed(param, ctx)
    joined = "|".join(more) if isinstance(param.type, LazyChoice) else ", ".join(more)
    assert joined in text, (joined, text)


def test_rendered_help_follows_the_registry(monkeypatch):
    import kvreplay.faults

    assert DUMMY not in ok(kvbed("replay", "--help")).output
    monkeypatch.setattr(kvreplay.faults, "CONTRACTS", _with_dummy(kvreplay.faults.CONTRACTS))
    out = ok(kvbed("replay", "--help")).output
    contract = out[out.index("--contract NAME"):out.index("-p, --param K=V")]
    assert " ".join(contract.split()).endswith(f"checksum, full, lease, none, version, {DUMMY} [default: none]")


def test_trace_import_lists_every_format_with_its_summary(monkeypatch):
    import kvreplay.importers

    reg = kvreplay.importers.IMPORTERS
    out = ok(kvbed("trace", "import", "--help")).output
    formats = out[out.index("Formats:"):]
    for name in reg.names():
        assert re.search(rf"^  {re.escape(name)} +\S", formats, re.M), name
    assert "Mooncake FAST'25 JSONL" in formats and DUMMY not in formats
    monkeypatch.setattr(kvreplay.importers, "IMPORTERS", _with_dummy(reg))
    formats = ok(kvbed("trace", "import", "--help")).output.split("Formats:")[1]
    assert re.search(rf"^  {DUMMY} +a test's own entry$", formats, re.M)


def test_a_name_not_registered_is_refused_listing_the_registry():
    res = kvbed("femu", "args", "--device", "cxl")  # a VM device, not a FEMU one
    assert res.exit_code == 2
    assert "'cxl' is not one of 'conv', 'fdp', 'zns'" in res.output + res.stderr
    res = kvbed("trace", "import", "nosuch", "in.jsonl", "-o", "out.parquet")
    assert res.exit_code == 2
    assert "'alibaba', 'mooncake', 'sglang-events', 'vllm-events'" in res.output + res.stderr


_PROBE = """
import json, sys
import testbed.cli.device_cmd, testbed.cli.vm_cmd, testbed.cli.femu_cmd, testbed.cli.registry_help
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('devicemodels', 'kvreplay')
                        or m in ('testbed.vm.qemu', 'testbed.vm.backends', 'testbed.femu.devices'))))
"""


def test_importing_the_cli_reads_no_registry():
    res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == []


def _guide(name: str) -> str:
    return (ROOT / "docs" / "guides" / name).read_text()


def test_hint_table_is_generated_from_the_registry():
    text = _guide("replay-and-hints.md")
    begin = text.index("<!-- registry:hints")
    begin = text.index("\n", begin) + 1
    end = text.index("<!-- registry:end -->", begin)
    want = markdown_table("kvreplay.hints:HINTS", ("policy", "may know"), attr="knows")
    assert text[begin:end] == want, ("docs/guides/replay-and-hints.md's hint table is stale "
                                   "(python scripts/reference_docs.py); it should read:\n" + want)


def _table_names(text: str, header: str) -> list[str]:
    """The first column (`name`) of the Markdown table whose header row starts with ``| header |``."""
    start = text.index(f"| {header} |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip().strip("`"))
    return rows


def test_fault_and_contract_tables_name_every_registered_one():
    from kvreplay.faults import CONTRACTS, FAULTS

    text = _guide("faults.md")
    assert sorted(_table_names(text, "fault")) == FAULTS.names()
    assert sorted(_table_names(text, "contract")) == CONTRACTS.names()
