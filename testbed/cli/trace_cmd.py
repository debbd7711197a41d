"""``kvbed trace``: import, synthesise, validate and summarise KV lifecycle traces.

Tier-simulator options are generated from :class:`kvreplay.tiers.TierSimParams`
(one ``--field-name`` per field, values with unit suffixes such as ``512GiB``),
so the CLI, the saved generator settings and the dataclass never drift apart.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from testbed.cli.options import field_option, param_option
from testbed.cli.console import console, facts_table
from testbed.cli.registry_help import LazyChoice, LazyHelpOption, RegistryEpilogCommand, names
from kvbed.core.errors import Interrupted, KvbedError
from testbed.humanize import fmt_bytes, fmt_ns, fmt_pct
from kvbed.core.params import field_types, split_overrides, with_options, with_overrides

# --------------------------------------------------------------------------- helpers


def _out() -> Console:
    return console()


def _err() -> Console:
    return Console(stderr=True)


@contextmanager
def _progress(what: str) -> Iterator[Any]:
    """A rich progress bar on stderr (silent when stderr is not a terminal); yields update(done, total)."""
    console = _err()
    with Progress(TextColumn(f"[bold]{what}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal) as prog:
        task = prog.add_task(what, total=None)

        def update(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)

        yield update


def _opt_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def tier_options(base: Any) -> Any:
    """Click options generated from the fields of TierSimParams (plus ``--policy`` for all tiers);
    the defaults shown are those of ``base``, the command's own TierSimParams."""

    def deco(f: Any) -> Any:
        for fld in reversed(dataclasses.fields(base)):
            help_ = fld.metadata.get("help", "")
            default = getattr(base, fld.name)
            f = field_option(fld, _show_default(fld.name, default) or "none", name=_opt_name(fld.name), default=None,
                             metavar="V")(f)
        f = click.option("--policy", "policy", multiple=True, metavar="NAME|TIER=NAME", cls=LazyHelpOption,
                         lazy_help={"names": names("kvreplay.tiers.policies:EVICTION_POLICIES"),
                                    "tiers": names("kvreplay.tiers:SIM_TIERS")},
                         help="eviction policy ({names}) for every tier, or for one TIER ({tiers}) "
                              "(repeatable)")(f)
        return f

    return deco


def _show_default(name: str, value: Any) -> str:
    if name.endswith("_bytes") and isinstance(value, int) and value:
        return fmt_bytes(value).replace(" ", "").replace(".0", "")
    return str(value)


def build_tier_params(base: Any, kwargs: dict[str, Any], extra: list[str]) -> Any:
    """``base`` with ``--policy`` (every tier, or ``TIER=NAME``: a base the rest may refine), then the
    generated per-field options and the ``--param`` pairs, which take one path (a key given both ways is
    refused)."""
    from kvreplay.tiers import SIM_TIERS, TierSimParams

    policies: dict[str, str] = {}
    for spec in kwargs.pop("policy", ()) or ():
        if "=" in spec:
            tier, name = (s.strip() for s in spec.split("=", 1))
            if tier not in SIM_TIERS:
                raise KvbedError(f"--policy: unknown tier {tier!r} (choose from: {', '.join(SIM_TIERS)})")
            policies[f"{tier}_policy"] = name
        else:
            for tier in SIM_TIERS:
                policies[f"{tier}_policy"] = spec
    options = {name: kwargs.pop(name, None) for name in field_types(TierSimParams)}
    p = with_overrides(base, policies, what="--policy")
    p = with_overrides(p, with_options(extra, options))
    return p.validate()


