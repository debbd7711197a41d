"""kvbed/core: the parameter machinery every parameter set shares, the registry, and the contracts the
replay relies on (layouts per device, TargetFailed)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, strategies as st

from kvbed.core.errors import KvbedError
from kvbed.core.params import (
    check_fields, choices_of, describe, format_ns, format_size, from_dict, parse_value, unit_of, with_overrides,
)
from kvbed.core.registry import Registry
from tests.support.paths import ROOT


def _parameter_sets():
    """Every documented parameter set (``kvbed params``), which must include every device group and every
    hint policy's parameters."""
    from devicemodels import DEVICES
    from kvreplay.hints import HINTS
    from testbed.paramdocs import parameter_sets

    sets = [cls for cls, _ in parameter_sets().values()]
    device_groups = {c for n in DEVICES for c in DEVICES.get(n).param_classes.values()}
    hint_params = {HINTS.get(n).Params for n in HINTS if dataclasses.fields(HINTS.get(n).Params)}
    assert device_groups | hint_params <= set(sets)
    return sets


PARAMETER_SETS = _parameter_sets()


@pytest.mark.parametrize("cls", PARAMETER_SETS, ids=lambda c: c.__name__)
def test_every_field_is_declared_with_help(cls):
    for row in describe(cls):
        assert row["help"], f"{cls.__name__}.{row['name']} has no help"


@pytest.mark.parametrize("cls", PARAMETER_SETS, ids=lambda c: c.__name__)
def test_choices_are_checked_for_every_field_on_every_path(cls):
    fields = [f for f in dataclasses.fields(cls) if choices_of(f)]
    for f in fields:
        assert f.default in choices_of(f), f"{cls.__name__}.{f.name}: default not among its choices"
        with pytest.raises(KvbedError, match=f"{f.name}: expected one of .*got 'nonsense'"):
            with_overrides(cls(), [f"{f.name}=nonsense"])
        with pytest.raises(KvbedError, match=f"{f.name}: expected one of"):
            with_overrides(cls(), {f.name: "nonsense"})
        with pytest.raises(KvbedError, match=f"saved: {f.name}: expected one of"):
            from_dict(cls, {**dataclasses.asdict(cls()), f.name: "nonsense"}, where="saved")
        with pytest.raises(KvbedError, match=f"{f.name}: expected one of"):
            check_fields(dataclasses.replace(cls(), **{f.name: "nonsense"}))
        other = next((c for c in choices_of(f) if c != f.default), None)
        if other is not None:
            assert getattr(with_overrides(cls(), [f"{f.name}={other}"]), f.name) == other


def test_the_choice_sets_the_issue_named_are_declared():
    from devicemodels.params import FdpParams, FlashParams
    from kvreplay.hints.oracle import OracleParams
    from kvreplay.hints.predicted import PredictedParams
    from kvreplay.layout.params import LayoutParams
    from kvreplay.tiers import TierSimParams

    declared = {(c.__name__, f.name): choices_of(f) for c in (FlashParams, FdpParams, LayoutParams, OracleParams,
                                                              PredictedParams, TierSimParams)
                for f in dataclasses.fields(c)}
    assert declared[("FlashParams", "gc_bg_trigger")] == ("idle", "threshold", "per-command")
    assert declared[("FlashParams", "gc_copy_order")] == ("page", "block")
    assert declared[("FlashParams", "preset")] == ("femu", "none")
    assert "greedy" in declared[("FlashParams", "gc_policy")]
    assert declared[("FdpParams", "ruh_type")] == ("initially", "persistently", "last-initially")
    assert declared[("FdpParams", "ii_gc_dest")] == ("gc-ru", "last-ruh")
    assert declared[("LayoutParams", "gc_stream")] == ("shared", "per-class")
    assert declared[("LayoutParams", "evict_policy")] == ("tier", "lru", "fifo")
    assert declared[("OracleParams", "clock")] == declared[("PredictedParams", "clock")] == ("bytes", "time")
    assert set(declared[("TierSimParams", "ssd_policy")]) == {"lru", "fifo", "clock", "s3fifo"}


@given(st.integers(min_value=0, max_value=1 << 50))
def test_format_size_is_the_parsers_inverse(n):
    assert parse_value("x_bytes", int, format_size(n)) == n


@given(st.integers(min_value=0, max_value=10**15))
def test_format_ns_is_the_parsers_inverse(n):
    assert parse_value("x_ns", int, format_ns(n)) == n


def test_format_size_uses_the_largest_exact_unit():
    assert [format_size(n) for n in (0, 1, 1024, 1536, 16 << 20, 3 << 30, (1 << 40) + 1024)] == \
        ["0", "1", "1KiB", "1536", "16MiB", "3GiB", "1073741825KiB"]


def test_units_follow_the_field_name_or_the_declaration():
    assert [unit_of(n) for n in ("ru_bytes", "page_read_ns", "ttl_s", "op_ratio", "channel_bytes_per_s",
                                 "prefill_tokens_per_s", "nruh")] == ["bytes", "ns", "s", "ratio", None, None, None]
    assert parse_value("ttl_s", float, "10min") == 600.0 and parse_value("ttl_s", float, "250ms") == 0.25
    assert parse_value("block_erase_ns", int, "2ms") == 2_000_000 and parse_value("op_ratio", float, "7%") == 0.07
    assert parse_value("ru_bytes", int, "16M") == 16 << 20 and parse_value("ru_bytes", int, "1GB") == 10**9
    with pytest.raises(KvbedError, match="unit 'ms' does not fit"):
        parse_value("ru_bytes", int, "2ms")
    with pytest.raises(KvbedError, match="unit 'GiB' does not fit"):
        parse_value("nruh", int, "2GiB")


