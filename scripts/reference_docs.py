#!/usr/bin/env python3
"""Regenerate the docs' generated parts from the code (one command after a CLI, parameter or registry change).

    python scripts/reference_docs.py            # rewrite them
    python scripts/reference_docs.py --check    # exit 1 naming each stale file, write nothing

- docs/reference/cli.md: the whole page, from the click command tree (testbed/clidocs.py);
- docs/reference/parameters.md: the tables between ``<!-- params:begin`` and ``<!-- params:end -->``
  (``kvbed params --markdown``);
- docs/guides/replay-and-hints.md: the hint table between ``<!-- registry:hints`` and ``<!-- registry:end -->``
  (from ``kvreplay.hints.HINTS``).

Tests check each against the code (tests/testbed/cli/test_cli_docs.py, tests/core/test_core.py,
tests/testbed/cli/test_registry_help.py). Figures quoted in the docs are scripts/doc_figures.py's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _between(text: str, begin: str, end: str, body: str, where: Path) -> str:
    """``text`` with the lines after the line holding ``begin`` up to ``end`` replaced by ``body``."""
    try:
        a = text.index("\n", text.index(begin)) + 1
        b = text.index(end, a)
    except ValueError:
        sys.exit(f"reference_docs: {where.relative_to(ROOT)}: markers {begin!r} ... {end!r} not found")
    return text[:a] + body + text[b:]


def generated() -> dict[Path, str]:
    """Each generated file's wanted content."""
    from testbed.clidocs import markdown as cli_markdown
    from testbed.cli.registry_help import markdown_table
    from testbed.paramdocs import markdown as params_markdown

    params = ROOT / "docs/reference/parameters.md"
    hints = ROOT / "docs/guides/replay-and-hints.md"
    return {
        ROOT / "docs/reference/cli.md": cli_markdown(),
        params: _between(params.read_text(), "<!-- params:begin", "<!-- params:end -->", params_markdown(), params),
        hints: _between(hints.read_text(), "<!-- registry:hints", "<!-- registry:end -->",
                        markdown_table("kvreplay.hints:HINTS", ("policy", "may know"), attr="knows"), hints),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is stale")
    a = ap.parse_args()
    want = generated()
    stale = [p for p, text in want.items() if not p.exists() or p.read_text() != text]
    for p in stale:
        if not a.check:
            p.write_text(want[p])
        print(f"{'stale' if a.check else 'rewrote'}: {p.relative_to(ROOT)}")
    return 1 if stale and a.check else 0


if __name__ == "__main__":
    sys.exit(main())
