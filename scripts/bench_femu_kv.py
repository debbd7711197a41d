#!/usr/bin/env python3
"""A KV trace where hints matter, on FEMU and on the model (issue 24): no hints and oracle hints, FEMU's WAF
(its FDP statistics log) beside the model's on the same completed command stream, and each side's hint effect.
The trace and device are testbed/femu/kvcheck.py's (its docstring says how the synth workload is scaled).

    python scripts/bench_femu_kv.py                 # FEMU + model, none and oracle (~4 min under TCG)
    python scripts/bench_femu_kv.py --model-only    # the model alone (kvbed replay, no VM; --device conv too)
    python scripts/bench_femu_kv.py --device conv   # a conventional FEMU SSD, no hints (its SMART page counters)
    python scripts/bench_femu_kv.py --json out.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbed.core.atomicio import write_json  # noqa: E402
from testbed.femu import kvcheck as K  # noqa: E402

GiB = 1 << 30


def table(res: dict, hints: tuple[str, ...]) -> str:
    rows = [("hints", "side", "WAF", "FEMU / model", "host GiB", "media GiB", "erases", "WAF vs none")]
    for side in ("femu", "model"):
        for h in hints:
            o = res[h].get(side)
            if o is None:
                continue
            base = res["none"][side]["waf"]
            rows.append((h, side, f"{o['waf']:.4f}",
                         f"{res[h]['ratio']['waf']:.4f}" if side == "femu" and "ratio" in res[h] else "",
                         f"{o['host_bytes_written'] / GiB:.2f}", f"{o['media_bytes_written'] / GiB:.2f}",
                         "-" if o["erases"] is None else str(o["erases"]), f"{o['waf'] / base - 1:+.1%}" if h != "none" else ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-only", action="store_true", help="no FEMU: the model alone (kvbed replay)")
    ap.add_argument("--device", choices=list(K.DEVICES), default="fdp", help="the device (default fdp)")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-femu-kv-") as tmp:
        tmp = Path(tmp)
        trace = tmp / "kv.parquet"
        K.kvbed(*K.synth_argv(trace))
        res = {}
        params, hints = K.DEVICES[a.device]
        for h in hints:
            print(f"# {h}", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            res[h] = K.run_model(trace, h, tmp / h, a.device) if a.model_only else K.run_femu(trace, h, tmp / h, device=a.device)
            res[h]["wall_s"] = round(time.perf_counter() - t0, 1)
    print(f"KV trace (scaled synth, SSD tier) on {a.device} {' '.join(params)}; WAF = media bytes / host bytes; "
          "FEMU: its FDP statistics log (fdp) or SMART page counters (conv); model: the same completed command stream")
    print(table(res, hints))
    if a.json:
        write_json(a.json, {"synth": K.synth_argv(Path("kv.parquet"))[1:], "device": a.device, "params": list(params),
                            "femu": not a.model_only, "results": res})


if __name__ == "__main__":
    main()
