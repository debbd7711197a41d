"""Keep a capture's output a valid trace at every flush.

Parquet has its footer at the end and pyarrow cannot append to a closed file, so each flush writes
a new file - the previous flush's row groups copied as stored, plus one row group of the new events
- under a temporary name and renames it over the output. A crash (even SIGKILL) therefore leaves
the trace of the last completed flush. Copying costs time proportional to the file, so the interval
between flushes grows to keep copying at most ``1/overhead`` of the wall time: seconds for any
capture of minutes at 100k events/s, longer for hour-long captures at full rate.
"""

from __future__ import annotations

import time
from pathlib import Path

from kvreplay.schema import EventBatch, TraceMeta, TraceWriter


class CheckpointWriter:
    def __init__(self, path: str | Path, flush_s: float, overhead: float = 5.0):
        self.path = Path(path)
        self.flush_s = flush_s
        self.overhead = overhead
        self.rows = 0
        self.flushes = 0
        self.flush_seconds = 0.0
        self._interval = flush_s
        self._last = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self._last >= self._interval

    def flush(self, batch: EventBatch, meta: TraceMeta, tenants: list[str], scopes: list[str]) -> None:
        """Rewrite the output with ``batch`` appended (an empty batch still refreshes the metadata)."""
        t0 = time.monotonic()
        w = TraceWriter(self.path, meta, tenants=tenants, scopes=scopes or ["default"],
                        row_group_rows=max(batch.n, 1))
        try:
            if self.flushes:
                w.copy_row_groups(self.path)
            w.write(batch)
            w.close(meta)
        except BaseException:
            w.abort()
            raise
        self.rows = w.rows
        self.flushes += 1
        took = time.monotonic() - t0
        self.flush_seconds += took
        self._last = time.monotonic()
        self._interval = max(self.flush_s, self.overhead * took)
