"""docs/reference/result-json.md lists every key of result.json, and nothing that is not there.

Four small real runs (a single-tier FDP replay, a ``--tiers`` replay, a replay with a power loss and the
``full`` contract, a ``--hint-lab`` replay) give the keys. A key is its path of object keys joined by dots; a list of objects adds
``[]`` (``jobs[].waf``: the same key in every job), a list of scalars or an empty object is a leaf. A
documented key ending in ``.*`` or ``[]`` covers its whole subtree: that is how the page handles what repeats
or is data rather than structure (tier names under ``devices``, fio's percentile map under ``lat_ns``,
parameter names under ``global options``, per-RUH and per-fault lists), each described in its row. So a new
top-level or per-job key fails the first test until the page names it, and a key the page names that no run
writes fails the second. VM-only keys (``sources``, ``vm``) are outside: the VM suite does not run here.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support.cli import kvbed, ok
from tests.support.paths import ROOT

PAGE = ROOT / "docs" / "reference" / "result-json.md"


def key_paths(x, path: str = "") -> set[str]:
    if isinstance(x, dict) and x:
        out: set[str] = set()
        for k, v in x.items():
            out |= key_paths(v, f"{path}.{k}" if path else k)
        return out
    if isinstance(x, list) and x and all(isinstance(v, dict) for v in x):
        return set().union(*(key_paths(v, path + "[]") for v in x))
    return {path}


def documented() -> list[str]:
    """The first cell of every table row that is one code span."""
    return re.findall(r"^\| `([^`]+)` \|", PAGE.read_text(), re.M)


def covers(key: str, path: str) -> bool:
    if key.endswith(".*"):
        base = key[:-2]
        return path == base or path.startswith(base + ".") or path.startswith(base + "[")
    if key.endswith("[]"):
        return path == key[:-2] or path.startswith(key)
    return path == key


@pytest.fixture(scope="module")
def results(synth_trace, tmp_path_factory) -> list[dict]:
    trace = synth_trace(60)
    out = tmp_path_factory.mktemp("resultjson")
    runs = {
        "single": ["--device", "fdp"],
        "tiers": ["--tiers", "cpu,ssd"],
        "faults": ["--device", "fdp", "--fault", "power-loss@20s", "--contract", "full"],
        "lab": ["--device", "fdp", "--hints", "predicted", "--hint-lab"],  # hint_policy.lab (undefined ratio)
    }
    got = []
    for name, args in runs.items():
        ok(kvbed("replay", str(trace), *args, "--no-plots", "-q", "-o", str(out / name)))
        got.append(json.loads((out / name / "result.json").read_text()))
    return got


def test_the_page_parses_into_keys():
    keys = documented()
    assert len(keys) > 80 and "jobs[].end_to_end_waf" in keys and len(set(keys)) == len(keys)
    assert covers("jobs[].read.*", "jobs[].read.lat_ns.percentile.99.000000")
    assert not covers("jobs[].read.*", "jobs[].readers")
    assert covers("jobs[].per_ruh[]", "jobs[].per_ruh[].ruh") and not covers("scan.rows", "scan.rows_x")


def test_every_key_of_a_real_result_is_documented(results):
    keys = documented()
    paths = set().union(*(key_paths(r) for r in results))
    missing = sorted(p for p in paths if not any(covers(k, p) for k in keys))
    assert not missing, f"{PAGE.name} does not document: {missing[:60]}"


def test_every_documented_key_is_in_a_real_result(results):
    paths = set().union(*(key_paths(r) for r in results))
    absent = [k for k in documented() if not any(covers(k, p) for p in paths)]
    assert not absent, f"{PAGE.name} documents keys no run writes: {absent}"
