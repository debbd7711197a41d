"""What a replay would refuse of a point's settings before reading its trace, checked at validation time.

``build_config`` parses and routes a point's keys; the ranges of the device's parameter groups and of the
hint policy's are checked only when the replay builds the device and the policy (after the trace's scan).
A study checks them here, on the parsed config, so ``op_ratio = 11`` is refused by ``study validate``
instead of failing every point of ``study run``. Cheap: no trace is read and no device is built.
"""

from __future__ import annotations

from typing import Any


def check_config(cfg: Any) -> None:
    """Raise the replay's own KvbedError for a value out of range in ``cfg`` (a RunConfig)."""
    from devicemodels import DEVICES
    from kvreplay.hints import HINTS
    from kvreplay.layout import layout_for

    groups = cfg.device_params
    flash = groups.get("flash")
    for g in groups.values():
        if hasattr(g, "validate"):
            g.validate()
        if flash is not None and g is not flash and hasattr(g, "validate_with"):
            g.validate_with(flash)
    device_cls = DEVICES.get(cfg.device)
    layout_cls = layout_for(device_cls)
    n_classes = cfg.replay.classes or layout_cls.default_classes(device_cls, groups, cfg.layout)
    layout_cls.open_streams(n_classes, groups, cfg.layout)
    policy_cls = HINTS.get(cfg.hints)
    policy_cls(n_classes, cfg.hint_params, seed=cfg.replay.seed, tier=cfg.replay.tier_code)
