"""``kvbed crossover``: the object size from which loading KV from a tier beats recomputing it
(kvreplay.crossover; options are the fields of CrossoverParams marked cli, everything else ``--param``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

import click

from testbed.cli.options import field_option, param_option
from kvbed.core.errors import Interrupted, KvbedError
from kvreplay.crossover import CrossoverParams
from testbed.interrupt import interruptible


def _options(f: Callable) -> Callable:
    """One ``--field-name`` per CrossoverParams field marked cli."""
    defaults = CrossoverParams()
    for fld in reversed(dataclasses.fields(CrossoverParams)):
        if fld.metadata.get("cli"):
            f = field_option(fld, str(getattr(defaults, fld.name)), type=str, default=None)(f)
    return f


def _epilog() -> str:
    from testbed.paramdocs import keys_epilog

    return ("\b\n--param keys (`kvbed params` gives defaults, units, meaning):\n" + keys_epilog(["crossover", "cost"])
            + "\n  and any parameter of the swept tiers' device models (cxl, flash, cache, ...), e.g.\n"
            "  load_ns=400 bandwidth_bytes_per_s=16e9 page_read_ns=60us; a group prefix (cxl.load_ns) picks one.")


@click.command("crossover", epilog=_epilog())
@_options
@param_option("a crossover, cost-model or device parameter, e.g. remote_bytes_per_s=12.5e9 "
              "prefill_tokens_per_s=20000 load_ns=400")
@click.option("-o", "--output", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="write crossover.csv, curves.csv, crossover.json and crossover.png here")
@click.option("--json", "as_json", is_flag=True, help="print the results (without the curves) as JSON")
def crossover(params: tuple[str, ...], out: Path | None, as_json: bool, **options: Any) -> None:
    """From which object size (tokens) does loading KV from a tier beat recomputing it by prefill?

    Sweeps tier x model x accelerator x queue depth x object size: load time from the tiers' device models
    (remote: rtt + bytes / bandwidth), recompute time from the prefill profiles (kvreplay/costmodel.py).

    \b
    Examples:
      kvbed crossover
      kvbed crossover --tiers ssd,remote --models llama-3-8b --queue-depths 1,4,16 -o results/crossover
      kvbed crossover --param remote_bytes_per_s=12.5e9 --param prefill_tokens_per_s=20000 --json
    """
    from kvbed.core.atomicio import check_can_make_dir
    from kvbed.core.params import with_options, with_overrides
    from kvreplay.crossover import route_overrides, run_crossover, summary_json, write_outputs

    cross, cost, dev = route_overrides(with_options(params, options))
    p = with_overrides(CrossoverParams(), cross).validate()
    if out is not None:
        check_can_make_dir(out, str(out))
    try:
        res = run_crossover(p, cost, dev)
    except KeyboardInterrupt:
        raise Interrupted("during the sweep: nothing written") from None
    paths = []
    if out is not None:
        from testbed.crossover_plot import draw  # the plot is drawn here, from the files kvreplay wrote

        with interruptible() as intr:
            paths = write_outputs(res, out, intr)
            paths += draw(out, intr)
        if intr():
            raise Interrupted(f"while {intr.phase}: {', '.join(p.name for p in paths)} written, crossover.json "
                              f"marked incomplete, in {out}")
    if as_json:
        from kvbed.core.atomicio import json_default

        click.echo(json.dumps(summary_json(res), indent=2, default=json_default))
        return
    _print_table(res)
    for path in paths:
        click.echo(str(path))


def _print_table(res: dict[str, Any]) -> None:
    from rich.table import Table

    from testbed.cli.console import console
    from kvreplay.crossover import verdict_text

    rows = res["crossover"]
    tiers = list(res["tiers"])
    table = Table(title="crossover object size per tier: loading from the tier is no slower from this size on",
                  title_justify="left",
                  caption="break-even bandwidth: bytes/token x prefill tokens/s, the tier bandwidth above which "
                          "loading beats recomputing at any size (latency aside)", caption_justify="left")
    for col in ("model", "accel (TP)", "qd", "break-even bandwidth"):
        table.add_column(col, justify="right" if col in ("qd", "break-even bandwidth") else "left")
    for t in tiers:
        table.add_column(t, justify="right")
    cells: dict[tuple, dict[str, str]] = {}
    for r in rows:
        key = (r["model"], r["accelerator"], r["tp"], r["qd"], r["breakeven_bytes_per_s"])
        cells.setdefault(key, {})[r["tier"]] = verdict_text(r)
    for (m, a, tp, qd, be), by_tier in cells.items():
        table.add_row(m, f"{a} ({tp})" if tp else a, str(qd), f"{be / 1e9:.2f} GB/s",
                      *(by_tier.get(t, "") for t in tiers))
    con = console()
    con.print(table)
    for s in res["skipped"]:
        con.print(f"[yellow]skipped tier {s['tier']}:[/yellow] {s['reason']}")
    if not rows:
        raise KvbedError("no tier could be swept")
