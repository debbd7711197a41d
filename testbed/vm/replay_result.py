"""What a VM replay adds to the embedded replay's result once the ops are through: ``sources`` (where every
figure comes from, see :mod:`testbed.vm.replay`), ``target`` and ``vm`` sections in result.json, vm.json, and
the VM's part of the runtime.

:func:`assemble` is the whole of it, in named parts: end the last leg, run the cross-checks, take the job's
host bytes (and, on a device that counts flash, its WAF) from the device, then the sections one by one.
"""

from __future__ import annotations

from typing import Any

from kvreplay.replay.engine import Replay, RunConfig
from kvbed.core.params import to_dict
from testbed.vm import backends
from testbed.vm.client import AgentTimeout, VmDied, VmError
from testbed.vm.powerloss import GuestPowerLoss
from testbed.vm.replay_checks import cross_checks, power_loss_check
from testbed.vm.replay_config import VmLinkParams
from testbed.vm.replay_legs import Leg, VmReplayTarget, log_delta
from testbed.vm.target import VmTarget, merge_histograms
from testbed.vm.vm import Vm

SOURCES_NVME = {"lat_ns": "guest", "object_lat_ns": "guest", "waf": "model", "media_bytes_written": "model",
                "gc": "model", "gc_stall": "model", "erases": "model", "wear": "model", "per_ruh": "model",
                "zone_resets": "layout", "host_gc": "layout",
                "saturation": "guest"}  # from the guest's completion times, as the latency


def assemble(parts: dict[str, Any], rep: Replay, cfg: RunConfig, tgt: VmReplayTarget, tg: VmTarget, vm: Vm, *,
             power: GuestPowerLoss | None, link: VmLinkParams, vm_params: Any, ephemeral: bool,
             times: dict[str, float]) -> None:
    """Add the VM's sections to the run's ``parts`` (result, files, runtime) in place."""
    res = parts["result"]
    job = res["jobs"][0]
    pb = tgt.page_bytes
    usable, skipped = _end_last_leg(tgt, tg)
    last, legs = tgt.leg, tgt.legs
    after = last.after
    hists = merge_histograms([leg.hists for leg in legs])
    guest = _sum([leg.counters for leg in legs])
    by_pid = _sum([leg.by_pid for leg in legs])
    cross = cross_checks(tgt, tg, rep, power, complete=not res["incomplete"]) if usable else []
    power_cmp = None
    if power is not None and power.scan is not None:
        power_cmp = power.compare(rep.fault_run.media.get(0) if rep.fault_run else None)
        cross.append(power_loss_check(power_cmp))
    mc = tgt.model.counters()
    fdp_log = _sum([log_delta(leg.before.get("fdp_stats"), leg.after.get("fdp_stats")) for leg in legs])
    smart = _sum([log_delta(leg.before.get("smart"), leg.after.get("smart")) for leg in legs])
    is_fdp = bool(tg.info.get("fdp"))
    sources, versus = _job_figures(job, tgt, tg, vm, cfg, is_fdp, fdp_log, smart, guest, power)
    job["sources"] = sources
    res["sources"] = sources
    res["target"] = _target_section(tg, vm, ephemeral, vm_params, link)
    res["vm"] = {
        "guest": _guest_section(guest, by_pid, hists),
        "device_log": _device_log_section(last, is_fdp, fdp_log, smart),
        "model": _model_section(cfg.device, mc, pb),
        "cross_checks": cross,
        "cross_checks_ok": all(c["ok"] for c in cross) if cross else None,
        "cross_checks_skipped": skipped,
    }
    if versus is not None:
        res["vm"]["device_vs_model"] = versus
    if power_cmp is not None:
        res["vm"]["power_loss"] = power_cmp
    if last.fdp is not None and getattr(last.fdp, "skipped", None):
        res["vm"]["cross_checks_not_predicted"] = last.fdp.skipped
    parts.setdefault("files", {})["vm.json"] = _vm_json(res["target"], tg, vm, legs, after, hists, guest)
    parts["runtime"]["vm"] = _runtime(tgt, vm, times, guest)


def _end_last_leg(tgt: VmReplayTarget, tg: VmTarget) -> tuple[bool, str | None]:
    """Read the last leg's log pages, histograms and counters if the run did not already; (whether the agent
    still answers, why the cross-checks were skipped if not)."""
    failed = tgt.failed
    usable = not isinstance(failed, (VmDied, AgentTimeout))  # the agent still answers
    skipped = None
    last = tgt.leg
    if last.after is None:
        if usable:
            try:
                last.end(tg)
            except VmError as exc:
                usable, skipped = False, f"collection failed: {exc}"
        else:
            skipped = f"the VM could not be asked after the failure ({failed})"
        if not usable:  # what the last reply said
            last.after, last.hists, last.counters, last.by_pid = {}, {}, tg.counters(), tg.bytes_written_by_pid()
    return usable, skipped


