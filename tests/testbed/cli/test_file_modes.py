"""What kvbed writes is an ordinary output: files 0o666 and directories 0o777 less the umask (0644/0755 under
the usual 022, private under 077), for every kind of output: run directories and their files, traces, studies,
reports, crossover outputs, device runs, capture files, and the FEMU and guest-image caches."""

from __future__ import annotations

import os
import shutil
import stat
import textwrap
from pathlib import Path

import pytest

from tests.support.cli import kvbed, ok
from tests.support.replay_fixtures import two_lifetimes


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def modes(*roots: Path) -> dict[str, str]:
    """Every file and directory under ``roots`` (the roots included) -> its permission bits, octal."""
    out = {}
    for root in roots:
        paths = [root, *root.rglob("*")] if root.is_dir() else [root]
        for p in paths:
            out[str(p)] = oct(stat.S_IMODE(p.lstat().st_mode))
    return out


def assert_modes(umask: int, *roots: Path, min_files: int = 1) -> None:
    got = modes(*roots)
    want_file, want_dir = oct(0o666 & ~umask), oct(0o777 & ~umask)
    files = {p: m for p, m in got.items() if not Path(p).is_dir()}
    dirs = {p: m for p, m in got.items() if Path(p).is_dir()}
    assert len(files) >= min_files, got
    assert {p: m for p, m in files.items() if m != want_file} == {}, f"files should be {want_file}"
    assert {p: m for p, m in dirs.items() if m != want_dir} == {}, f"directories should be {want_dir}"
    assert not [p for p in got if Path(p).name.endswith(".tmp")], "temporary files left behind"


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return two_lifetimes(tmp_path_factory.mktemp("modes") / "t.parquet", n_objects=1500)


def test_atomic_writers(umask, tmp_path):
    from kvbed.core.atomicio import atomic_path, temp_dir_for, write_json

    write_json(tmp_path / "new" / "a.json", {"x": 1})
    with atomic_path(tmp_path / "b.bin") as tmp:
        tmp.write_bytes(b"x")
    d = temp_dir_for(tmp_path / "c")
    d.rename(tmp_path / "c")
    assert_modes(umask, tmp_path / "new", tmp_path / "b.bin", tmp_path / "c", min_files=2)


def test_replay_run_directory(umask, trace, tmp_path):
    out = tmp_path / "results" / "run"
    ok(kvbed("replay", trace, "-o", out, "-q"))
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "result.json", "timeseries.parquet", "latency.parquet", "runtime.json", "waf.png",
            "latency_cdf.png", "ruh_bytes.png"} <= names
    assert_modes(umask, out.parent, min_files=8)
    ok(kvbed("replay", trace, "-o", out, "-q", "--no-plots"))  # a run directory replaced whole
    assert_modes(umask, out.parent, min_files=5)


def test_report_directory(umask, trace, tmp_path):
    runs = []
    for h in ("none", "oracle"):
        ok(kvbed("replay", trace, "--hints", h, "-o", tmp_path / h, "-q", "--no-plots"))
        runs.append(tmp_path / h)
    ok(kvbed("report", *runs))
    assert_modes(umask, tmp_path / "report-none-oracle", min_files=2)


def test_traces_synth_and_import(umask, tmp_path):
    ok(kvbed("trace", "synth", "-o", tmp_path / "sub" / "s.parquet", "--duration-s", "20"))
    src = tmp_path / "mc.jsonl"
    src.write_text('{"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]}\n'
                   '{"timestamp": 1000, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]}\n')
    ok(kvbed("trace", "import", "mooncake", src, "-o", tmp_path / "sub" / "mc.parquet"))
    assert_modes(umask, tmp_path / "sub", min_files=2)


