"""Read the next batch on the other core while this one is replayed.

Parquet decoding in pyarrow releases the GIL and the replay's kernels are
``nogil``, so a reader thread one or two batches ahead overlaps I/O and decode
with compute. Order and content are unchanged: results do not depend on it.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator, TypeVar

T = TypeVar("T")
_END = object()

#: rows per batch of the replay's passes (slices of a row group): the stages of a pass run in threads one after the
#: other on each batch, so the first batch's stages and the last one's run alone; a kvbed trace's 1M-row groups made
#: that ~0.05 s of a 0.9 s Mooncake replay (3.4M rows in 4 groups; scripts/bench_process.py)
BATCH_ROWS = 1 << 18


def prefetched(it: Iterator[T], depth: int = 2) -> Iterator[T]:
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def work() -> None:
        try:
            for item in it:
                while not stop.is_set():
                    try:
                        q.put((True, item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    close = getattr(it, "close", None)
                    if close is not None:  # a generator's own clean-up (a prefetched one inside it stops too)
                        close()
                    return
            q.put((True, _END))
        except BaseException as exc:  # re-raised in the consumer
            q.put((False, exc))

    t = threading.Thread(target=work, name="kvbed-prefetch", daemon=True)
    t.start()
    try:
        while True:
            ok, item = q.get()
            if not ok:
                raise item
            if item is _END:
                return
            yield item
    finally:
        stop.set()
        while t.is_alive():  # unblock a producer waiting on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                pass
            t.join(timeout=0.05)
