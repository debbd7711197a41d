"""A KV trace where hints matter, replayed on FEMU and beside it on the model: no hints and oracle hints.

Why: the FEMU cross-checks of :mod:`testbed.femu.compare` are plain FTL workloads, and the one KV replay run on
FEMU before had WAF 1.0 with and without hints, so it showed that the path works, not that the model's hint
effect holds on FEMU. Here a KV trace writes about five times the device and the oracle cuts the model's WAF
by about a tenth; FEMU's WAF (its FDP statistics log) and the model's on the same completed command stream
come out of one VM replay (``result.json`` ``vm.device_vs_model``), once per hint policy, each on a fresh VM
(FEMU's flash state outlives a replay; the model starts fresh).

The trace is the synthetic multi-tenant workload (the kv-hints-fdp study's synth trace) scaled to a device that
FEMU can hold in RAM: every token count / 16 with 16-token objects (so as many objects per request as the
default 256-token objects), fp8 KV (1 MiB objects), a tenth of the session rate over the default 1200 s and
tiers a tenth of the default objects (GPU 32 MiB, CPU 96 MiB, SSD 480 MiB). The device: FDP 512 MiB at 25%
OP with 4 RUHs under ``preset=femu`` (FEMU's GC trigger, victim choice and eager reclaim units) with 8 MiB
lines (32-page blocks; the reclaim unit is one line) and the background threshold at 93% of the lines used
(FEMU's default 75% keeps a quarter of the lines free, which 25% OP cannot give). A conventional SSD takes
the same trace at 10% OP (71 lines of 8 MiB) under ``preset=femu`` with FEMU's percent thresholds (95/96: those a
conv VM from capacity alone is given), so both sides collect while at most 3 lines are free; the rest FEMU can
express is chosen for it (testbed/femu/defaults.py). It has no placement, so only no hints, and FEMU's figures
come from its SMART log's page counters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: token counts of the default synth workload divided by 16 (kvreplay/synth.py's SynthParams defaults)
SCALED_TOKENS = ("system_prompt_tokens=94", "chat_user_tokens=13", "chat_output_tokens=19", "rag_doc_tokens=156",
                 "rag_question_tokens=5", "rag_output_tokens=16", "batch_doc_tokens=375", "batch_output_tokens=25",
                 "agent_task_tokens=38", "agent_action_tokens=8", "agent_tool_tokens=31", "block_tokens=4",
                 "max_input_tokens=8000")
#: the device on both sides (the VM's parameters; the model beside the VM is built from them)
DEVICE = ("logical_bytes=512MiB", "op_ratio=0.25", "nruh=4", "preset=femu", "pages_per_block=32", "ru_bytes=8MiB",
          "gc_bg_used_pct=93", "gc_fg_used_pct=97")
HINTS = ("none", "oracle")
#: per device: its parameters on both sides and the hint policies that mean something on it
#: conv: FEMU's threshold semantics on both sides (preset=femu with the percents a conv VM from capacity alone
#: gets, 95/96 of 71 lines): FEMU collects while free <= int((1 - pct/100) x lines) = 3, and so does the model;
#: with the model's own gc_bg_free_lines=3 (collect while free < 3) the model held one line fewer free than the
#: FEMU it stood beside (WAF 1.526 against FEMU's 1.668; FEMU guide)
CONV_DEVICE = ("logical_bytes=512MiB", "op_ratio=0.1", "preset=femu", "pages_per_block=32", "gc_bg_used_pct=95",
               "gc_fg_used_pct=96")
DEVICES = {"fdp": (DEVICE, HINTS), "conv": (CONV_DEVICE, ("none",))}


def _pairs(kv: tuple[str, ...] | list[str]) -> list[str]:
    return [x for p in kv for x in ("-p", p)]


def synth_argv(out: Path, duration_s: float = 1200.0, seed: int = 0) -> list[str]:
    """``kvbed`` arguments that write the scaled KV trace to ``out`` (1200 s: the SSD tier writes ~2.5 GiB)."""
    return ["trace", "synth", "-o", str(out), "--seed", str(seed), "--kv-dtype", "fp8", "--tokens-per-object", "16",
            "--sessions-per-s", "0.12", "--duration-s", str(duration_s), "--gpu-bytes", "32MiB", "--cpu-bytes",
            "96MiB", "--ssd-bytes", "480MiB", *_pairs(SCALED_TOKENS)]


def kvbed(*args: Any) -> None:
    from click.testing import CliRunner

    from testbed.cli import cli
    from kvbed.core.errors import KvbedError

    res = CliRunner().invoke(cli, [str(a) for a in args])
    if res.exit_code != 0:
        raise KvbedError(f"`kvbed {' '.join(map(str, args))}` exited {res.exit_code}: "
                         f"{(res.stderr or res.output).strip()[-400:]}")


def run_femu(trace: Path, hints: str, out: Path, name: str = "femukv", device: str = "fdp") -> dict[str, Any]:
    """The trace on a fresh FEMU VM with ``hints``: FEMU's figures, the model's on the same completed commands,
    their ratio (FEMU / model) and whether every VM cross-check passed."""
    kvbed("up", "--backend", "femu", "-d", device, "-n", name, *_pairs([*DEVICES[device][0], "mem_bytes=1GiB"]))
    try:
        kvbed("replay", trace, "--vm", name, "--hints", hints, "-o", out, "-q", "--no-plots")
    finally:
        kvbed("down", name)
    r = json.loads((out / "result.json").read_text())
    v = r["vm"]["device_vs_model"]
    return {"femu": v["device"], "model": v["model"], "ratio": v["ratio"], "cross_checks_ok": r["vm"]["cross_checks_ok"]}


#: the VM's geometry, given to the model alone (a FEMU VM takes the backend's; blocks_per_line = every die, FEMU's
#: line, as the replay's sizing would otherwise pick shorter lines)
GEOMETRY = ("page_bytes=4KiB", "channels=8", "dies_per_channel=8", "blocks_per_line=64")


def model_params(device: str = "fdp", params: tuple[str, ...] | None = None) -> list[str]:
    """The device's parameters (``params``, default the VM's) for the model alone, with the values a FEMU VM
    chooses for the fields left out (testbed/femu/defaults.py), so the model alone is the device the VM
    replay's model is."""
    from kvbed.core.params import format_value
    from testbed.femu.defaults import femu_params

    given = [*(DEVICES[device][0] if params is None else params), *GEOMETRY]
    _, chosen = femu_params(device, given)
    return [*(f"{c.field}={format_value(c.field, c.value)}" for c in chosen), *given]


def run_model(trace: Path, hints: str, out: Path, device: str = "fdp") -> dict[str, Any]:
    """The trace on the model alone (``kvbed replay``, the VM's parameters, trace arrival times)."""
    kvbed("replay", trace, "--device", device, "--hints", hints, "-o", out, "-q", "--no-plots",
          *_pairs(model_params(device)))
    j = json.loads((out / "result.json").read_text())["jobs"][0]
    return {"model": {"waf": j["waf"], "host_bytes_written": j["user_bytes_written"],
                      "media_bytes_written": j["media_bytes_written"], "erases": j["erases"]}}
