"""Results do not move when code is reorganised: the runs of ``golden_runs.RUNS`` give the digests recorded
before the foundation refactor (every device and hint policy, the demo, the Mooncake README session)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import golden_runs as G
from cli_helpers import kvbed, ok

DIGESTS = json.loads((Path(__file__).parent / "golden" / "digests.json").read_text())


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("golden").resolve()


@pytest.mark.parametrize("name", list(G.RUNS))
def test_golden_run(work, name):
    if name in G.NEEDS_MOONCAKE and not G.MOONCAKE.exists():
        pytest.skip(f"{G.MOONCAKE} not present")
    ok(kvbed(*G.argv(name, work)))
    assert G.digest(name, work) == DIGESTS[name]
