"""Mooncake inputs for the importer and CLI tests: the real trace beside the repo, and small files written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.paths import MOONCAKE

needs_mooncake = pytest.mark.skipif(not MOONCAKE.exists(), reason=f"{MOONCAKE} not present")

#: two valid Mooncake lines (512 tokens per hash id): 1000 tokens -> 2 ids, 600 -> 2 ids, one id shared
MC_OK = [
    {"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]},
    {"timestamp": 5, "input_length": 600, "output_length": 10, "hash_ids": [1, 3]},
]


def write_lines(path: Path, rows: list) -> Path:
    """A JSON-lines file of ``rows`` (a str row is written as it is: for malformed lines)."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path