def test_study_directory(umask, tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(textwrap.dedent("""
        [study]
        name = "modes"
        seeds = [0]
        [trace]
        synth = true
        duration_s = 20
        [replay]
        device = "fdp"
        [axes]
        "replay.hints" = ["none", "oracle"]
    """))
    out = tmp_path / "study"
    ok(kvbed("study", "run", spec, "-o", out, "-j", "1", "-q"))
    for name in ("study.json", "study.toml", "table.parquet", "table.csv", "summary.csv", "report.md",
                 "report.html", "plots", "traces", "runs"):
        assert (out / name).exists(), name
    assert_modes(umask, out, min_files=10)


def test_crossover_outputs(umask, tmp_path):
    out = tmp_path / "xo"
    ok(kvbed("crossover", "--tiers", "remote", "--models", "llama-3-8b", "--queue-depths", "1",
             "--max-tokens", "64", "-o", out))
    assert {p.name for p in out.iterdir()} == {"crossover.csv", "curves.csv", "crossover.json", "crossover.png"}
    assert_modes(umask, out, min_files=4)


def test_device_run_output(umask, tmp_path):
    ok(kvbed("device", "run", "--device", "conv", "--pages", "65536", "--param", "blocks_per_line=1", "--writes-x", "1", "--json",
             "-o", tmp_path / "dev"))
    assert_modes(umask, tmp_path / "dev", min_files=1)


def test_capture_files(umask, tmp_path):
    """What `trace capture` writes: the raw frames and the trace rewritten at every flush."""
    import numpy as np

    from kvreplay import schema as S
    from kvreplay.capture.checkpoint import CheckpointWriter
    from kvreplay.capture.rawfile import RawWriter

    raw = RawWriter(tmp_path / "cap" / "c.kvraw", {"endpoints": ["tcp://x:1"]})
    raw.write(1, 0, 0, [b"t", b"s", b"p"])
    raw.close()
    cw = CheckpointWriter(tmp_path / "cap" / "c.parquet", flush_s=0.0)
    n = 2
    cols = {name: np.zeros(n, dt) for name, (_, dt) in S.COLUMNS.items()}
    cols["op"] = np.array([S.OP["commit"], S.OP["delete"]], np.int8)
    cols["nbytes"] = np.array([4096, 4096], np.int64)
    for i in range(2):  # two flushes: the second rewrites the file with the first's rows
        cols["ts_ns"] = np.array([10 * i + 1, 10 * i + 2], np.int64)
        cols["obj_id"] = np.array([i + 1, i + 1], np.uint64)
        cw.flush(S.EventBatch(cols), S.TraceMeta(), ["default"], ["default"])
    assert_modes(umask, tmp_path / "cap", min_files=2)


def test_femu_build_cache(umask, tmp_path, monkeypatch):
    from tests.support.femu_tree import fake_femu_tree
    from testbed.femu import build as fb

    monkeypatch.setenv("KVBED_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KVBED_FEMU_WORK", str(tmp_path / "work"))
    monkeypatch.setattr(fb, "missing_prerequisites", lambda: [])
    if shutil.which("ninja") is None:
        pytest.skip("ninja not installed (scripts/setup_host.sh --femu)")
    b, built = fb.build(fake_femu_tree(tmp_path / "src" / "femu-x"))
    assert built
    assert_modes_exec(umask, b.path)


def assert_modes_exec(umask: int, root: Path) -> None:
    """A build directory: the binary keeps its execute bits (0o777 less the umask), the rest as any output."""
    got = modes(root)
    for p, m in got.items():
        q = Path(p)
        want = 0o777 if q.is_dir() or os.access(q, os.X_OK) else 0o666
        assert m == oct(want & ~umask), (p, m)


def test_guest_image_cache(umask, tmp_path, monkeypatch):
    """The image build's directory (its recipe faked: what the real one writes into $OUT)."""
    from testbed.vm import image, paths

    if os.geteuid() != 0:
        pytest.skip("the image build insists on root")
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    (recipe / "build.sh").write_text('for f in vmlinux initrd.img root.qcow2; do echo x > "$OUT/$f"; done\n'
                                     'echo 6.1.0 > "$OUT/kernel-release.txt"\n')
    monkeypatch.setattr(paths, "RECIPE_DIR", recipe)
    monkeypatch.setenv("KVBED_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KVBED_MIRROR", "http://deb.example")
    monkeypatch.setattr(image, "_missing_tools", lambda: [])
    monkeypatch.setattr(image, "_codename", lambda: "bookworm")
    img = image.build()
    assert img.complete()
    assert_modes(umask, img.path, min_files=5)