def _tier_table(tier_stats: dict[str, Any]) -> Table:
    t = Table(title="tier simulation", title_justify="left")
    for c in ("tier", "capacity", "policy", "hits / all chunks", "hits / lookups", "lookups", "bytes in", "bytes out",
              "evictions", "deletes", "invalidations", "peak"):
        t.add_column(c, justify="left" if c in ("tier", "policy") else "right")
    from kvreplay.tiers import SIM_TIERS

    old = False
    for name in SIM_TIERS:
        r = tier_stats.get(name)
        if r is None:
            continue
        ref = r.get("ref_hit_ratio")
        old = old or ref is None
        t.add_row(name, fmt_bytes(r["capacity_bytes"]), r["policy"], "n/a" if ref is None else fmt_pct(ref),
                  fmt_pct(r["lookup_hit_ratio"]), f"{r['lookups']:,}",
                  fmt_bytes(r["bytes_in"]), fmt_bytes(r["bytes_out"]), f"{r['evictions']:,}", f"{r['deletes']:,}",
                  f"{r['invalidations']:,}", fmt_bytes(r["peak_bytes"]))
    lines = ["hits / all chunks: the share of every request's chunks the tier served; hits / lookups: among the "
             "chunks looked up in it (a request stops at its first chunk no tier holds)"]
    if old:
        lines.append("n/a: not recorded in this trace (written before per-chunk hit ratios, without a chunk count)")
    a = tier_stats.get("all")
    if a:
        lines.append(f"prefix reuse: {fmt_pct(a['chunk_hit_ratio'])} of chunks, {fmt_pct(a['token_hit_ratio'])} of "
                     f"tokens; mean queueing {fmt_ns(a['mean_queue_ns'])} (max {fmt_ns(a['max_queue_ns'])})")
    t.caption = "\n".join(lines)
    return t


def share_line(sh: dict[str, Any]) -> str:
    """One line on the sharing domains: reuse, cross-tenant hits (the leakage surface), bytes stored."""
    n = sh["domains"]
    return (f"sharing domain {sh['share']} ({n:,} domain{'' if n == 1 else 's'}): "
            f"{fmt_pct(sh['chunk_hit_ratio'])} of chunks, "
            f"{fmt_pct(sh['token_hit_ratio'])} of tokens reused; {sh['cross_tenant_hits']:,} cross-tenant hits "
            f"({fmt_bytes(sh['cross_tenant_bytes'])}, {fmt_pct(sh['cross_tenant_hit_share'])} of hits); "
            f"{sh['distinct_chunks']:,} distinct chunks, {fmt_bytes(sh['bytes_in'])} written into the tiers")


def _share_table(sh: dict[str, Any]) -> Table:
    t = Table(title=f"per tenant, sharing domain {sh['share']}", title_justify="left")
    for c in ("tenant", "requests", "chunk hits", "token hits", "cross-tenant in", "served others", "bytes in",
              "at end"):
        t.add_column(c, justify="left" if c == "tenant" else "right")
    for name, r in sh["tenants"].items():
        t.add_row(name, f"{r['requests']:,}", fmt_pct(r["chunk_hit_ratio"]), fmt_pct(r["token_hit_ratio"]),
                  f"{r['cross_tenant_hits']:,} / {fmt_bytes(r['cross_tenant_bytes'])}",
                  f"{r['served_other_tenants']:,} / {fmt_bytes(r['served_other_tenants_bytes'])}",
                  fmt_bytes(r["bytes_in"]), fmt_bytes(r["end_bytes"]))
    t.caption = share_line(sh)
    return t


def _print_share(con: Console, sh: dict[str, Any]) -> None:
    """The per-tenant table when there are several tenants, else the one line."""
    if len(sh["tenants"]) > 1:
        con.print(_share_table(sh))
    else:
        con.print(share_line(sh))


def _print_trace(res: Any, meta: Any, out: Path, as_json: bool) -> None:
    summary = {
        "output": str(out),
        "events": res.events,
        "objects": res.objects,
        "source_facts": meta.source_facts,
        "geometry": meta.geometry,
        "tier_stats": res.tier_stats,
        "share": res.share,
        "elapsed_s": round(res.elapsed_s, 3),
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str))
        return
    con = _out()
    con.print(facts_table(meta.source_facts))
    con.print(_tier_table(res.tier_stats))
    _print_share(con, res.share)
    g = meta.geometry
    con.print(f"wrote [bold]{out}[/]: {res.events:,} events, {res.objects:,} objects "
              f"({g['model']}, {fmt_bytes(g['bytes_per_token'])}/token, {g['tokens_per_object']} tokens = "
              f"{fmt_bytes(g['object_bytes'])} per object)")


