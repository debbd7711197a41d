"""Comparison of finished runs (``kvbed report``): one row per run, read from saved files only."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from testbed import humanize, labels
from testbed.results import Run


def fmt_bytes(n: float | int | None) -> str:
    """Three significant digits: 1.5 KiB, 21.3 GiB, 512 MiB."""
    return humanize.fmt_bytes(n, sig3=True)


def fmt_ns(ns: float | int | None) -> str:
    """Three significant digits: 43.8 ms, 5.00 s, 531 ms."""
    return humanize.fmt_ns(ns, sig3=True)


def _pct(entry: dict[str, Any] | None, p: str) -> int | None:
    if not entry:
        return None
    return entry.get("lat_ns", {}).get("percentile", {}).get(p)


def compare(runs: list[Run]) -> list[dict[str, Any]]:
    """The figures of each run (of each tier of a multi-tier run, with its requests' TTFT); WAF change relative
    to the first row."""
    rows = []
    base = base_media = None
    for r, j in ((r, j) for r in runs for j in r.result["jobs"]):
        e2e, media = j.get("end_to_end_waf"), j.get("media_bytes_written")
        if base is None:
            base, base_media = e2e, media
        rows.append({
            "run": str(r.path),
            "device": j.get("device"),
            "hints": j.get("hints"),
            "tier": j.get("tier"),
            "waf": j.get("waf"),
            "host_waf": j.get("host_waf"),
            "end_to_end_waf": e2e,
            "waf_change_vs_first": (e2e / base - 1.0) if (e2e and base) else None,
            "user_bytes_written": j.get("user_bytes_written"),
            "media_bytes_written": media,
            "media_change_vs_first": (media / base_media - 1.0) if (media and base_media) else None,
            "gc_count": j.get("gc_count"),
            "gc_bytes_moved": (j.get("gc") or {}).get("bytes_moved"),
            "gc_stall_ns": j.get("gc_stall_ns"),  # a sum over stalls (old name of gc_stall_total_ns)
            "gc_stall_total_ns": j.get("gc_stall_ns"),
            **_stall(j.get("gc_stall")),
            **_saturation(j.get("saturation")),
            "erases": j.get("erases"),
            "zone_resets": j.get("zone_resets"),
            "host_gc_relocated_bytes": (j.get("host_gc") or {}).get("relocated_bytes"),
            "object_read_p50_ns": _pct(j.get("object_read"), "50.000000"),
            "object_read_p99_ns": _pct(j.get("object_read"), "99.000000"),
            "object_read_p999_ns": _pct(j.get("object_read"), "99.900000"),
            "write_p99_ns": _pct(j.get("write"), "99.000000"),
            "forced_evictions": (j.get("layout") or {}).get("forced_evictions"),
            "incomplete": bool(r.result.get("incomplete")),
            "seed": ((r.config.get("tiers") or {}).get(j.get("tier")) or r.config).get("replay", {}).get("seed"),
            **_ttft(r.result.get("requests")),
            **_hit_ratios((r.result.get("requests") or {}).get("tiers"), j.get("tier")),
            **({"hint_lab": (j.get("hint_policy") or {}).get("lab")} if (j.get("hint_policy") or {}).get("lab")
               else {}),
        })
    from testbed.rundiff import differing

    for row, diff in zip(rows, differing(runs)):
        row["differs"] = diff  # the settings that differ between the compared rows (testbed.rundiff)
    return rows


def _setting(name: str, v: Any) -> str:
    """A setting as the table shows it: sizes and times with units, "-" for a setting a run lacks."""
    if v is None or v == "":
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)) and name.endswith("_bytes"):
        return fmt_bytes(v)
    if isinstance(v, (int, float)) and name.endswith("_ns"):
        return fmt_ns(v)
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    return str(v)


def _stall(gs: dict[str, Any] | None) -> dict[str, Any]:
    """Per-write GC stall figures (None for a run saved before they existed)."""
    w = (gs or {}).get("stalled_write_wait_ns") or {}
    return {"gc_stalled_write_cmds_ratio": (gs or {}).get("stalled_write_cmds_ratio"),
            "gc_stall_wait_p99_ns": w.get("p99"), "gc_stall": gs}


def _saturation(sat: dict[str, Any] | None) -> dict[str, Any]:
    """Was the device keeping up (None for a run saved before the figures existed)."""
    sat = sat or {}
    return {"saturated": sat.get("saturated"), "backlogged_ratio": sat.get("backlogged_ratio"),
            "busy_ratio": sat.get("busy_ratio"), "longest_backlog_ns": sat.get("longest_backlog_ns"),
            "saturation": sat or None}


def _hit_ratios(tiers: dict[str, Any] | None, tier: str | None) -> dict[str, Any]:
    """A multi-tier run's tier: hits / every chunk of every request, and hits / the lookups that reached it."""
    if not tiers or tier not in tiers:
        return {}
    t = tiers[tier]  # a run saved before the two names: chunk_share was hits / all chunks, hit_ratio hits / lookups
    return {"ref_hit_ratio": t.get("ref_hit_ratio", t.get("chunk_share")),
            "lookup_hit_ratio": t.get("lookup_hit_ratio", t.get("hit_ratio"))}


def _ttft(req: dict[str, Any] | None) -> dict[str, Any]:
    if not req:
        return {}
    lat = req["ttft_ns"]
    return {"on_hit": req["on_hit"], "ttft_mean_ns": lat.get("mean"),
            "ttft_p50_ns": lat["percentile"].get("50.000000"), "ttft_p99_ns": lat["percentile"].get("99.000000")}


#: the tables' columns fold a cell too wide for a narrow terminal onto more lines, never end it with "…" (a WAF
#: read "1.…"); printed to a file or a pipe they get their full width (testbed.cli.console.print_whole)
FOLD = "fold"


def _waf(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def denominators_differ(rows: list[dict[str, Any]]) -> bool:
    """Whether runs of one tier wrote different bytes for the trace's objects (a recovery contract's headers, another
    page size): then their end-to-end WAFs divide by different amounts and only media bytes compare."""
    seen: dict[Any, set] = {}
    for r in rows:
        if r["user_bytes_written"] is not None and not r["incomplete"]:  # a partial run is marked as such
            seen.setdefault(r["tier"], set()).add(r["user_bytes_written"])
    return any(len(v) > 1 for v in seen.values())


def render_table(rows: list[dict[str, Any]]) -> Table:
    """The comparison as a rich table (every figure is in ``--json``); host-GC columns only when a run has them."""
    from pathlib import Path

    host_gc = any((r["host_waf"] or 1.0) != 1.0 or r["zone_resets"] for r in rows)
    apart = denominators_differ(rows)
    t = Table(title="kvbed runs: end-to-end WAF (change vs the first run), GC, KV object load latency",
              header_style="bold")
    cols = [
        ("run", lambda r: Path(r["run"]).name + (" [red](partial)[/red]" if r["incomplete"] else "")),
        ("device", lambda r: r["device"]),
        ("hints", lambda r: r["hints"]),
        ("WAF", lambda r: _waf(r["end_to_end_waf"])),
        ("change", lambda r: "-" if r["waf_change_vs_first"] is None else f"{100 * r['waf_change_vs_first']:+.1f}%"),
    ]
    if apart:
        cols += [("written for KV", lambda r: fmt_bytes(r["user_bytes_written"])),
                 ("media written", lambda r: fmt_bytes(r["media_bytes_written"])),
                 ("media change", lambda r: "-" if r["media_change_vs_first"] is None
                  else f"{100 * r['media_change_vs_first']:+.1f}%")]
    cols += [
        ("GC moved", lambda r: fmt_bytes(r["gc_bytes_moved"])),
        ("GC stall (sum)", lambda r: fmt_ns(r["gc_stall_total_ns"])),
        ("writes stalled", lambda r: labels.stalled_share(r["gc_stall"])),
        ("stall p99", lambda r: fmt_ns(r["gc_stall_wait_p99_ns"])),
    ]
    if host_gc:
        cols += [("zone resets", lambda r: f"{r['zone_resets'] or 0:,}"),
                 ("host GC moved", lambda r: fmt_bytes(r["host_gc_relocated_bytes"]))]
    if any("ttft_p50_ns" in r for r in rows):
        cols.insert(1, ("tier", lambda r: r["tier"] or "-"))
    cols += [
        ("load p50", lambda r: fmt_ns(r["object_read_p50_ns"])),
        ("load p99", lambda r: fmt_ns(r["object_read_p99_ns"])),
        ("load p99.9", lambda r: fmt_ns(r["object_read_p999_ns"])),
    ]
    if any("ttft_p50_ns" in r for r in rows):
        cols += [("TTFT p50", lambda r: fmt_ns(r.get("ttft_p50_ns"))), ("TTFT p99", lambda r: fmt_ns(r.get("ttft_p99_ns")))]
    if any("lookup_hit_ratio" in r for r in rows):
        ratio = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
        cols += [("hits / all chunks", lambda r: ratio(r.get("ref_hit_ratio"))),
                 ("hits / lookups", lambda r: ratio(r.get("lookup_hit_ratio")))]
    cols.append(("backlogged", lambda r: labels.saturation_cell(r["saturation"])))
    notes = ["GC stall (sum): summed over stalls, which overlap in time; writes stalled: share of the device's "
             "write commands that waited for foreground GC; stall p99: among those; backlogged: share of the "
             "span during which an op in flight had waited longer than the run's saturation_wait_ns"]
    if apart:
        notes.append("[bold]WAF divides by the bytes each run wrote for the trace's objects (whole pages, plus a "
                     "recovery contract's headers), and these differ between runs of one tier: its change is not the "
                     "change in flash writes. 'media change' is (a contract that writes more can show a lower WAF)."
                     "[/bold]")
    if any("lookup_hit_ratio" in r for r in rows):
        notes.append("hits / all chunks: the share of every request's chunks the tier served; hits / lookups: among "
                     "the chunks looked up in it (a request stops at its first chunk no tier holds)")
    notes += [f"[red]{Path(r['run']).name}" + (f" ({r['tier']})" if "ttft_p50_ns" in r else "") +
              f": {labels.saturation_warning(r['saturation'])}[/red]" for r in rows if r["saturated"]]
    t.caption = "\n".join(notes)
    t.caption_justify = "left"
    for name, _ in cols:
        t.add_column(name, justify="left" if name in ("run", "device", "hints") else "right", overflow=FOLD)
    for r in rows:
        t.add_row(*(f(r) for _, f in cols))
    return t


def render_lab(rows: list[dict[str, Any]]) -> Table | None:
    """The runs made with ``--hint-lab``: their hints against the oracle's (None when no run has a lab)."""
    from pathlib import Path

    labbed = [r for r in rows if r.get("hint_lab")]
    if not labbed:
        return None
    t = Table(title="hint lab: each run's hints against the oracle's on the same trace and device",
              header_style="bold")
    for name in ("run", "hints", "accuracy", "one class", "Spearman", "WAF none", "WAF hints", "WAF oracle",
                 "oracle cut captured"):
        t.add_column(name, justify="left" if name in ("run", "hints") else "right", overflow=FOLD)
    for r in labbed:
        lab = r["hint_lab"]
        w = lab["waf"]
        cap = lab["oracle_waf_cut_captured_ratio"]
        rho = lab["spearman"]
        one = lab.get("accuracy_one_class")  # runs before it was recorded have none
        t.add_row(Path(r["run"]).name, str(r["hints"]), f"{100 * lab['accuracy']:.1f}%",
                  "-" if one is None else f"{100 * one:.1f}%", "-" if rho is None else f"{rho:+.3f}",
                  _waf(w["none"]), _waf(w["policy"]), _waf(w["oracle"]), "-" if cap is None else f"{100 * cap:.0f}%")
    t.caption = ("accuracy: share of the tier's writes given the oracle's class; one class: the accuracy of giving "
                 "every write the oracle's largest class; Spearman: rank correlation of the "
                 "class with the true remaining lifetime (- : one class); oracle cut captured: (WAF none - WAF "
                 "hints) / (WAF none - WAF oracle), end-to-end WAF (- : the oracle cuts nothing)")
    t.caption_justify = "left"
    return t


def render_differences(rows: list[dict[str, Any]]) -> Table | None:
    """What differs between the compared runs (``differs``, testbed.rundiff): one column per setting, one row
    per row of the comparison; None when they differ in device and hints only (the comparison's columns)."""
    from pathlib import Path

    names = list(rows[0]["differs"]) if rows else []
    if not names:
        return None
    tiers = any(r.get("tier") and "ttft_p50_ns" in r for r in rows)
    t = Table(title="what differs between these runs (from their config.json)", header_style="bold")
    for name in ["run", *(["tier"] if tiers else []), "device", "hints", *names]:
        t.add_column(name, overflow=FOLD)
    for r in rows:
        t.add_row(Path(r["run"]).name, *([r["tier"] or "-"] if tiers else []), str(r["device"]), str(r["hints"]),
                  *(_setting(n, r["differs"][n]) for n in names))
    return t
