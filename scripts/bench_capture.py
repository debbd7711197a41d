"""Benchmark ``kvbed trace capture``: sustained block events/s from one publisher on loopback without
loss, and the raw-file import rate. The publisher runs in its own process (as an engine would) and
paces vLLM-style step batches (as vLLM 0.34 sends them: an array batch of map events with group_idx) at the target rate; the capture must take every message with no sequence lost. The
requirement (issue 22): lossless and keeping pace at 400,000 block events/s, medians of 3. The capture
thread's CPU time gives its capacity (block events per CPU second, live loop with raw file and flushes)
apart from what else runs on the host; the wall-clock pace needs a quiet one.

    python scripts/bench_capture.py --rates 400000 --seconds 5 --repeat 3
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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
            "cpu_capacity_per_s": f["block_events"] / res["cpu"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="400000", help="target block events/s, comma separated")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    port = 27000
    with tempfile.TemporaryDirectory() as d:
        for rate in (float(x) for x in a.rates.split(",")):
            runs = []
            for _ in range(a.repeat):
                port += 1
                runs.append(one_run(rate, a.seconds, Path(d), port))
                r = runs[-1]
                print(f"  target {rate:,.0f}/s: captured {r['block_events']:,} block events in {r['seconds']:.2f}s "
                      f"({r['captured_per_s']:,.0f}/s; published at {r['published_per_s']:,.0f}/s; capture thread CPU "
                      f"{r['cpu_capacity_per_s']:,.0f} block events per CPU s), lost {r['lost']}, complete={r['complete']}; raw import "
                      f"{r['import_per_s']:,.0f} block events/s ({r['import_rows_per_s']:,.0f} trace rows/s)")
            med = lambda k: statistics.median(r[k] for r in runs)  # noqa: E731
            print(f"target {rate:,.0f} block events/s: median captured {med('captured_per_s'):,.0f}/s "
                  f"(capture thread: {med('cpu_capacity_per_s'):,.0f} block events per CPU second), "
                  f"all complete without loss: {all(r['complete'] for r in runs)}; median raw import "
                  f"{med('import_per_s'):,.0f} block events/s")


if __name__ == "__main__":
    main()
