"""Defaults FEMU can express: a FEMU VM starts from the user's capacity, OP and handle count alone.

Why: the model's own defaults (16 MiB reclaim units, initially isolated handles, idle-time GC, a free-line
threshold no integer percent of FEMU's lines gives) are fine for the model and impossible for FEMU, so a
FEMU VM with only ``logical_bytes op_ratio nruh`` was refused for values nobody asked for, one refusal after
another. Here every refusal of :mod:`testbed.femu.devices` that names a value FEMU would take (its ``fix``)
is applied to the fields the user did not give (a preset's fields count as given), and the mapping is tried
again until nothing more can be chosen. What the user gave is never changed: it is refused, in one line that
says what would work. The chosen values are part of the VM's parameters, so the model beside the VM (and
every saved config) is the same device; ``kvbed femu args`` lists them.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

from kvbed.core.params import expand_presets, format_value
from testbed.femu.devices import FEMU_DEVICES, FemuMapping

#: rounds of choosing: a fix can uncover the next refusal (the GC thresholds are checked on the geometry,
#: which is only built once the reclaim unit and the GC trigger are expressible; shorter lines change the
#: line count, so the thresholds FEMU can state)
MAX_ROUNDS = 8


class Chosen(NamedTuple):
    field: str
    value: Any
    model_default: Any  # what the model would have used
    why: str  # the refusal that chose it


def given_fields(overrides: Iterable[str], classes: dict[str, type]) -> set[str]:
    """The fields ``k=v`` overrides set, a preset's fields included (``group.key`` counts as ``key``)."""
    pairs = expand_presets(list(overrides), classes)
    return {p.split("=", 1)[0].strip().replace("-", "_").rpartition(".")[2] for p in pairs if "=" in p}


def femu_params(device: str, overrides: Iterable[str] = ()) -> tuple[dict[str, Any], list[Chosen]]:
    """The device's parameters for FEMU: the user's ``overrides`` plus FEMU-expressible values for the fields
    they left out that FEMU could not express; validated like any device's. Returns (params, chosen)."""
    from testbed.vm import qemu

    overrides = list(overrides)
    dev = qemu.device(device)
    given = given_fields(overrides, dev.param_classes)
    chosen: dict[str, Chosen] = {}
    for _ in range(MAX_ROUNDS):
        p = qemu.resolve_params(device, [*_pairs(chosen), *overrides], validate=False)
        m = FemuMapping()
        FEMU_DEVICES.get(device)(p, m)
        new = {k: Chosen(k, v, chosen[k].model_default if k in chosen else _value(p, k), r.text)
               for r in m.refusals for k, v in r.fix.items() if k not in given}
        if not new or all(k in chosen and chosen[k].value == c.value for k, c in new.items()):
            break
        chosen.update(new)
    return qemu.resolve_params(device, [*_pairs(chosen), *overrides]), list(chosen.values())


def _pairs(chosen: dict[str, Chosen]) -> list[str]:
    return [f"{c.field}={format_value(c.field, c.value)}" for c in chosen.values()]


def _value(p: dict[str, Any], key: str) -> Any:
    return next((getattr(g, key) for g in p.values() if hasattr(g, key)), None)
