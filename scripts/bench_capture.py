"""Benchmark ``kvbed trace capture``: sustained block events/s from one publisher on loopback without
loss, and the raw-file import rate. The publisher runs in its own process (as an engine would) and
paces vLLM-style step batches (as vLLM 0.34 sends them: an array batch of map events with group_idx) at the target rate; the capture must take every message with no sequence lost. The
requirement (issue 22): lossless and keeping pace at 400,000 block events/s, medians of 3. The capture
thread's CPU time gives its capacity (block events per CPU second, live loop with raw file and flushes)
apart from what else runs on the host; the wall-clock pace needs a quiet one.

    python scripts/bench_capture.py --rates 400000 --seconds 5 --repeat 3

``--old TREE`` (a checkout of another commit, e.g. ``git worktree add ../old <commit>``) runs each capture in a
child process with that tree's code, alternately with this tree's (the order swapped every pair, so both see the
same machine load), prints both medians and the load average, and checks that the raw file of a capture imports
to the same trace table with either tree's code. A tree with its own ``.venv`` runs with that interpreter; each
tree keeps its own numba cache (``TREE/.cache/numba``). Besides the capture thread's CPU time, the whole
process's (all threads: the parquet writer's too) is reported, per block event.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--tree" in sys.argv:  # a child run with another tree's capture code (--old)
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--tree") + 1]).resolve()))
else:
    sys.path.insert(0, str(ROOT))

BLOCKS_PER_EVENT = 8
EVENTS_PER_MSG = 64  # half BlockStored, half BlockRemoved of earlier blocks: 512 block events per step


def publisher(endpoint: str, rate: float, seconds: float, ready, go, done, span) -> None:
    import msgspec
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PUB)
    s.setsockopt(zmq.SNDHWM, 100_000)
    s.bind(endpoint)
    rng = random.Random(1)
    live: list[list[int]] = []
    ready.set()
    while not go.is_set():  # handshake: empty batches until the subscriber is connected
        s.send_multipart([b"", (0).to_bytes(8, "big"), msgspec.msgpack.encode([0.0, []])])
        time.sleep(0.01)
    seq = 1
    per_msg = EVENTS_PER_MSG * BLOCKS_PER_EVENT
    msgs = int(rate * seconds / per_msg)
    t0 = time.perf_counter()
    span[0] = time.monotonic()
    for m in range(msgs):
        evs = []
        for _ in range(EVENTS_PER_MSG // 2):
            hs = [rng.getrandbits(64) for _ in range(BLOCKS_PER_EVENT)]
            live.append(hs)
            evs.append({"type": "BlockStored", "block_hashes": hs, "parent_block_hash": None, "token_ids": [],
                        "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None, "group_idx": 0})
        for _ in range(EVENTS_PER_MSG // 2):
            hs = live.pop(0) if len(live) > 4096 else [rng.getrandbits(64) for _ in range(BLOCKS_PER_EVENT)]
            evs.append({"type": "BlockRemoved", "block_hashes": hs, "medium": "GPU", "group_idx": 0})
        payload = msgspec.msgpack.encode([time.time(), evs, 0])  # vLLM's EventBatch is array_like
        s.send_multipart([b"", seq.to_bytes(8, "big"), payload])
        seq += 1
        lag = t0 + (m + 1) * per_msg / rate - time.perf_counter()
        if lag > 0:
            time.sleep(lag)
    span[1] = time.monotonic()
    done.value = seq - 1
    time.sleep(0.5)
    s.close(0)
    ctx.term()


def one_run(rate: float, seconds: float, tmp: Path, port: int) -> dict:
    from kvreplay.capture import CaptureParams
    from kvreplay.capture.rawimport import import_raw
    from kvreplay.capture.subscriber import LiveCapture
    from kvreplay.schema import TraceMeta, TraceWriter

    ep = f"tcp://127.0.0.1:{port}"
    ready, go, done, span = mp.Event(), mp.Event(), mp.Value("q", 0), mp.Array("d", 2)
    proc = mp.get_context("fork").Process(target=publisher, args=(ep, rate, seconds, ready, go, done, span))
    proc.start()
    ready.wait(10)
    out, raw = tmp / f"b{port}.parquet", tmp / f"b{port}.kvraw"
    cap = LiveCapture([ep], out, CaptureParams(flush_s=2.0).validate(), raw=raw)
    stop = threading.Event()
    res = {}
    def capture():
        c0 = time.thread_time()  # the capture thread's CPU time: its capacity, whatever else loads the host
        res["r"] = cap.run(stop.is_set)
        res["cpu"] = time.thread_time() - c0

    th = threading.Thread(target=capture)
    p0 = time.process_time()
    th.start()
    while cap.session.pubs[0].messages == 0:
        time.sleep(0.01)
    go.set()
    t0 = time.monotonic()
    while done.value == 0 or cap.session.pubs[0].last_seq is None or cap.session.pubs[0].last_seq < done.value:
        if time.monotonic() - t0 > seconds * 10:
            break
        time.sleep(0.002)
    t_done = time.monotonic()
    proc.join()
    last = done.value
    took = t_done - span[0]  # first message published -> last one taken by the capture
    stop.set()
    th.join()
    pcpu = time.process_time() - p0  # every thread of this process (the publisher is another process)
    f = res["r"].facts
    p = cap.session.pubs[0]
    complete = p.last_seq == last and f["lost_messages"] == 0
    t1 = time.perf_counter()
    with TraceWriter(tmp / f"i{port}.parquet", TraceMeta()) as w:
        meta = import_raw("vllm-events", raw, w)
        w.close(meta)
    imp = time.perf_counter() - t1
    return {"rate": rate, "published_per_s": f["block_events"] / (span[1] - span[0]), "block_events": f["block_events"], "seconds": took, "lost": f["lost_messages"],
            "complete": complete, "captured_per_s": f["block_events"] / took, "rows": res["r"].rows,
            "import_per_s": f["block_events"] / imp, "import_rows_per_s": res["r"].rows / imp,
            "cpu_capacity_per_s": f["block_events"] / res["cpu"], "process_cpu_per_s": f["block_events"] / pcpu,
            "raw": str(raw), "code": sys.modules["kvreplay.capture.lifecycle"].__file__}


def import_trace(raw: Path, out: Path) -> None:
    from kvreplay.capture.rawimport import import_raw
    from kvreplay.schema import TraceMeta, TraceWriter

    with TraceWriter(out, TraceMeta()) as w:
        w.close(import_raw("vllm-events", raw, w))


def _python(tree: Path) -> str:
    venv = tree / ".venv" / "bin" / "python"
    return str(venv) if tree != ROOT and venv.exists() else sys.executable


def child(tree: Path, *args: str) -> dict:
    """This script in a fresh process with ``tree``'s code; its JSON answer."""
    env = dict(os.environ, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(tree / ".cache" / "numba"))
    res = subprocess.run([_python(tree), str(Path(__file__).resolve()), "--tree", str(tree), *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tree)
    if res.returncode:
        raise SystemExit(f"child run failed ({res.returncode}) in {tree}:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def line(r: dict) -> str:
    return (f"captured {r['block_events']:,} block events in {r['seconds']:.2f}s ({r['captured_per_s']:,.0f}/s; "
            f"published at {r['published_per_s']:,.0f}/s; capture thread {r['cpu_capacity_per_s']:,.0f} block events "
            f"per CPU s, process {r['process_cpu_per_s']:,.0f}), lost {r['lost']}, complete={r['complete']}; raw "
            f"import {r['import_per_s']:,.0f} block events/s ({r['import_rows_per_s']:,.0f} trace rows/s)")


def compare(a: dict, d: str) -> None:
    """Alternate this tree and ``a.old`` run by run; medians side by side; the raw file imported by both."""
    import pyarrow.parquet as pq

    trees = {"old": a.old.resolve(), "new": ROOT}
    port = 27000
    saved: dict = {}
    for rate in (float(x) for x in a.rates.split(",")):
        runs: dict[str, list] = {k: [] for k in trees}
        for name, tree in trees.items():  # warm-up: numba caches filled, not counted
            port += 1
            child(tree, "--one", f"{rate}", "--seconds", "0.5", "--port", f"{port}", "--dir", d)
        load0 = os.getloadavg()[0]
        for i in range(a.repeat):
            for name in (list(trees) if i % 2 == 0 else list(trees)[::-1]):
                port += 1
                r = child(trees[name], "--one", f"{rate}", "--seconds", f"{a.seconds}", "--port", f"{port}",
                          "--dir", d)
                runs[name].append(r)
                print(f"  {name} target {rate:,.0f}/s: {line(r)} [{Path(r['code']).parents[2]}]", flush=True)
        load = (load0 + os.getloadavg()[0]) / 2
        print(f"target {rate:,.0f} block events/s, {a.repeat} runs per tree, load average {load:.1f} "
              f"(2 cores = 2.0 busy):")
        for name, rs in runs.items():
            med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731,B023
            print(f"  {name}: median captured {med('captured_per_s'):,.0f}/s, capture thread "
                  f"{med('cpu_capacity_per_s'):,.0f} block events per CPU s (process {med('process_cpu_per_s'):,.0f}),"
                  f" lost {sum(r['lost'] for r in rs)}, all complete: {all(r['complete'] for r in rs)}; median raw "
                  f"import {med('import_per_s'):,.0f} block events/s")
        raw = runs["new"][-1]["raw"]
        outs = {}
        for name, tree in trees.items():
            outs[name] = Path(d) / f"same-{name}.parquet"
            child(tree, "--import-raw", raw, "--out", str(outs[name]))
        same = pq.read_table(outs["old"]).equals(pq.read_table(outs["new"]))
        print(f"  raw file of the last new run imported by both trees: trace tables identical: {same}")
        saved[f"{rate:.0f}"] = {"load": load, "runs": runs, "same_trace": same}
    out = ROOT / ".cache" / "bench" / "bench_capture.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"seconds": a.seconds, "trees": {k: str(v) for k, v in trees.items()},
                               "rates": saved}, indent=1))
    print(f"saved {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="400000", help="target block events/s, comma separated")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--old", type=Path, default=None, metavar="TREE", help="compare with another checkout")
    ap.add_argument("--tree", type=Path, help=argparse.SUPPRESS)  # child runs: whose code (read at import)
    ap.add_argument("--one", type=float, help=argparse.SUPPRESS)  # child: one run at this rate, JSON out
    ap.add_argument("--port", type=int, default=27000, help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--import-raw", type=Path, help=argparse.SUPPRESS)  # child: import a raw file to --out
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.import_raw is not None:
        import_trace(a.import_raw, a.out)
        print(json.dumps({"ok": True}))
        return
    if a.one is not None:
        print(json.dumps(one_run(a.one, a.seconds, a.dir, a.port)))
        return
    port = 27000
    with tempfile.TemporaryDirectory() as d:
        if a.old is not None:
            compare(a, d)
            return
        for rate in (float(x) for x in a.rates.split(",")):
            runs = []
            for _ in range(a.repeat):
                port += 1
                runs.append(one_run(rate, a.seconds, Path(d), port))
                print(f"  target {rate:,.0f}/s: {line(runs[-1])}", flush=True)
            med = lambda k: statistics.median(r[k] for r in runs)  # noqa: E731,B023
            print(f"target {rate:,.0f} block events/s: median captured {med('captured_per_s'):,.0f}/s "
                  f"(capture thread: {med('cpu_capacity_per_s'):,.0f} block events per CPU second, process "
                  f"{med('process_cpu_per_s'):,.0f}), all complete without loss: {all(r['complete'] for r in runs)}; "
                  f"median raw import {med('import_per_s'):,.0f} block events/s, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