def _job_figures(job: dict[str, Any], tgt: VmReplayTarget, tg: VmTarget, vm: Vm, cfg: RunConfig, is_fdp: bool,
                 fdp_log: dict[str, int], smart: dict[str, int], guest: dict[str, int], power: GuestPowerLoss | None
                 ) -> tuple[dict[str, str], dict[str, Any] | None]:
    """The job's host bytes written from the device (FDP statistics) or the guest, and, on a device that counts
    flash (FDP statistics, or pages in the SMART log's vendor area), its WAF, media bytes and erases where it
    counts them; (the source of each figure, the device vs the model or None)."""
    host_src = "device log" if is_fdp and fdp_log else "guest"
    if is_fdp and fdp_log:
        job["host_bytes_written"] = int(fdp_log["host_bytes_written"])
    else:
        job["host_bytes_written"] = int(guest.get("bytes_written", 0))
    sources = dict(SOURCES_NVME, host_bytes_written=host_src)
    be = backends.backend(vm.backend)
    versus = None
    if be.flash_stats and is_fdp and fdp_log:
        # the device counts flash: its WAF, media bytes and erases are the run's, the model's beside them
        versus = _device_vs_model(fdp_log, tgt.model.counters(), tgt.page_bytes, cfg.device_params["flash"],
                                  be.label)
        dev = versus["device"]
        job["waf"], job["media_bytes_written"] = dev["waf"], dev["media_bytes_written"]
        job["erases"], job["media_bytes_erased"] = dev["erases"], dev["media_bytes_erased"]
        sources.update(waf=dev["source"], media_bytes_written=dev["source"], erases=dev["source"])
    elif be.smart_flash_pages and not is_fdp and smart.get(be.smart_flash_pages[0], 0) > 0:
        # a conventional flash SSD that counts host and relocated pages (no erases): its WAF and media bytes
        versus = _device_vs_model_smart(smart, be.smart_flash_pages, tgt.model.counters(), tgt.page_bytes,
                                        cfg.device_params["flash"], be.label)
        dev = versus["device"]
        job["waf"], job["media_bytes_written"] = dev["waf"], dev["media_bytes_written"]
        sources.update(waf=dev["source"], media_bytes_written=dev["source"])
    if tg.info["kind"] == "cxl":
        sources = {"lat_ns": "guest", "object_lat_ns": "guest", "host_bytes_written": "guest",
                   "media_bytes_written": "model", "waf": "model"}
    if power is not None:  # the model's clock drives the kill point: its completions are the run's
        sources.update(lat_ns="model", object_lat_ns="model")
    return sources, versus


def _target_section(tg: VmTarget, vm: Vm, ephemeral: bool, vm_params: Any, link: VmLinkParams) -> dict[str, Any]:
    return {
        "kind": "vm", "vm": vm.name, "ephemeral": ephemeral, "device": vm.device, "backend": vm.backend,
        "accel": vm.state.accel,
        "image": vm.state.image, "backing": vm_params.backing if tg.info["kind"] != "cxl" else None,
        "qemu_params": vm.state.params, "link": to_dict(link),
        "agent": {k: tg.hello.get(k) for k in ("agent_version", "kernel", "python")},
    }


def _guest_section(guest: dict[str, int], by_pid: dict[str, int], hists: dict[str, Any]) -> dict[str, Any]:
    return {"source": "guest", "ops": {k[4:]: v for k, v in guest.items() if k.startswith("ops_")},
            **{k: guest.get(k, 0) for k in ("commands", "bytes_written", "bytes_read", "bytes_trimmed", "errors")},
            "bytes_written_by_pid": by_pid,
            "latency": {op: {k: v for k, v in d.items() if k != "buckets"} for op, d in hists.items()}}


def _device_log_section(last: Leg, is_fdp: bool, fdp_log: dict[str, int], smart: dict[str, int]
                        ) -> dict[str, Any]:
    """The log pages' figures: FDP statistics and SMART over the run, the last leg's reclaim unit handles and
    zones."""
    after = last.after
    ruh = None
    if is_fdp and after.get("ruh_status"):
        sent = last.fdp.bytes_by_pid  # (of the last leg: a restarted QEMU starts its handles afresh)
        ruh = [{"pid": int(b["pid"]), "ruamw_lbas_before": int(b["ruamw_lbas"]),
                "ruamw_lbas_after": int(a["ruamw_lbas"]), "bytes_written": int(sent[i])}
               for i, (b, a) in enumerate(zip(last.before["ruh_status"], after["ruh_status"]))]
    zones = None
    if after.get("zone_report"):
        st: dict[str, int] = {}
        for z in after["zone_report"]:
            st[z["state"]] = st.get(z["state"], 0) + 1
        zones = {"zones": len(after["zone_report"]), "by_state": st}
    return {"source": "device log", "fdp_stats": fdp_log or None, "smart": smart or None,
            "ruh_status": ruh, "zones": zones}


def _model_section(device: str, mc: dict[str, int], pb: int) -> dict[str, Any]:
    host_model = int(mc.get("host_pages_written", 0)) * pb
    media_model = int(mc.get("media_pages_written", 0)) * pb
    return {"source": "model", "device": device,
            "waf": media_model / host_model if host_model else None,
            "host_bytes_written": host_model, "media_bytes_written": media_model,
            "gc_runs": int(mc.get("gc_runs", 0)), "gc_pages_moved": int(mc.get("gc_pages_moved", 0)),
            "erases": int(mc.get("block_erases", 0))}


