"""Runs whose outputs must not change when code is reorganised: their headline figures and path-free digests.

``tests/golden/digests.json`` (beside ``test_golden.py``) holds, per run, ``figures`` (WAF, GC bytes
moved, erases, p99s, event counts: what a reader of a failure wants to see moved) and ``digests`` (every
output file). It was recorded on the tree before the foundation refactor (issue 9: commit 58fd2fe) and
regenerated for issue 18 (the tier simulator's pin rule and S3-FIFO promotion moved every tier-simulated
trace) and issue 19 (figures added, kvbed's version masked: a bare checkout says 0.1.0+src; the old digests
were checked on the same outputs; later fdp-predicted-afap alone, when --as-fast-as-possible's groups of
queue_depth ops stopped restarting at every segment, which had made arrivals depend on the trace file's row
groups: GC stall -0.3%, read p99 +1.4%; later the four guarded-policy runs' result.json alone, when the
guard reported its no-opinion shares apart: checked equal to the old digests with the two new keys dropped).
``test_golden.py`` reruns the same commands and compares the figures first, so a failure names the figure that
moved, then the digests.

A digest is the sha256 of a JSON file after masking what varies by host or install (see _mask) and replacing
the run's own directories by placeholders (the trace path is echoed in result.json), and of a Parquet file's
table and key-value metadata (not its bytes, which name the pyarrow version that wrote them).

Regenerate (only for a deliberate change of results, saying which in the commit):
    python -m tests.support.golden_runs OUT_DIR > tests/golden/digests.json
or, when only the recorded form changes (not the results), check the old digests while writing the new:
    python -m tests.support.golden_runs OUT_DIR --check-old tests/golden/digests.json > new.json
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import re
from pathlib import Path

import pyarrow.parquet as pq

from kvreplay.schema import TraceReader
from tests.support.paths import MOONCAKE

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


VERSION_KEYS = ("kvbed version", "kvbed_version")
_CREATED_BY = re.compile(r'"created_by": "kvbed [^"]*"')


def _mask(doc, version: bool = True):
    """Drop what legitimately varies between hosts: wall-clock speed, the trace fingerprint (a hash of the
    Parquet footer, which names the imported source by its absolute path; the trace's own digest covers it),
    and kvbed's version (0.1.0 installed, 0.1.0+src from a bare checkout)."""
    if isinstance(doc, dict):
        doc.pop("sim", None)  # `device run` keeps its wall-clock speed there
        if "runtime_ns" in doc and "lat_ns" in doc:  # fio's runtime (ms) and bw (KiB/s), added after 58fd2fe
            doc.pop("runtime", None)
            doc.pop("bw", None)
        return {k: "<fingerprint>" if k == "fingerprint" else
                "<version>" if version and k in VERSION_KEYS else _mask(v, version) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_mask(v, version) for v in doc]
    return doc


def _paths(text: str, work: Path, version: bool = True) -> str:
    text = text.replace(str(work), "<work>").replace(str(MOONCAKE.parent), "<mooncake>")
    return _CREATED_BY.sub('"created_by": "kvbed <version>"', text) if version else text


def _text_digest(path: Path, work: Path, version: bool = True) -> str:
    text = json.dumps(_mask(json.loads(path.read_text()), version), indent=2, sort_keys=True) + "\n"
    return hashlib.sha256(_paths(text, work, version).encode()).hexdigest()


def _parquet_digest(path: Path, work: Path, version: bool = True) -> str:
    f = pq.ParquetFile(path)
    h = hashlib.sha256()
    for k, v in sorted((f.schema_arrow.metadata or {}).items()):
        if k != b"ARROW:schema":
            h.update(k + b"=" + _paths(v.decode(), work, version).encode())
    table = f.read()
    h.update(str(table.schema.remove_metadata()).encode())  # its text shows the metadata's length, path included
    for name in table.column_names:
        h.update(name.encode())
        h.update(json.dumps(table.column(name).to_pylist(), default=str).encode())
    return h.hexdigest()


def _out(name: str, work: Path) -> Path:
    a = argv(name, work)
    return Path(a[a.index("-o") + 1])


def digest(name: str, work: Path, version: bool = True) -> dict[str, str]:
    """Digests of what the run ``name`` wrote under ``work`` (``version=False``: the version unmasked, as the
    digests were recorded before issue 19)."""
    out = _out(name, work)
    if out.suffix == ".parquet":
        return {"trace": _parquet_digest(out, work, version)}
    got = {}
    for f in ("config.json", "result.json"):
        if (out / f).exists():
            got[f] = _text_digest(out / f, work, version)
    for f in ("timeseries.parquet", "latency.parquet"):
        if (out / f).exists():
            got[f] = _parquet_digest(out / f, work, version)
    return got


def _p99(block) -> float | None:
    pct = (block or {}).get("lat_ns", {}).get("percentile") if isinstance(block, dict) else None
    return pct.get("99.000000") if pct else None


def _trace_figures(path: Path) -> dict:
    """Events in all and per op, and the tier simulator's hit ratios (kept in the file's key-value metadata)."""
    reader = TraceReader(path)
    ops = collections.Counter(pq.ParquetFile(path).read(columns=["op"]).column("op").to_pylist())
    figs: dict = {"events": reader.num_rows, **{f"events.{op}": n for op, n in sorted(ops.items())}}
    for tier, st in sorted(reader.meta.tier_stats.items()):
        for k, v in sorted(st.items()) if isinstance(st, dict) else ():
            if k.endswith("hit_ratio"):
                figs[f"{tier}.{k}"] = v
    return figs


def _job_figures(job: dict) -> dict:
    figs = {k: job.get(k) for k in ("waf", "end_to_end_waf", "erases", "zone_resets", "gc_stall_ns")
            if job.get(k) is not None}
    gc = job.get("gc") or {}
    if "bytes_moved" in gc:
        figs["gc.bytes_moved"] = gc["bytes_moved"]
    for series in ("object_read", "object_write", "read", "write"):
        p = _p99(job.get(series))
        if p is not None:
            figs[f"{series}.p99_ns"] = p
    return figs


def figures(name: str, work: Path) -> dict:
    """The headline figures of the run ``name``: what a failing golden test should name first."""
    out = _out(name, work)
    if out.suffix == ".parquet":
        return _trace_figures(out)
    doc = json.loads((out / "result.json").read_text())
    jobs = doc.get("jobs") or [doc["job"]]  # a replay's jobs, or a `device run`'s one job
    if len(jobs) == 1:
        return _job_figures(jobs[0])
    return {f"{j.get('jobname', i)}.{k}": v for i, j in enumerate(jobs) for k, v in _job_figures(j).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--check-old", type=Path, help="digests.json whose digests must still hold (version unmasked)")
    args = ap.parse_args()
    from click.testing import CliRunner

    from testbed.cli import cli

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    old = json.loads(args.check_old.read_text()) if args.check_old else None
    out = {}
    for name in RUNS:
        if name in NEEDS_MOONCAKE and not MOONCAKE.exists():
            continue
        res = CliRunner().invoke(cli, argv(name, work))
        assert res.exit_code == 0, (name, res.output, res.stderr)
        if old is not None:
            was = old[name].get("digests", old[name])
            assert digest(name, work, version=False) == was, f"{name}: the outputs moved"
        out[name] = {"figures": figures(name, work), "digests": digest(name, work)}
    print(json.dumps(out, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
