"""docs/reference/trace-format.md describes the format kvreplay/schema.py defines: the same columns in the same
order with their Arrow types, and the same op, tier and kind codes."""

from __future__ import annotations

import re

import pyarrow as pa

from kvreplay import schema as S
from tests.support.paths import ROOT

PAGE = ROOT / "docs" / "reference" / "trace-format.md"


def _table(text: str, header: str) -> list[list[str]]:
    start = text.index(f"| {header} |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip().strip("`") for c in line.split("|")[1:-1]])
    return rows


def _type_name(t: pa.DataType) -> str:
    return f"dictionary ({t.index_type})" if pa.types.is_dictionary(t) else str(t)


def test_columns_and_types_are_the_schemas():
    rows = _table(PAGE.read_text(), "column")
    assert [r[0] for r in rows] == list(S.COLUMN_NAMES)
    assert [r[1] for r in rows] == [_type_name(S.COLUMNS[n][0]) for n in S.COLUMN_NAMES]


def test_enum_codes_are_the_schemas():
    text = PAGE.read_text()
    for header, names in (("code | op", S.OPS), ("code | tier", S.TIERS), ("code | kind", S.KINDS)):
        rows = _table(text, header)
        assert [(int(r[0]), r[1]) for r in rows] == list(enumerate(names)), header
    # the column table's lists of values name every tier and kind, in the schema's order
    cols = {r[0]: r[2] for r in _table(text, "column")}
    assert re.findall(r"[a-z]+", cols["tier"].split(":", 1)[1]) == list(S.TIERS)
    assert [w.strip() for w in cols["kind"].split(",")] == list(S.KINDS)


def test_the_page_names_the_format_version():
    assert f"(v{S.FORMAT_VERSION})" in PAGE.read_text().splitlines()[0]
