#!/usr/bin/env python3
"""Figures quoted in the README and docs, from saved runs (testbed/docfigures).

    python scripts/doc_figures.py list                 # the figure sets and where their blocks are
    python scripts/doc_figures.py run SET... [--work DIR]   # run a set's commands, save docs/figures/SET.json
    python scripts/doc_figures.py render               # rewrite every marked block from the saved figures
    python scripts/doc_figures.py check                # exit 1 if a block differs from its saved figures
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from testbed.docfigures import FIGURE_SETS
    from testbed.docfigures import base

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    r = sub.add_parser("run")
    r.add_argument("sets", nargs="*", help="figure sets (default: every set)")
    r.add_argument("--work", type=Path, help="where the runs go (default: a temporary directory)")
    sub.add_parser("render")
    sub.add_parser("check")
    a = ap.parse_args()
    if a.cmd == "list":
        for name in FIGURE_SETS.names():
            fs = FIGURE_SETS.get(name)()
            where = [f"{d.relative_to(ROOT)}:{b}" for d in base.documents() for s, b, _ in base.blocks_in(d.read_text())
                     if s == name]
            print(f"{name}: {fs.summary}\n    blocks: {', '.join(where) or '(none)'}")
        return 0
    if a.cmd == "run":
        for name in a.sets or FIGURE_SETS.names():
            with tempfile.TemporaryDirectory(prefix=f"kvbed-fig-{name}-") as tmp:
                work = (a.work / name) if a.work else Path(tmp)
                print(f"{name}: running {'; '.join(FIGURE_SETS.get(name)().saved_commands())} in {work}", flush=True)
                print(f"{name}: saved {base.save(name, base.derive(name, work)).relative_to(ROOT)}")
        return 0
    stale = []
    for doc in base.documents():
        text = doc.read_text()
        new = base.render_text(text, str(doc))
        if new != text:
            stale.append(doc)
            if a.cmd == "render":
                doc.write_text(new)
    for doc in stale:
        print(f"{'rendered' if a.cmd == 'render' else 'stale'}: {doc.relative_to(ROOT)}")
    return 1 if stale and a.cmd == "check" else 0


if __name__ == "__main__":
    sys.exit(main())
