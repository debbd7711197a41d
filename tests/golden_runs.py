"""Runs whose outputs must not change when code is reorganised, and their path-free digests.

``tests/golden/digests.json`` holds the digests recorded on the tree before the foundation refactor
(issue 9: commit 58fd2fe), regenerated once since, for issue 18 (the tier simulator's pin rule and S3-FIFO
promotion moved every tier-simulated trace; new result.json keys gc_stall, saturation, gc.* per write command;
the old traces replayed by the new code gave the old figures exactly); ``test_golden.py`` reruns the same
commands and compares. A digest is the
sha256 of a JSON file after masking what varies by host (see _mask) and replacing the run's own directories by placeholders (the trace path
is echoed in result.json), and of a Parquet file's table and key-value metadata (not its bytes, which
name the pyarrow version that wrote them).

Regenerate (only for a deliberate change of results, saying which in the commit):
    python tests/golden_runs.py OUT_DIR > tests/golden/digests.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

MOONCAKE = (Path(__file__).parents[1] / "../shared/data/traces/mooncake/conversation_trace.jsonl").resolve()

# name -> argv after `kvbed` ({w}: the work directory, {mc}: the Mooncake source); in order (later runs read
# earlier outputs). Together they take every device, every hint policy, both layouts and the replay options
# that branch in the engine (precondition, as-fast-as-possible, time scale, classes, per-class GC stream).
RUNS: dict[str, list[str]] = {
    "sample": ["trace", "synth", "-o", "{w}/sample.parquet"],
    "demo-none": ["replay", "{w}/sample.parquet", "--device", "fdp", "--hints", "none", "-o", "{w}/demo-none"],
    "demo-oracle": ["replay", "{w}/sample.parquet", "--device", "fdp", "--hints", "oracle", "-o", "{w}/demo-oracle"],
    "zns-oracle": ["replay", "{w}/sample.parquet", "--device", "zns", "--hints", "oracle", "-o", "{w}/zns-oracle"],
    "zns-type-perclass": ["replay", "{w}/sample.parquet", "--device", "zns", "--hints", "type",
                          "--param", "gc_stream=per-class", "--param", "classes=3", "-o", "{w}/zns-type-perclass"],
    "conv-precond": ["replay", "{w}/sample.parquet", "--device", "conv", "--hints", "none",
                     "--precondition", "0.5", "-o", "{w}/conv-precond"],
    "fdp-predicted-afap": ["replay", "{w}/sample.parquet", "--device", "fdp", "--hints", "predicted",
                           "--as-fast-as-possible", "--seed", "3", "-o", "{w}/fdp-predicted-afap"],
    "fdp-noisy-scaled": ["replay", "{w}/sample.parquet", "--device", "fdp", "--hints", "noisy-oracle",
                         "--time-scale", "4", "--param", "ru_bytes=256MiB", "-o", "{w}/fdp-noisy-scaled"],
    "cxl-none": ["replay", "{w}/sample.parquet", "--device", "cxl", "--hints", "none", "-o", "{w}/cxl-none"],
    "cxlssd-hotness": ["replay", "{w}/sample.parquet", "--device", "cxl-ssd", "--hints", "hotness",
                       "-o", "{w}/cxlssd-hotness"],
    "mc": ["trace", "import", "mooncake", "{mc}", "-o", "{w}/mc.parquet", "--ssd-bytes", "1TiB",
           "--ssd-policy", "s3fifo"],
    "mc-none": ["replay", "{w}/mc.parquet", "--device", "fdp", "--hints", "none", "--param", "fill_ratio=1.0",
                "-o", "{w}/mc-none"],
    "mc-oracle": ["replay", "{w}/mc.parquet", "--device", "fdp", "--hints", "oracle", "--param", "fill_ratio=1.0",
                  "-o", "{w}/mc-oracle"],
    "mc-zns-pred": ["replay", "{w}/mc.parquet", "--device", "zns", "--hints", "predicted", "-o", "{w}/mc-zns-pred"],
    "dev-fdp-hotcold": ["device", "run", "--device", "fdp", "--workload", "hotcold", "--pages", "65536",
                        "--writes-x", "3", "--param", "nruh=2", "--param", "ru_bytes=1MiB", "--json",
                        "-o", "{w}/dev-fdp-hotcold"],
    "dev-conv-greedy": ["device", "run", "--device", "conv", "--gc", "greedy", "--op", "0.1", "--pages", "65536",
                        "--writes-x", "3", "--param", "blocks_per_line=1", "--json", "-o", "{w}/dev-conv-greedy"],
}
NEEDS_MOONCAKE = {"mc", "mc-none", "mc-oracle", "mc-zns-pred"}


def argv(name: str, work: Path) -> list[str]:
    return [a.format(w=work, mc=MOONCAKE) for a in RUNS[name]]


def _mask(doc):
    """Drop what legitimately varies between hosts: wall-clock speed, and the trace fingerprint (a hash of the
    Parquet footer, which names the imported source by its absolute path; the trace's own digest covers it)."""
    if isinstance(doc, dict):
        doc.pop("sim", None)  # `device run` keeps its wall-clock speed there
        if "runtime_ns" in doc and "lat_ns" in doc:  # fio's runtime (ms) and bw (KiB/s), added after 58fd2fe
            doc.pop("runtime", None)
            doc.pop("bw", None)
        return {k: "<fingerprint>" if k == "fingerprint" else _mask(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_mask(v) for v in doc]
    return doc


def _paths(text: str, work: Path) -> str:
    return text.replace(str(work), "<work>").replace(str(MOONCAKE.parent), "<mooncake>")


def _text_digest(path: Path, work: Path) -> str:
    text = json.dumps(_mask(json.loads(path.read_text())), indent=2, sort_keys=True) + "\n"
    return hashlib.sha256(_paths(text, work).encode()).hexdigest()


def _parquet_digest(path: Path, work: Path) -> str:
    f = pq.ParquetFile(path)
    h = hashlib.sha256()
    for k, v in sorted((f.schema_arrow.metadata or {}).items()):
        if k != b"ARROW:schema":
            h.update(k + b"=" + _paths(v.decode(), work).encode())
    table = f.read()
    h.update(str(table.schema.remove_metadata()).encode())  # its text shows the metadata's length, path included
    for name in table.column_names:
        h.update(name.encode())
        h.update(json.dumps(table.column(name).to_pylist(), default=str).encode())
    return h.hexdigest()


def digest(name: str, work: Path) -> dict[str, str]:
    """Digests of what the run ``name`` wrote under ``work``."""
    out = Path(argv(name, work)[argv(name, work).index("-o") + 1])
    if out.suffix == ".parquet":
        return {"trace": _parquet_digest(out, work)}
    got = {}
    for f in ("config.json", "result.json"):
        if (out / f).exists():
            got[f] = _text_digest(out / f, work)
    for f in ("timeseries.parquet", "latency.parquet"):
        if (out / f).exists():
            got[f] = _parquet_digest(out / f, work)
    return got


def main(work: Path) -> None:
    from click.testing import CliRunner

    from testbed.cli import cli

    work = work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in RUNS:
        if name in NEEDS_MOONCAKE and not MOONCAKE.exists():
            continue
        res = CliRunner().invoke(cli, argv(name, work))
        assert res.exit_code == 0, (name, res.output, res.stderr)
        out[name] = digest(name, work)
    print(json.dumps(out, indent=2, sort_keys=True))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
