"""Where the tests find the repository and the shared data beside it, wherever a test file sits in the tree."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the real Mooncake conversation trace in ../shared (tests that need it skip when it is absent)
MOONCAKE = (ROOT / "../shared/data/traces/mooncake/conversation_trace.jsonl").resolve()