def _vm_json(target: dict[str, Any], tg: VmTarget, vm: Vm, legs: list[Leg], after: dict[str, Any],
             hists: dict[str, Any], guest: dict[str, int]) -> dict[str, Any]:
    """vm.json: what the VM was, its log pages before and after (each leg's, when several), latency, counters."""
    out = {
        "vm": target, "qemu_pid": vm.pid, "boot_s": vm.state.boot_s, "device_info": tg.info,
        "logs_before": legs[0].before,
        "logs_after": after or None, "latency": hists, "counters": guest,
    }
    if len(legs) > 1:
        out["legs"] = [
            {"leg": leg.name, "ops": leg.ops, "bytes_written": leg.bytes_written,
             "submit_s": round(leg.submit_s, 3), "logs_before": leg.before,
             "logs_after": leg.after or None, "counters": leg.counters} for leg in legs]
    return out


def _runtime(tgt: VmReplayTarget, vm: Vm, times: dict[str, float], guest: dict[str, int]) -> dict[str, Any]:
    """The VM's part of the runtime: boot, up and down times, and the throughput of the submits."""
    sub = tgt.submit_s
    return {
        "boot_s": vm.state.boot_s, **{k: round(v, 3) for k, v in times.items()},
        "submit_s": round(sub, 3), "ops": tgt.ops, "commands": int(guest.get("commands", 0)),
        "bytes_written": tgt.bytes_written, "bytes_read": int(guest.get("bytes_read", 0)),
        "mb_per_s": (tgt.bytes_written + int(guest.get("bytes_read", 0))) / sub / 1e6 if sub else None,
        "commands_per_s": int(guest.get("commands", 0)) / sub if sub else None,
        "ops_per_s": tgt.ops / sub if sub else None,
    }


def _model_figures(mc: dict[str, int], pb: int, block: int) -> dict[str, Any]:
    """The model's host and media bytes, GC bytes moved and erases on the completed command stream."""
    mh, mm = int(mc.get("host_pages_written", 0)) * pb, int(mc.get("media_pages_written", 0)) * pb
    me = int(mc.get("block_erases", 0))
    return {"source": "model", "host_bytes_written": mh, "media_bytes_written": mm, "gc_bytes_moved": mm - mh,
            "media_bytes_erased": me * block, "erases": me, "waf": mm / mh if mh else None}


def _side_by_side(dev: dict[str, Any], mod: dict[str, Any], note: str) -> dict[str, Any]:
    """The device's figures and the model's (only those the device has), with their ratio (device / model)."""
    keys = [k for k in dev if k not in ("source", "waf")]
    mod = {k: mod[k] for k in ("source", *keys, "waf")}

    def ratio(a, b):
        return a / b if a is not None and b else None

    return {"device": dev, "model": mod,
            "ratio": {k: ratio(dev[k], mod[k]) for k in ("waf", *(k for k in keys if dev[k] is not None))},
            "note": note}


def _device_vs_model(fdp_log: dict[str, int], mc: dict[str, int], pb: int, flash, label: str) -> dict[str, Any]:
    """A flash-counting device's FDP statistics and the model's figures on the same completed command
    stream, side by side with their ratio (device / model); each names its source."""
    block = flash.pages_per_block * pb
    host, media, erased = (int(fdp_log.get(k, 0)) for k in ("host_bytes_written", "media_bytes_written",
                                                             "media_bytes_erased"))
    dev = {"source": f"device log ({label} FDP statistics)", "host_bytes_written": host,
           "media_bytes_written": media, "media_bytes_erased": erased, "erases": erased // block,
           "waf": media / host if host else None}
    return _side_by_side(dev, _model_figures(mc, pb, block),
                         f"ratio = {label} / model; erases in blocks of pages_per_block x page_bytes")


def _device_vs_model_smart(smart: dict[str, int], fields: tuple[str, str], mc: dict[str, int], pb: int, flash,
                           label: str) -> dict[str, Any]:
    """A conventional SSD's page counters from its SMART log (host-programmed, GC-relocated pages of the flash
    page size) beside the model's figures on the same completed command stream; it does not count erases."""
    host, moved = (int(smart.get(k, 0)) * flash.page_bytes for k in fields)
    dev = {"source": f"device log ({label} SMART vendor area: host and GC-relocated pages)",
           "host_bytes_written": host, "media_bytes_written": host + moved, "gc_bytes_moved": moved,
           "erases": None, "waf": (host + moved) / host if host else None}
    return _side_by_side(dev, _model_figures(mc, pb, flash.pages_per_block * pb),
                         f"ratio = {label} / model; {label}'s conventional SSD counts no erases "
                         "(erases: the model's only)")


def _sum(parts: list[dict | None]) -> dict[str, int]:
    """Integer counters of several legs added key by key."""
    out: dict[str, int] = {}
    for d in parts:
        for k, v in (d or {}).items():
            if isinstance(v, int):
                out[k] = out.get(k, 0) + v
    return out