def test_registry_names_what_it_registers_once():
    reg: Registry[type] = Registry("thing")

    @reg.register("alpha")
    class Alpha:
        pass

    assert Alpha.name == "alpha" and reg.get("ALPHA") is Alpha
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("alpha")(type("Other", (), {}))
    with pytest.raises(ValueError, match="registered as"):
        reg.register("beta")(dataclasses.make_dataclass("P", [("name", str)], frozen=True)("gamma"))
    with pytest.raises(KvbedError, match="unknown thing 'delta' \\(choose from: alpha\\)"):
        reg.get("delta")


def test_registry_summary_is_one_line_from_the_entry_or_its_own_module():
    reg: Registry[object] = Registry("thing")

    @reg.register("documented")
    class Documented:
        """First line
        goes on.

        Second paragraph."""

    @reg.register("inherits")
    class Inherits(Documented):  # the base's docstring is not this entry's
        pass

    reg.register("instance")(dataclasses.make_dataclass("Row", [("code", int)])(3))
    assert reg.summaries() == {"documented": "First line goes on.", "inherits": "", "instance": ""}
    attr: Registry[object] = Registry("row", summary_attr="code")
    attr.register("three")(dataclasses.make_dataclass("Row", [("code", int)])(3))
    assert attr.summary("THREE") == "3"
    with pytest.raises(KvbedError, match="unknown row 'four'"):
        attr.summary("four")

    from devicemodels import GC_POLICIES
    from kvreplay.faults import CONTRACTS
    from kvreplay.hints import HINTS
    from kvreplay.importers import IMPORTERS
    from kvreplay.tiers.sharing import SHARING

    assert HINTS.summary("oracle") == "the exact remaining lifetime of each write, from the future of the trace."
    assert CONTRACTS.summary("full") == "checksum, version and lease together."  # "Contract ``full``: ..."
    assert GC_POLICIES.summary("random") == "uniformly random closed line"
    assert IMPORTERS.summary("mooncake").startswith("Mooncake FAST'25 JSONL")
    assert SHARING.summary("global") == ""  # several entries in one module: its docstring is none's own


def test_every_registered_class_carries_its_registry_name():
    from devicemodels import DEVICES
    from kvreplay.hints import HINTS
    from kvreplay.importers import IMPORTERS
    from kvreplay.layout import LAYOUTS

    for reg in (DEVICES, HINTS, IMPORTERS, LAYOUTS):
        for n in reg:
            assert reg.get(n).name == n


def test_each_device_gets_the_layout_of_its_namespace():
    from devicemodels import DEVICES
    from kvreplay.layout import ExtentLayout, ZoneLayout, layout_for

    got = {n: layout_for(DEVICES.get(n)) for n in DEVICES}
    assert got == {"conv": ExtentLayout, "cxl": ExtentLayout, "cxl-ssd": ExtentLayout, "dram": ExtentLayout,
                   "fdp": ExtentLayout, "zns": ZoneLayout}


def test_layouts_answer_for_devices():
    from devicemodels import DEVICES
    from devicemodels.params import FdpParams, FlashParams, ZnsParams
    from kvreplay.layout import ExtentLayout, LayoutParams, ZoneLayout

    fdp = {"flash": FlashParams(), "fdp": FdpParams(nruh=4, nrg=2)}
    assert ExtentLayout.default_classes(DEVICES.get("fdp"), fdp, LayoutParams()) == 8
    assert ExtentLayout.default_classes(DEVICES.get("conv"), {"flash": FlashParams()}, LayoutParams()) == 1
    assert ExtentLayout.open_streams(8, fdp, LayoutParams()) == 0
    zns = {"flash": FlashParams(), "zns": ZnsParams(max_open_zones=6, max_active_zones=6)}
    assert ZoneLayout.default_classes(DEVICES.get("zns"), zns, LayoutParams()) == 5
    assert ZoneLayout.default_classes(DEVICES.get("zns"), zns, LayoutParams(gc_stream="per-class")) == 3
    assert ZoneLayout.open_streams(5, zns, LayoutParams()) == 6
    with pytest.raises(KvbedError, match="zns: 4 classes need 8 open zones \\(with GC\\) but max_open_zones is 6"):
        ZoneLayout.open_streams(4, zns, LayoutParams(gc_stream="per-class"))
    assert ZoneLayout.precondition_refusal and ExtentLayout.precondition_refusal is None


def test_target_failed_carries_the_completed_prefix():
    from dataclasses import dataclass

    from kvreplay.replay.target import TargetFailed

    @dataclass
    class Part:
        done_ns: np.ndarray
        status: np.ndarray | None = None

    assert TargetFailed("x").completed() is None
    assert TargetFailed("x", partial=Part(np.array([5, 6, 7]))).completed().tolist() == [5, 6, 7]
    e = TargetFailed("x", partial=Part(np.array([5, 6, 7]), np.array([0, 1, 0])))
    assert e.completed().tolist() == [5] and isinstance(e, KvbedError)
    from testbed.vm.client import VmDied

    assert issubclass(VmDied, TargetFailed)


def test_parameter_reference_tables_are_generated_from_the_dataclasses():

    from testbed.paramdocs import markdown

    text = (ROOT / "docs" / "reference" / "parameters.md").read_text()
    begin = text.index("<!-- params:begin")
    begin = text.index("\n", begin) + 1
    end = text.index("<!-- params:end -->")
    assert text[begin:end] == markdown(), (
        "docs/reference/parameters.md's tables are stale: python scripts/reference_docs.py")