# --------------------------------------------------------------------------- commands


@click.group("trace")
def trace() -> None:
    """Import, synthesise, validate and summarise KV lifecycle traces (Parquet, format v2; v1 still read)."""


def _import_defaults() -> Any:
    from kvreplay.tiers import TierSimParams

    return TierSimParams()


def _synth_defaults() -> Any:
    from kvreplay.synth import SYNTH_TIER_DEFAULTS

    return SYNTH_TIER_DEFAULTS


@trace.command("import", cls=RegistryEpilogCommand, registry_epilog=("Formats", "kvreplay.importers:IMPORTERS"))
@click.argument("fmt", metavar="FORMAT", type=LazyChoice("kvreplay.importers:IMPORTERS", case_sensitive=False))
@click.argument("src", metavar="IN", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="lifecycle trace to write (.parquet)")
@tier_options(_import_defaults())
@param_option("any tier simulator field, e.g. ssd_bytes=1TiB")
@click.option("--drop-inconsistent", is_flag=True,
              help="request-level sources: drop the lines whose hash_ids do not match their input_length "
                   "(counted in the source facts) instead of refusing the file at the first one")
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
def import_cmd(fmt: str, src: Path, out: Path, params: tuple[str, ...], drop_inconsistent: bool, as_json: bool,
               **kwargs: Any) -> None:
    """Import a request trace and tier-simulate it into a lifecycle trace.

    \b
    Request-level sources (Formats below) run through the tier simulator:
    GPU HBM -> CPU DRAM -> [CXL] -> SSD, LRU per tier, write-through to SSD,
    Llama-3-8B geometry and 256-token objects unless overridden. The source facts
    (requests, distinct block ids, references, reuse share, time span) are
    printed and kept in the file's metadata. A line whose hash_ids do not
    number ceil(input_length / tokens per id) is refused, naming it, unless
    --drop-inconsistent drops and counts such lines.

    \b
    Example:
      kvbed trace import mooncake conversation_trace.jsonl -o mc.parquet --ssd-bytes 1TiB
    """
    from kvreplay.importers import IMPORTERS
    from kvreplay.tiers import TierSimParams
    from kvreplay.tracegen import import_trace

    importer = IMPORTERS.get(fmt)()
    tier = build_tier_params(TierSimParams(), kwargs, list(params))
    if importer.level == "event":
        if drop_inconsistent:
            raise KvbedError(f"--drop-inconsistent is for request-level sources (lines with block lists); "
                             f"{fmt} is an engine event stream")
        with _nothing_written(out):
            _import_events(importer, src, out, as_json)
        return
    with _nothing_written(out), _progress("tier simulation") as update:
        res, meta = import_trace(fmt, src, tier, out, progress=update, drop_inconsistent=drop_inconsistent)
    _print_trace(res, meta, out, as_json)


@contextmanager
def _nothing_written(out: Path) -> Iterator[None]:
    """Ctrl-C while a trace is made: the file is renamed into place only when whole, so nothing is kept
    (a lifecycle trace cut short would hold objects that never die and tier statistics of a prefix)."""
    try:
        existed = out.exists()
    except OSError:  # a name the file system refuses: the writer says so
        existed = False
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(f"nothing written ({out} {'left as it was' if existed else 'not created'})") from None


