"""The cross-checks of a VM replay: what the guest's agent and the device's log pages say against what the
replay sent (per leg, :mod:`testbed.vm.replay_legs`), the model's host bytes against the guest's, the zone
write pointers against the replay's zone layout, and a power loss's scan against the fault model.

Each check is one dict (``check``, ``ok``, ``expected``, ``observed``, ``note``) in result.json's
``vm.cross_checks``; a failed one is never silent (the CLI prints it and exits 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvreplay.replay.engine import Replay
from testbed.vm import checks
from testbed.vm.powerloss import GuestPowerLoss
from testbed.vm.replay_legs import Leg, VmReplayTarget, log_delta
from testbed.vm.target import VmTarget


def cross_checks(tgt: VmReplayTarget, tg: VmTarget, rep: Replay, power: GuestPowerLoss | None, *,
                 complete: bool) -> list[dict]:
    """Every leg's checks against its own log pages (named ``LEG.check`` when there are several), then the
    model's."""
    out: list[dict[str, Any]] = []
    for leg in tgt.legs:
        prefix = f"{leg.name}." if len(tgt.legs) > 1 else ""
        out += [dict(c, check=prefix + c["check"]) for c in leg_checks(leg)]
    pb = tgt.page_bytes
    host_model = int(tgt.model.counters().get("host_pages_written", 0)) * pb
    if power is None:
        out.append({"check": "model_host_bytes_written", "ok": host_model == tgt.bytes_written,
                    "expected": tgt.bytes_written, "observed": host_model,
                    "note": "the model was fed exactly the writes the guest completed"})
    else:
        held = power.sent["pages_not_issued"] * pb
        out.append({"check": "model_host_bytes_written", "ok": host_model == tgt.bytes_written + held,
                    "expected": tgt.bytes_written + held, "observed": host_model,
                    "note": "the model was fed every write; the guest all of them but the units the power loss "
                            f"kept from the media ({held} bytes)"})
    if complete and rep.layout.zoned and tgt.zns is not None and tgt.leg.after:
        out.append(layout_zone_check(rep, tg, tgt.leg.after["zone_report"]))
    return out


def leg_checks(leg: Leg) -> list[dict]:
    """One leg's checks against its own log pages and the agent's counters at its end."""
    out: list[dict[str, Any]] = []
    after, guest = leg.after or {}, leg.counters or {}
    out.append({"check": "agent_bytes_written", "ok": guest.get("bytes_written") == leg.bytes_written,
                "expected": leg.bytes_written, "observed": guest.get("bytes_written"),
                "note": "bytes the agent wrote vs the write ops the replay's layout made (completed ones)"})
    if leg.fdp is not None and after:
        out += leg.fdp.checks(after)
        want = {str(p): int(v) for p, v in enumerate(leg.fdp.bytes_by_pid) if v}
        got = {k: int(v) for k, v in (leg.by_pid or {}).items() if v}
        out.append({"check": "bytes_by_placement_id", "ok": want == got, "expected": want, "observed": got,
                    "note": "bytes the agent wrote with each placement id (DTYPE=2, DSPEC) vs the hints' ids"})
    if leg.zns is not None and after:
        out += leg.zns.checks(after["zone_report"])
    if "smart" in after:
        s = log_delta(leg.before["smart"], after["smart"])
        out.append({"check": "smart_host_write_commands", "ok": s["host_write_commands"] == leg.write_cmds,
                    "expected": leg.write_cmds, "observed": s["host_write_commands"],
                    "note": "SMART write commands vs the write commands the agent issued (MDTS splits)"})
        units = leg.bytes_written / 512_000  # SMART data units: 1000 x 512 bytes, the total rounded up
        lo, hi = int(np.floor(units)), int(np.ceil(units))
        out.append({"check": "smart_data_units_written", "ok": lo <= s["data_units_written"] <= hi,
                    "expected": [lo, hi], "observed": s["data_units_written"],
                    "note": "SMART data units written (rounded up by the device) vs bytes the agent wrote"})
    return out


def layout_zone_check(rep: Replay, tg: VmTarget, report: list[dict]) -> dict[str, Any]:
    """Every zone's write pointer as the replay's zone layout believes it vs the device's zone report."""
    from kvreplay.layout.zone import ZS_WP

    lpp = tg.page_bytes // int(tg.info["lba_bytes"])
    zone_lbas = int(tg.info["zone_lbas"])
    wp = rep.layout.zs[:, ZS_WP]
    n = min(len(wp), len(report))
    expected = np.arange(n, dtype=np.int64) * zone_lbas + wp[:n] * lpp
    observed = checks._zone_wps(report[:n])
    bad = np.flatnonzero(expected != observed)
    return {"check": "zone_write_pointers_vs_layout", "ok": len(bad) == 0 and len(wp) == len(report),
            "expected": int(n), "observed": int(n - len(bad)),
            "mismatches": {str(int(i)): {"expected": int(expected[i]), "observed": int(observed[i])} for i in bad[:20]},
            "note": "zones whose reported write pointer is where the replay's zone layout put it"}


def power_loss_check(comparison: dict[str, Any]) -> dict[str, Any]:
    """The check of a power loss: the guest's scan after the restart against the fault model's media map
    (``comparison``: :meth:`GuestPowerLoss.compare`)."""
    return {"check": "power_loss_scan_vs_model", "ok": comparison["ok"],
            "expected": comparison["writes_predicted"], "observed": comparison["agree"],
            "note": "writes whose state after the restart (intact, torn, missing, and pages present) "
                    "the guest's scan and the fault model's media map agree on"}
