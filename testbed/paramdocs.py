"""Every parameter set a user can set, by name, documented from the dataclasses' own declarations.

``kvbed params`` prints them, ``kvbed replay --help`` lists their keys, and the README's parameter
tables are ``kvbed params --markdown`` (a test keeps the README in step), so help never drifts from the
fields it describes.
"""

from __future__ import annotations

from typing import Any

from kvbed.core.params import describe


def parameter_sets() -> dict[str, tuple[type, str]]:
    """name -> (dataclass, where it applies), in the order they are documented."""
    from kvreplay.capture import CaptureParams
    from devicemodels.params import CxlParams, CxlSsdParams, DramParams, FdpParams, FlashParams, ZnsParams
    from kvreplay.costmodel import CostParams
    from kvreplay.faults import FAULTS, FaultParams
    from kvreplay.hints import HINTS
    from kvreplay.hints.base import NoParams
    from kvreplay.layout.params import LayoutParams
    from kvreplay.replay.params import ReplayParams
    from kvreplay.replay.ttft import RequestParams
    from kvreplay.synth import SynthParams
    from kvreplay.tiers import TierSimParams
    from kvreplay.crossover import CrossoverParams
    from testbed.vm.qemu import VmParams
    from testbed.vm.replay_config import VmLinkParams

    out: dict[str, tuple[type, str]] = {
        "replay": (ReplayParams, "kvbed replay (options marked * are also --options)"),
        "layout": (LayoutParams, "kvbed replay: how objects are placed in the namespace"),
    }
    for name in HINTS:
        broken = HINTS.load_error(name)
        if broken:  # an installed entry point that does not load: listed as such, failing only when used
            out[f"hints.{name}"] = (NoParams, f"kvbed replay --hints {name}: BROKEN, {broken}")
            continue
        cls = HINTS.get(name, warn=False).Params
        if any(True for _ in describe(cls)):
            out[f"hints.{name}"] = (cls, f"kvbed replay --hints {name}; --param KEY, hint.KEY or hints.KEY")
    out["faults"] = (FaultParams, "kvbed replay: injected faults and the recovery contract (also --fault, --contract)")
    for name in FAULTS:
        out[f"fault.{name}"] = (FAULTS.get(name).Params, f"kvbed replay --fault {name}@TIME,key=value...")
    out.update({
        "flash": (FlashParams, _devices_using(FlashParams) + " (kvbed replay, kvbed device run, kvbed up)"),
        "fdp": (FdpParams, _devices_using(FdpParams)),
        "zns": (ZnsParams, _devices_using(ZnsParams)),
        "dram": (DramParams, _devices_using(DramParams)),
        "cxl": (CxlParams, _devices_using(CxlParams)),
        "cache": (CxlSsdParams, _devices_using(CxlSsdParams)),
        "tier": (TierSimParams, "kvbed trace import / synth: the tier simulator (each is also an --option)"),
        "synth": (SynthParams, "kvbed trace synth"),
        "capture": (CaptureParams, "kvbed trace capture (options marked * are also --options); the raw-file "
                                   "importers take theirs from the raw file"),
        "cost": (CostParams, "the load-vs-recompute cost model (kvbed crossover; kvbed replay --tiers)"),
        "requests": (RequestParams, "kvbed replay --tiers: the request-level KV-ready and TTFT model"),
        "crossover": (CrossoverParams, "kvbed crossover (options marked * are also --options)"),
        "vm": (VmParams, "kvbed up, kvbed replay --target vm: the guest machine"),
        "link": (VmLinkParams, "kvbed replay --target vm: the link to the guest agent"),
    })
    return out


def _devices_using(cls: type) -> str:
    """``"devices a, b"``: the registered devices one of whose parameter groups is ``cls``."""
    from devicemodels import DEVICES

    names = [n for n in DEVICES if cls in DEVICES.get(n).param_classes.values()]
    return f"device{'s' if len(names) > 1 else ''} {', '.join(names)}"


def auto_sized(cls: type) -> dict[str, str]:
    """How a replay sizes the fields of device parameter class ``cls`` (by field), if it does: the listing
    and the reference mark those defaults, which a replay overrides from the trace unless given."""
    from devicemodels import DEVICES
    from kvreplay.replay.sizing import AUTO_SIZED

    out: dict[str, str] = {}
    for d in DEVICES:
        for g, c in DEVICES.get(d).param_classes.items():
            if c is cls:
                out.update(AUTO_SIZED.get(g, {}))
    return out


def _default(row: dict[str, Any]) -> str:
    return row["default"] if row["default"] != "" else '""'


def markdown(names: list[str] | None = None) -> str:
    """One table per parameter set: key, default, unit or choices, meaning."""
    sets = parameter_sets()
    parts = []
    for name in names or list(sets):
        cls, where = sets[name]
        auto = auto_sized(cls)
        lines = [f"**{name}** ({where})", "", "| key | default | unit / choices | meaning |", "|---|---|---|---|"]
        for r in describe(cls):
            kind = ", ".join(r["choices"]) if r["choices"] else (r["unit"] or "")
            key = f"`{r['name']}`" + ("*" if r["cli"] else "")
            default = f"`{_default(r)}`" + (" (replay: auto)" if r["name"] in auto else "")
            lines.append(f"| {key} | {default} | {kind} | {r['help'].replace('|', '/')} |")
        if auto:
            lines += ["", "replay: auto = `kvbed replay` sizes it from the trace unless given: "
                      + "; ".join(f"`{k}`: {how}" for k, how in auto.items()) + "."]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def keys_epilog(names: list[str]) -> str:
    """The ``--param`` keys of some sets, one line each, for a command's help."""
    sets = parameter_sets()
    return "\n".join(f"  {n}: {', '.join(r['name'] for r in describe(sets[n][0])) or f'none (`kvbed params {n}`)'}"
                     for n in names)