def _import_events(importer: Any, src: Path, out: Path, as_json: bool) -> None:
    """Engine event streams are lifecycle events already: no tier simulation."""
    from kvreplay.schema import TraceMeta, TraceWriter

    if not Path(src).exists():
        raise KvbedError("no such file", where=str(src))
    err = _err()
    importer.warn = lambda s: err.print(f"[yellow]warning[/]: {s}", highlight=False, soft_wrap=True)
    with TraceWriter(out, TraceMeta(source={"importer": importer.name})) as w:
        meta = importer.write_events(src, w)
        w.close(meta)
    summary = {"output": str(out), "events": w.rows, "source_facts": meta.source_facts}
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str))
    else:
        con = _out()
        if meta.source_facts:
            con.print(facts_table(meta.source_facts))
        con.print(f"wrote [bold]{out}[/]: {w.rows:,} events")


def _synth_help() -> str:
    from kvreplay.synth import SynthParams

    items = ", ".join(f"{f.name}={f.default}" for f in dataclasses.fields(SynthParams))
    return f"Synthetic workload parameters (set with --param k=v): {items}."


@trace.command("synth", epilog=_synth_help())
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="lifecycle trace to write (.parquet)")
@click.option("--seed", type=int, default=None, help="random seed [default: 0]")
@click.option("--duration-s", type=float, default=None, help="simulated seconds of session arrivals [default: 1200]")
@click.option("--sessions-per-s", type=float, default=None, help="session arrival rate [default: 1.2]")
@click.option("--tenants", type=int, default=None, help="tenants (profiles chat, rag, agent, batch) [default: 4]")
@tier_options(_synth_defaults())
@param_option("any synth or tier simulator field (see below), e.g. rag_corpus_docs=2000")
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
def synth_cmd(out: Path, seed: int | None, duration_s: float | None, sessions_per_s: float | None,
              tenants: int | None, params: tuple[str, ...], as_json: bool, **kwargs: Any) -> None:
    """Generate a deterministic synthetic workload and tier-simulate it (no data needed).

    \b
    Tenants with shared system prompts; chat sessions, RAG over a Zipf-popular
    corpus, agent loops, one-shot batch documents; LoRA adapter updates that
    invalidate a tenant's KV. Tier defaults are sized to the workload (GPU 8 GiB,
    CPU 32 GiB, SSD 128 GiB; the batch tenant stores quantized copies on SSD) so
    every tier evicts.
    """
    from kvreplay.synth import SYNTH_TIER_DEFAULTS, SynthParams
    from kvreplay.tiers import TierSimParams
    from kvreplay.tracegen import synth_trace

    options = {"seed": seed, "duration_s": duration_s, "sessions_per_s": sessions_per_s, "tenants": tenants}
    groups = split_overrides(with_options(params, options), {"synth": SynthParams, "tier": TierSimParams})
    sp = with_overrides(SynthParams(), groups["synth"]).validate()
    tier = build_tier_params(SYNTH_TIER_DEFAULTS, kwargs, groups["tier"])
    with _nothing_written(out), _progress("tier simulation") as update:
        res, meta = synth_trace(sp, tier, out, progress=update)
    _print_trace(res, meta, out, as_json)



