"""``kvbed trace capture``: record a lifecycle trace from running engines' KV event streams.

Options that are :class:`kvreplay.capture.CaptureParams` fields take the ``--param`` path (one
parser, one set of checks); Ctrl-C and SIGTERM stop the capture cleanly, writing what it captured.
"""

from __future__ import annotations

import json
import signal
import threading
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Iterator

import click
from rich.console import Console
from rich.live import Live
from rich.text import Text

from testbed.cli.options import param_option
from testbed.cli.console import console, facts_table
from kvbed.core.params import with_options, with_overrides


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """SIGINT and SIGTERM set the returned event (the capture checks it every 100 ms) instead of
    killing the process mid-write; the previous handlers come back afterwards."""
    ev = threading.Event()
    old = {s: signal.signal(s, lambda *_: ev.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield ev
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _line(d: dict[str, Any]) -> Text:
    el = max(d["elapsed_s"], 1e-9)
    media = sorted(set(d["stored_blocks"]) | set(d["removed_blocks"]))
    per = ", ".join(f"{m} +{d['stored_blocks'].get(m, 0):,}/-{d['removed_blocks'].get(m, 0):,}" for m in media)
    seen = max(d["last_seen_s"]) if d["last_seen_s"] else 0.0
    return Text(f"capture {el:5.0f}s  {d['block_events'] / el:,.0f} block events/s  {d['messages']:,} msgs  "
                f"blocks {per or '-'}  gaps filled {d['gaps_filled']:,} lost {d['lost_messages']:,}  "
                f"oldest publisher seen {seen:.1f}s ago")


@click.command("capture")
@click.option("--zmq", "endpoints", multiple=True, required=True, metavar="ENDPOINT",
              help="a publisher's KV event endpoint, e.g. tcp://HOST:5557 (repeat per engine instance or DP rank; "
                   "an endpoint with * is bound, for engines that connect)")
@click.option("--replay", "replay", multiple=True, metavar="ENDPOINT",
              help="the publisher's replay endpoint (ROUTER), one per --zmq in the same order; fills sequence gaps")
@click.option("--topic", default=None, help="capture only topics starting with this [default: every topic]")
@click.option("--duration", "--duration-s", "duration_s", default=None, metavar="S",
              help="stop after S seconds [default: until Ctrl-C or SIGTERM]")
@click.option("--model", default=None, help="model whose KV geometry sizes the blocks (kvbed trace models)")
@click.option("--tokens-per-block", default=None, metavar="N", help="block tokens when events omit block_size")
@click.option("--engine", type=click.Choice(["vllm", "sglang"]), default="vllm", show_default=True,
              help="the engine publishing (decides what AllBlocksCleared empties; selects the raw file's importer)")
@click.option("--medium", "media", multiple=True, metavar="NAME=TIER",
              help="map an engine medium to a tier (e.g. CPU_TIER2=ssd; NAME@LOCALITY for one vLLM locality); defaults: "
                   "GPU=gpu, CPU/CPU_PINNED/CPU_TIER1=cpu, CPU_TIER2=cxl, STORAGE@LOCAL/STORAGE/FS/DISK=ssd, "
                   "STORAGE@REMOTE/OBJ/EXTERNAL=remote")
@click.option("--raw", "raw", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="also record the frames as received (re-decode with kvbed trace import vllm-events FILE)")
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="lifecycle trace to write (.parquet); valid after every flush")
@param_option("any capture field (`kvbed params capture`)")
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
def capture_cmd(endpoints: tuple[str, ...], replay: tuple[str, ...], topic: str | None, duration_s: str | None,
                model: str | None, tokens_per_block: str | None, engine: str, media: tuple[str, ...],
                raw: Path | None, out: Path, params: tuple[str, ...], as_json: bool) -> None:
    """Capture a lifecycle trace from vLLM/SGLang KV event streams over ZMQ.

    \b
    BlockStored -> the block's copy committed (first copy) or persisted in the medium's tier,
    size = block tokens x the model's bytes per token; BlockRemoved -> evict (delete for the
    last copy); AllBlocksCleared -> the same for every copy in its medium, or in what the
    engine's reset empties (vLLM: GPU; SGLang: GPU and host pool). KV cache groups are separate
    objects. Sequence gaps are filled from --replay; what cannot be filled is counted; an event
    that cannot be decoded is skipped alone, warned once per kind and counted. Stops on Ctrl-C,
    SIGTERM or --duration, writing everything captured (exit 0).

    \b
    Example:
      kvbed trace capture --zmq tcp://127.0.0.1:5557 --replay tcp://127.0.0.1:5558 \\
          --model llama-3-8b --raw cap.kvraw -o cap.parquet
    """
    from kvreplay.capture import CaptureParams
    from kvreplay.capture.lifecycle import medium_map
    from kvreplay.capture.subscriber import LiveCapture

    options = {"topic": topic, "duration_s": duration_s, "model": model, "tokens_per_block": tokens_per_block}
    p = with_overrides(CaptureParams(), with_options(params, options)).validate()
    err = Console(stderr=True)
    warned: list[str] = []

    def warn(s: str) -> None:
        warned.append(s)
        err.print(f"[yellow]warning[/]: {s}", highlight=False, soft_wrap=True)

    cap = LiveCapture(list(endpoints), out, p, replay=list(replay), raw=raw, engine=engine, media=medium_map(media),
                      warn=warn)
    live = Live(Text("capture: waiting for publishers"), console=err, refresh_per_second=2, transient=True) \
        if err.is_terminal else nullcontext()
    with live, _stop_on_signals() as stop:
        if err.is_terminal:
            cap.progress = lambda d: live.update(_line(d))
        res = cap.run(stop.is_set)
    f = res.facts
    if as_json:
        click.echo(json.dumps({"output": str(res.output), "events": res.rows, "elapsed_s": round(res.elapsed_s, 3),
                               "stopped_by": res.stopped_by, "flushes": res.flushes, "facts": f}, indent=2))
        return
    con = console()
    con.print(facts_table({k: v for k, v in f.items() if v not in ({}, 0) or k in ("messages", "lost_messages")},
                           "capture"))
    if f["messages"] == 0:
        con.print(f"[yellow]no messages received[/] from {', '.join(endpoints)} (is the engine running with KV "
                  "events enabled, and the endpoint its publisher address?)")
    if warned:
        con.print(f"[yellow]{len(warned)} warning{'s' if len(warned) != 1 else ''}[/] (each kind once; the counts are "
                  "in the table above)")
    con.print(f"wrote [bold]{res.output}[/]: {res.rows:,} events in {res.elapsed_s:.1f}s (stopped by "
              f"{res.stopped_by})" + (f"; raw frames in {raw}" if raw else ""))
