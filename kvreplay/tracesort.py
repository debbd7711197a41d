"""``kvbed trace sort``: a copy of a trace with its rows in time order, for traces a converter wrote out of order.

A replay refuses a trace whose rows go back in time (:class:`kvreplay.validate.RowCheck`); this writes the
same rows stably sorted by ``ts_ns``: rows with equal times keep their order in the file, which is the order
the events happened in (a create before its commit at the same nanosecond), so a converter that also
reversed rows of equal time still leaves a trace ``kvbed trace validate`` refuses. The metadata is kept,
with ``extra.sorted`` saying the rows were sorted, by what and how many were out of order; the file is
written under a temporary name and renamed (OUT may be IN). The whole trace is held in memory (about 60
bytes per event).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvreplay.schema import DEFAULT_ROW_GROUP_ROWS, TraceReader, TraceWriter


@dataclass
class SortResult:
    output: str
    rows: int
    rows_back_in_time: int  # rows whose ts_ns is smaller than the row before them in the input
    rows_moved: int  # rows not at their input position in the output


def sort_trace(src: str | os.PathLike, out: str | os.PathLike, *,
               row_group_rows: int = DEFAULT_ROW_GROUP_ROWS) -> SortResult:
    reader = TraceReader(src)
    batch = reader.read_all()
    ts = batch["ts_ns"]
    order = np.argsort(ts, kind="stable")
    back = int(np.count_nonzero(np.diff(ts) < 0))
    moved = int(np.count_nonzero(order != np.arange(len(order))))
    meta = reader.meta
    meta.extra = {**meta.extra, "sorted": {"by": "ts_ns, stable (equal times keep their file order)",
                                           "tool": "kvbed trace sort", "input": str(Path(src).resolve()),
                                           "rows_back_in_time": back, "rows_moved": moved}}
    with TraceWriter(out, meta, tenants=reader.tenants, scopes=reader.scopes, row_group_rows=row_group_rows) as w:
        for start in range(0, len(order), row_group_rows):
            w.write(batch.take(order[start:start + row_group_rows]))
    return SortResult(output=str(out), rows=len(order), rows_back_in_time=back, rows_moved=moved)
