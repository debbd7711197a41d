"""The run config of a VM replay (``kvbed replay --target vm``): the ``--param`` pairs that go to the VM's
machine (``vm.*``: :class:`~testbed.vm.qemu.VmParams`) and to the link with its agent (``link.*``:
:class:`VmLinkParams`), and the device parameters of an attached VM (``--vm NAME``), whose geometry was fixed
at ``kvbed up`` (:data:`FIXED`); and the one fault a guest can take, checked before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devicemodels import DEVICES
from kvreplay.hints import HINTS
from kvreplay.replay.engine import RunConfig, build_config
from kvreplay.replay.params import LayoutParams, ReplayParams
from kvbed.core.errors import KvbedError
from kvbed.core.params import field_types, format_size, from_dict, param, split_overrides, to_dict, with_overrides
from testbed.vm import qemu, state
from testbed.vm.powerloss import GuestPowerLoss

VM_KINDS = tuple(qemu.VM_DEVICES.names())
#: what QEMU was started with (and the mapping unit the agent turns into LBAs): fixed once a VM is up
FIXED = {"flash": ("logical_bytes", "page_bytes"), "fdp": ("ru_bytes", "nruh", "nrg", "ruh_type"),
         "zns": ("zone_bytes", "zone_cap_bytes", "max_open_zones", "max_active_zones", "implicit_close"),
         "cxl": ("cxl_bytes", "page_bytes")}


@dataclass(frozen=True)
class VmLinkParams:
    """How the replay talks to the guest agent (``--param batch_ops=512`` ...)."""

    batch_ops: int = param(256, "ops per message to the agent")
    inflight: int = param(2, "messages outstanding, so the agent always has the next batch queued")
    reply_timeout_s: float = param(60.0, "an agent silent for this long is declared stuck")

    def validate(self) -> "VmLinkParams":
        if self.batch_ops < 1 or self.inflight < 1:
            raise KvbedError(f"batch_ops and inflight must be >= 1, got {self.batch_ops}, {self.inflight}")
        if not self.reply_timeout_s > 0:
            raise KvbedError(f"reply_timeout_s must be positive, got {self.reply_timeout_s}")
        return self


def split_vm_params(params: list[str] | tuple[str, ...]) -> tuple[list[str], list[str], list[str]]:
    """``--param`` pairs -> (replay/layout/hint/model pairs, VM machine pairs, agent link pairs)."""
    vm_keys, link_keys = set(field_types(qemu.VmParams)), set(field_types(VmLinkParams))
    rest, vm, link = [], [], []
    for p in params:
        k, sep, v = p.partition("=")
        g, _, bare = k.strip().replace("-", "_").rpartition(".")
        if g == "vm" or (not g and bare in vm_keys):
            vm.append(f"{bare}={v}" if sep else p)
        elif g == "link" or (not g and bare in link_keys):
            link.append(f"{bare}={v}" if sep else p)
        else:
            rest.append(p)
    return rest, vm, link


def fixed_of(groups: dict[str, Any]) -> dict[str, Any]:
    """The fixed fields (:data:`FIXED`) of parameter groups, as ``group.field``: value."""
    return {f"{g}.{f}": getattr(groups[g], f) for g, fs in FIXED.items() if g in groups for f in fs}


def build_vm_config(trace: str, device: str | None, hints: str, params: list[str] | tuple[str, ...] = (),
                    options: dict[str, Any] | None = None, *, vm: str | None = None) -> RunConfig:
    """The run config of a VM replay: on VM ``vm`` (its recorded parameters), or on an ephemeral VM."""
    rest, vm_pairs, link_pairs = split_vm_params(params)
    link = with_overrides(VmLinkParams(), link_pairs).validate()
    if vm is None:
        device = device or "fdp"
        if device not in VM_KINDS:
            raise KvbedError(f"--target vm: no VM device {device!r} (VM devices: {', '.join(VM_KINDS)})")
        cfg = build_config(trace, device, hints, rest, options)
        # a power loss is checked by reading the namespace back after QEMU restarts: it must keep its data
        backing = "file" if cfg.faults.active else "null"
        vm_params = with_overrides(qemu.VmParams(backing=backing), vm_pairs).validate()
        cfg.target = {"kind": "vm", "vm": None, "ephemeral": True, "vm_params": to_dict(vm_params),
                      "link": to_dict(link)}
        return cfg
    st = state.find(vm)
    if device and device != st.device:
        raise KvbedError(f"--vm {vm} is a {st.device} VM, not {device} (leave --device out or pick another VM)")
    if vm_pairs:
        raise KvbedError(f"--vm {vm}: the VM's machine parameters ({', '.join(p.split('=')[0] for p in vm_pairs)}) "
                         f"are fixed at `kvbed up`; leave them out")
    device = st.device
    cfg = build_config(trace, device, hints, rest, options)
    model_cls = DEVICES.get(device)
    routed = split_overrides(rest, {"replay": ReplayParams, "layout": LayoutParams, "hint": HINTS.get(hints).Params,
                                    **model_cls.param_classes})
    groups = {}
    for g, c in model_cls.param_classes.items():
        base = from_dict(c, st.params.get(g, {}), where=f"VM {vm}: recorded params.{g}")
        for kv in routed[g]:
            k = kv.split("=", 1)[0].strip().replace("-", "_")
            if k in FIXED.get(g, ()):
                raise KvbedError(f"--vm {vm}: {k} is fixed at `kvbed up` (the VM has {k}={format_size(getattr(base, k))}); "
                                 f"start a VM with another {k}, or drop --vm for one sized from the trace")
        groups[g] = with_overrides(base, routed[g])
    if "flash" in groups and not any(kv.split("=")[0].strip() in ("seed", "flash.seed") for kv in rest):
        groups["flash"] = with_overrides(groups["flash"], {"seed": cfg.replay.seed})
    cfg.device_params = groups
    # every field is the VM's or the user's: sizing only checks that the trace fits
    cfg.explicit = sorted({f for c in model_cls.param_classes.values() for f in field_types(c)})
    cfg.target = {"kind": "vm", "vm": vm, "ephemeral": False, "vm_params": st.params.get("vm"), "link": to_dict(link)}
    return cfg


def guest_power_loss(cfg: RunConfig, vm_params: qemu.VmParams, *, ephemeral: bool) -> GuestPowerLoss:
    """The one fault a guest can take (a power loss), on a VM it may kill: checked before anything starts."""
    faults = cfg.faults.parsed()
    kinds = sorted({f.name for f in faults})
    if len(faults) != 1 or faults[0].name != "power-loss":
        raise KvbedError(f"--target vm: the guest takes one power-loss fault (got {len(faults)}: "
                         f"{', '.join(kinds) or 'none'}); the other kinds, and a contract alone, run on the "
                         f"embedded model (--target embedded)")
    if not ephemeral:
        raise KvbedError(f"--fault power-loss kills and restarts QEMU: not on VM {cfg.target.get('vm')} "
                         f"(leave --vm out for an ephemeral VM)")
    if vm_params.backing != "file":
        raise KvbedError("--fault power-loss needs backing=file (the namespace is read back after the restart; "
                         "null-co keeps nothing)")
    if cfg.device not in ("conv", "fdp"):
        raise KvbedError(f"--fault power-loss on --target vm: device {cfg.device} is not a conv or fdp NVMe "
                         f"namespace (the fault model follows conv/fdp extents; cxl memory is volatile)")
    return GuestPowerLoss(faults[0], cfg.replay.time_scale)
