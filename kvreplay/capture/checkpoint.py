"""Keep a capture's output a valid trace at every flush.

Parquet has its footer at the end and pyarrow cannot append to a closed file, so each flush writes
a new file - the previous flush's row groups copied as stored, plus one row group of the new events
- under a temporary name and renames it over the output. A crash (even SIGKILL) therefore leaves
the trace of the last completed flush. Copying costs time proportional to the file, so the interval
between flushes grows to keep copying at most ``1/overhead`` of the wall time: seconds for any
capture of minutes at 100k events/s, longer for hour-long captures at full rate.

A live capture flushes in a background thread (``flush(..., wait=False)``): the receive loop goes on
taking messages while pyarrow encodes and copies (without the GIL); one flush at a time, the next not
due until the last one ended, the final one waits for it. An error in the background flush is raised
in the caller at its next ``due()``, ``flush()`` or ``wait()``.
"""

from __future__ import annotations

import threading
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
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def due(self) -> bool:
        if self._thread is not None:
            if self._thread.is_alive():
                return False
            self.wait()
        return time.monotonic() - self._last >= self._interval

    def wait(self) -> None:
        """Wait for a background flush; raise its error, if it had one."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def flush(self, batch: EventBatch, meta: TraceMeta, tenants: list[str], scopes: list[str],
              wait: bool = True) -> None:
        """Rewrite the output with ``batch`` appended (an empty batch still refreshes the metadata); with
        ``wait=False`` in a background thread, after the one before it."""
        self.wait()
        if wait:
            self._write(batch, meta, list(tenants), list(scopes))
            return
        self._thread = threading.Thread(target=self._background, args=(batch, meta, list(tenants), list(scopes)),
                                        name="kvbed-capture-flush", daemon=True)
        self._thread.start()

    def _background(self, *args) -> None:
        try:
            self._write(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the capture thread by wait()
            self._error = exc

    def _write(self, batch: EventBatch, meta: TraceMeta, tenants: list[str], scopes: list[str]) -> None:
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
