"""Traces as earlier releases wrote them."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq

from kvreplay import schema as S


def as_v1(v2: "os.PathLike", out) -> None:
    """A trace as the previous release wrote it: no content_key column, format_version 1."""
    table = pq.read_table(v2)
    meta = json.loads(table.schema.metadata[S.META_KEY])
    meta["format_version"] = 1
    table = table.drop(["content_key"])
    pq.write_table(table.replace_schema_metadata({S.META_KEY: json.dumps(meta).encode()}), out)
