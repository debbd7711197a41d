#!/usr/bin/env python3
"""Refresh the README's "What kvbed finds" section from finished example studies (``make studies``).

For each study directory given (results/studies/<name>), the findings of its report and its end-to-end
WAF by hint policy are pasted between the README's ``<!-- findings:begin -->`` and
``<!-- findings:end -->`` markers; everything comes from the saved study files.

    python scripts/studies_readme.py results/studies/kv-hints-fdp results/studies/...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def section(study_dir: Path) -> str:
    import pandas as pd

    from testbed.study import table
    from testbed.study.report import findings, interval_note, pivot_markdown

    doc = json.loads((study_dir / "study.json").read_text())
    df = table.load(study_dir)
    summary = pd.read_csv(study_dir / "summary.csv")
    counts = df["status"].value_counts().to_dict()
    out = [f"### {doc['name']}", "", doc["description"], "",
           f"`studies/{doc['name']}.toml`: {len(df)} points "
           f"({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}), seeds {doc['seeds']}.", ""]
    out += [f"- {s}" for s in findings(df, doc)] + [""]
    piv = pivot_markdown(summary, doc)
    if piv:
        out += [f"<details><summary>end-to-end WAF by hint policy ({interval_note(summary)})</summary>", "",
                piv, "", "</details>", ""]
    return "\n".join(out)


def main() -> None:
    text = (ROOT / "README.md").read_text()
    begin, end = "<!-- findings:begin -->", "<!-- findings:end -->"
    body = "\n".join(section(Path(d)) for d in sys.argv[1:])
    a = text.index(begin) + len(begin)
    b = text.index(end)
    (ROOT / "README.md").write_text(text[:a] + "\n" + body + text[b:])


if __name__ == "__main__":
    main()