@trace.command("validate")
@click.argument("path", metavar="TRACE", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--max-report", type=int, default=20, show_default=True, help="violations listed with their rows")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
def validate_cmd(path: Path, max_report: int, as_json: bool) -> None:
    """Check every invariant of a lifecycle trace; list the first violations with row numbers.

    Exit status: 0 valid, 1 violations found, 2 unreadable file or wrong format.
    """
    from kvreplay.validate import validate_trace

    with _progress("validate") as update:
        rep = validate_trace(path, max_report=max(1, max_report), progress=update)
    if as_json:
        click.echo(json.dumps(rep.to_dict(), indent=2))
    else:
        con = _out()
        if rep.ok:
            con.print(f"[green]valid[/]: {path}: {rep.rows:,} events, {rep.objects:,} objects, "
                      f"{rep.live_copies_at_end:,} copies live at the end")
        else:
            t = Table(title=f"{path}: {sum(rep.counts.values()):,} violations", title_justify="left")
            for c in ("row", "violation", "op", "tier", "obj_id", "ts_ns"):
                t.add_column(c)
            for v in rep.first:
                t.add_row(str(v.row), v.message, v.op, v.tier, str(v.obj_id), str(v.ts_ns))
            con.print(t)
            con.print("counts: " + ", ".join(f"{k}={n:,}" for k, n in rep.counts.items()))
        if rep.never_committed:
            con.print(f"note: {rep.never_committed:,} objects created but never committed")
        if not rep.content_keys:
            con.print("note: a format v1 trace has no content keys; their invariants were not checked")
    if not rep.ok:
        sys.exit(1)


@trace.command("sort")
@click.argument("src", metavar="IN", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="trace to write (.parquet; may be IN)")
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
def sort_cmd(src: Path, out: Path, as_json: bool) -> None:
    """Write a copy of a trace with its rows in time order (stable: rows of equal time keep their order).

    For a trace whose converter wrote rows out of order, which replays and studies refuse. The metadata
    is kept, with a note that the rows were sorted; check the copy with `kvbed trace validate`.
    """
    from kvreplay.tracesort import sort_trace

    with _nothing_written(out):
        res = sort_trace(src, out)
    if as_json:
        click.echo(json.dumps(res.__dict__, indent=2))
        return
    _out().print(f"wrote [bold]{out}[/]: {res.rows:,} events in time order ({res.rows_back_in_time:,} went back in "
                 f"time in {src}, {res.rows_moved:,} rows moved)")


@trace.command("stats")
@click.argument("path", metavar="TRACE", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print everything as JSON")
def stats_cmd(path: Path, as_json: bool) -> None:
    """Per op/tier counts and bytes, lifetimes, reuse distance, top-10% reuse share, per tenant/kind, and content
    by tier: each tier's hit ratio against Belady's and an unbounded cache's on its content-key sequence, reuse
    distance by key and by object, and the share of its writes re-writing content it held before (a v1 trace,
    without content keys: the object-based figures only)."""
    from kvreplay.stats import trace_stats

    with _progress("stats") as update:
        s = trace_stats(path, progress=update)
    if as_json:
        click.echo(json.dumps(s, indent=2, default=str))
        return
    print_stats(_out(), s)


@trace.command("models")
def models_cmd() -> None:
    """KV geometry table: bytes per token of the models the tier simulator knows."""
    from kvreplay.tiers import MODELS

    t = Table(title="KV geometry (2 x layers x KV heads x head dim x dtype bytes; MLA: latent only)",
              title_justify="left")
    for c in ("model", "layers", "KV heads", "head dim", "bf16 B/token", "256-token object", "config"):
        t.add_column(c, justify="left" if c in ("model", "config") else "right")
    for m in MODELS.values():
        bpt = m.bytes_per_token("bf16")
        t.add_row(m.name, str(m.layers), str(m.kv_heads), str(m.head_dim) + (" (latent)" if m.latent else ""),
                  f"{bpt:,}", fmt_bytes(256 * bpt), m.source)
    _out().print(t)


# --------------------------------------------------------------------------- stats printout


def print_stats(con: Console, s: dict[str, Any]) -> None:
    m = s["meta"]
    src = m.get("source") or {}
    head = Table(title=f"{s['path']}", title_justify="left", show_header=False)
    head.add_column("k")
    head.add_column("v")
    head.add_row("events", f"{s['rows']:,} in {s['row_groups']} row groups, span {fmt_ns(s['span_ns'])}")
    if src:
        head.add_row("source", " ".join(f"{k}={v}" for k, v in src.items() if k in ("importer", "path", "sha256")))
    g = m.get("geometry") or {}
    if g:
        head.add_row("geometry", f"{g.get('model')} {g.get('kv_dtype', '')}: {fmt_bytes(g.get('bytes_per_token'))}/token, "
                     f"{g.get('tokens_per_object')} tokens per object ({fmt_bytes(g.get('object_bytes'))})")
    ts = (m.get("generator") or {}).get("tier_sim")
    if ts:
        head.add_row("tier sim", ", ".join(f"{k}={_short(k, v)}" for k, v in ts.items()
                                           if k not in ("bytes_per_token", "object_bytes")))
    sy = (m.get("generator") or {}).get("synth")
    if sy:
        head.add_row("synth", ", ".join(f"{k}={v}" for k, v in sy.items()))
    head.add_row("created by", f"{m.get('created_by')} (format v{m.get('format_version')})")
    con.print(head)
    if m.get("source_facts"):
        con.print(facts_table(m["source_facts"]))
    if m.get("tier_stats"):
        con.print(_tier_table(m["tier_stats"]))
        if m["tier_stats"].get("share"):
            _print_share(con, m["tier_stats"]["share"])

    from kvreplay.schema import OPS, TIERS

    present = [t for t in TIERS if any(r["tier"] == t for r in s["ops"])]
    ot = Table(title="events per op and tier (count / bytes)", title_justify="left")
    ot.add_column("op")
    for t in present:
        ot.add_column(t, justify="right")
    cell = {(r["op"], r["tier"]): r for r in s["ops"]}
    for op in OPS:
        if not any((op, t) in cell for t in present):
            continue
        ot.add_row(op, *[f"{cell[(op, t)]['count']:,} / {fmt_bytes(cell[(op, t)]['bytes'])}" if (op, t) in cell else ""
                         for t in present])
    con.print(ot)

    lt = Table(title="lifetimes (first event -> last copy gone) and residency per tier", title_justify="left")
    for c in ("", "N", "p50", "p90", "p99", "max"):
        lt.add_column(c, justify="left" if not c else "right")
    o = s["objects"]

    def row(name: str, h: dict[str, Any], fmt=fmt_ns) -> None:
        p = h.get("percentile", {})
        lt.add_row(name, f"{h['N']:,}", fmt(p.get("50.000000")), fmt(p.get("90.000000")), fmt(p.get("99.000000")),
                   fmt(h["max"] if h["N"] else None))

    row("object lifetime", s["lifetime_ns"])
    for tier, h in s["residency_ns"].items():
        row(f"residency {tier}", h)
    lt.caption = f"objects: {o['total']:,} total, {o['ended']:,} ended, {o['live_at_end']:,} live at the end"
    con.print(lt)

    r = s["reuse"]
    rt = Table(title="reuse (exact LRU stack distance over create/transform/recover/hit/load)", title_justify="left")
    for c in ("", "N", "p50", "p90", "p99", "max"):
        rt.add_column(c, justify="left" if not c else "right")
    for name, key, fmt in (("distance (objects)", "distance_objects", lambda v: "-" if v is None else f"{v:,}"),
                           ("distance (bytes)", "distance_bytes", fmt_bytes)):
        h = r[key]
        p = h.get("percentile", {})
        rt.add_row(name, f"{h['N']:,}", fmt(p.get("50.000000")), fmt(p.get("90.000000")), fmt(p.get("99.000000")),
                   fmt(h["max"] if h["N"] else None))
    rt.caption = (f"{r['accesses']:,} accesses, {r['reuses']:,} reuses; top 10% of objects take "
                  f"{fmt_pct(r['top10pct_objects_reuse_share'])} of reuses; "
                  f"{fmt_pct(r['objects_never_reused_share'])} of objects are never reused")
    if not any(o["op"] in ("hit", "load") and o["count"] for o in s["ops"]):  # e.g. a capture of engine events
        rt.caption += ("\n[bold]this trace has no hit or load events (an engine capture publishes stores and "
                       "removals only): reuse was not recorded, which is not the same as none[/bold]")
    con.print(rt)

    _print_content(con, s["content"])

    for title, rows in (("per tenant", s["tenants"]), ("per kind", s["kinds"])):
        t = Table(title=title, title_justify="left")
        for c in ("name", "events", "objects", "persisted (sum)", "loads (sum)", "hits", "deletes", "invalidations",
                  "lifetime p50", "lifetime p90"):
            t.add_column(c, justify="left" if c == "name" else "right")
        t.caption = ("persisted, loads: summed over every tier (gpu, cpu, ssd...; a gpu persist is an HBM refill); "
                     "the ops table above has them per tier")
        for g_ in rows:
            t.add_row(g_["name"], f"{g_['events']:,}", f"{g_['objects']:,}", fmt_bytes(g_["persist_bytes"]),
                      f"{g_['loads']:,}", f"{g_['hits']:,}", f"{g_['deletes']:,}", f"{g_['invalidations']:,}",
                      fmt_ns(g_["lifetime_p50_ns"]), fmt_ns(g_["lifetime_p90_ns"]))
        con.print(t)


def _print_content(con: Console, c: dict[str, Any]) -> None:
    """The content section: references and keys, then the "content by tier" table (kvreplay.contentstats)."""
    if c["content_keys"]:
        line = (f"content: {c['references']:,} chunk references (hit, load, create, recover) of "
                f"{c['distinct_keys']:,} distinct content keys and {c['distinct_objects']:,} objects")
        if c["references_without_key"]:
            line += f"; {c['references_without_key']:,} without a key (each counted as new content)"
    else:
        line = f"content: {c['note']}; {c['references']:,} chunk references of {c['distinct_objects']:,} objects"
    if c["references_not_in_trace"]:
        line += (f"; {c['references_not_in_trace']:,} of the {c['chunk_references_recorded']:,} chunk references the "
                 "tier simulator counted have no event (recomputed while resident)")
    con.print(line)
    if not c["tiers"]:
        return

    def pct(v: float | None) -> str:
        return "-" if v is None else fmt_pct(v)

    def num(v: int | None) -> str:
        return "-" if v is None else f"{v:,}"

    t = Table(title="content by tier (hit ratios per access that reached the tier: not served by a faster tier)",
              title_justify="left")
    for col in ("tier", "accesses", "policy", "Belady", "unbounded", "slots", "reuse keys p50/p90",
                "reuse objects p50/p90", "writes", "re-written", "re-written by object"):
        t.add_column(col, justify="left" if col == "tier" else "right")
    for r in c["tiers"]:
        t.add_row(r["tier"], f"{r['accesses']:,}", pct(r["policy_hit_ratio_per_access"]),
                  pct(r["belady_hit_ratio_per_access"]), pct(r["unbounded_hit_ratio_per_access"]), num(r["slots"]),
                  f"{num(r['reuse_distance_keys_p50'])} / {num(r['reuse_distance_keys_p90'])}",
                  f"{num(r['reuse_distance_objects_p50'])} / {num(r['reuse_distance_objects_p90'])}",
                  f"{r['writes']:,}", pct(r["rewritten_share_of_writes"]),
                  pct(r["rewritten_share_of_writes_by_object"]))
    notes = ["policy: what the trace's tier simulator served; Belady: MIN on the tier's content-key sequence with "
             "slots = capacity / largest object; unbounded: accesses to a key seen before; reuse distance in "
             "distinct keys / objects; re-written: share of the tier's writes (commit, persist, recover) of content "
             "(key, kind, scope) or of an object it stored before"]
    notes += [f"{r['tier']}: {r['slot_sizing']}" for r in c["tiers"] if r["slot_sizing"] not in (None, "exact")]
    t.caption = "\n".join(notes)
    con.print(t)


def _short(k: str, v: Any) -> str:
    if k.endswith("_bytes") and isinstance(v, int):
        return fmt_bytes(v).replace(" ", "")
    if isinstance(v, float) and v >= 1e6:
        return f"{v:.3g}"
    return str(v)


def _add_capture() -> None:
    from testbed.cli.capture_cmd import capture_cmd

    trace.add_command(capture_cmd)


_add_capture()
