"""``make demo``'s comparison: the sample trace replayed on FDP with no hints and with oracle hints."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from testbed.docfigures.base import FIGURE_SETS, FigureSet

#: the width the table is drawn at (wide enough that no column wraps)
WIDTH = 160


@FIGURE_SETS.register("demo")
class Demo(FigureSet):
    summary = "make demo: sample trace, fdp, hints none vs oracle, kvbed report"
    commands = (
        ("trace", "synth", "-o", "{w}/sample.parquet"),
        ("replay", "{w}/sample.parquet", "--device", "fdp", "--hints", "none", "-o", "{w}/none"),
        ("replay", "{w}/sample.parquet", "--device", "fdp", "--hints", "oracle", "-o", "{w}/oracle"),
    )

    def extract(self, work: Path) -> dict[str, Any]:
        from testbed.report import compare
        from testbed.results import load_run

        rows = compare([load_run(work / "none"), load_run(work / "oracle")])
        for r in rows:
            r["run"] = Path(r["run"]).name
        return {"rows": rows}

    def blocks(self, fig: dict[str, Any]) -> dict[str, str]:
        from rich.console import Console

        from testbed.report import render_table

        buf = io.StringIO()
        Console(file=buf, width=WIDTH, color_system=None, highlight=False).print(render_table(fig["rows"]))
        table = "\n".join("    " + line.rstrip() for line in buf.getvalue().splitlines())
        return {"table": table}
