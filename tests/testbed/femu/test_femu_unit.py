"""FEMU backend without FEMU: device options from the dataclasses, refusals, the build cache, the trackers.

The build-cache tests use a fake source tree whose ``configure`` writes a one-rule build.ninja that makes
a shell script called qemu-system-x86_64, so source hashing, caching, resuming and failures run through
the real code (tarball unpack, ninja with progress, rename into the cache) in well under a second. The
real build and a real FEMU guest are tests/testbed/femu/test_femu_vm.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile

import numpy as np
import pytest

from devicemodels.base import OP_READ, OP_WRITE, op_batch
from kvbed.core.errors import KvbedError
from testbed.femu import build as fb
from testbed.femu.defaults import femu_params
from testbed.femu.devices import femu_mapping
from testbed.vm import backends, checks, cmdline, qemu
from tests.support.femu_tree import fake_femu_tree
from tests.support.cli import kvbed, ok, one_line_error, params

MiB = 1 << 20
GiB = 1 << 30
# the facts' comparison geometry: 4 GiB, 25% OP, 4 RUHs, 64 MiB RUs (one line of 8 x 8 dies x 256 x 4 KiB)
FDP_OK = ["ru_bytes=64MiB", "nruh=4", "ruh_type=persistently", "op_ratio=0.25", "gc_bg_trigger=threshold",
          "gc_bg_free_lines=7", "gc_fg_free_lines=4"]




def _opts(args: list[str], device: str) -> dict[str, str]:
    i = next(i for i, a in enumerate(args) if a.startswith(device + ","))
    return dict(kv.split("=", 1) for kv in args[i].split(",")[1:])


def test_fdp_options_come_from_the_dataclasses():
    p = qemu.resolve_params("fdp", FDP_OK)
    args = femu_mapping("fdp", p).args()
    f, s = _opts(args, "femu"), _opts(args, "femu-subsys")
    # the geometry of ../shared/notes/femu-facts.md, derived rather than typed in: 80 lines of 64 dies
    assert (f["devsz_mb"], f["nchs"], f["luns_per_ch"], f["pgs_per_blk"], f["blks_per_pl"]) == \
           ("4096", "8", "8", "256", "80")
    assert (f["secsz"], f["secs_per_pg"], f["femu_mode"], f["subsys"]) == ("512", "8", "1", "femu-subsys-0")
    assert (f["pg_rd_lat"], f["pg_wr_lat"], f["blk_er_lat"], f["ch_xfer_lat"]) == ("40000", "200000", "2000000", "5120")
    # FEMU computes free RUs as int((1 - p/100) * 80): 90% -> 7 (bg), 94% -> 4 (fg)
    assert (f["gc_thres_pcent"], f["gc_thres_pcent_high"], f["gc_strategy"], f["mdts"]) == ("90", "94", "0", "7")
    assert s == {"id": "femu-subsys-0", "nqn": "kvbed-fdp", "fdp": "on", "fdp.nruh": "4", "fdp.nrg": "1",
                 "fdp.nru": "80", "fdp.runs": str(64 * MiB), "fdp.isolation_mode": "0"}
    # a parameter change shows up in FEMU's options: 1 MiB mapping units, 2x slower programs, more OP
    p2 = qemu.resolve_params("fdp", FDP_OK + ["page_bytes=16KiB", "pages_per_block=64", "nand_page_bytes=4KiB",
                                              "page_program_ns=400us", "op_ratio=0.5"])
    f2 = _opts(femu_mapping("fdp", p2).args(), "femu")
    assert (f2["secs_per_pg"], f2["pg_wr_lat"], f2["blks_per_pl"]) == ("32", str(4 * 400_000), "96")
    assert femu_mapping("fdp", p).host_bytes == 4 * GiB + 1 * GiB + 512 * MiB  # device + guest + overhead


def test_what_femu_cannot_express_is_one_line_exit_2(tmp_path):
    # values the user gave are refused (never changed), each with what FEMU would take
    one_line_error(kvbed("femu", "args", "-d", "fdp", *params("ru_bytes=16MiB", "ruh_type=initially")),
                   "FEMU cannot express: ru_bytes=16MiB", "one line", "= 64MiB", "ruh_type=initially",
                   "persistently or last-initially")
    one_line_error(kvbed("femu", "args", "-d", "fdp", *params(*FDP_OK, "blocks_per_line=4")), "blocks_per_line=4")
    one_line_error(kvbed("femu", "args", "-d", "fdp", *params(*FDP_OK, "gc_policy=d-choices")), "gc_policy=d-choices")
    one_line_error(kvbed("femu", "args", "-d", "fdp", *params(*FDP_OK, "write_buffer_bytes=1MiB")), "write_buffer_bytes=1MiB")
    one_line_error(kvbed("femu", "args", "-d", "conv", *params("gc_bg_trigger=threshold", "gc_separate_frontier=true")),
                   "gc_separate_frontier=true")
    one_line_error(kvbed("femu", "args", "-d", "zns", *params("page_read_ns=40us")), "FEMU's ZNS timing is one of its flash types")
    # 8 GiB of 64 MiB lines at 7% OP: 548 lines (shorter lines, chosen), int((1 - p/100) x 548) is 0, 5, 10, ...
    one_line_error(kvbed("femu", "args", "-d", "fdp", *params("logical_bytes=8GiB", "gc_bg_free_lines=2")),
                   "gc_bg_free_lines=2", "548 lines", "the nearest that do: 5")
    # preset=femu keeps 25% of the 80 lines free: at 25% OP GC cannot make progress; 90% (8 free) can
    one_line_error(kvbed("femu", "args", "-d", "fdp", *params("preset=femu", "logical_bytes=4GiB", "op_ratio=0.25",
                                                              "nruh=4")),
                   "too small for GC to make progress", "gc_bg_used_pct=90")
    # `kvbed up` refuses before it looks for a FEMU binary or starts anything
    env = {"KVBED_STATE_DIR": str(tmp_path / "vms"), "KVBED_CACHE_DIR": str(tmp_path / "cache")}
    one_line_error(kvbed("up", "--backend", "femu", "-d", "fdp", *params("ruh_type=initially"), env=env),
                   "FEMU cannot express: ruh_type=initially")
    one_line_error(kvbed("up", "--backend", "femu", "-d", "cxl", env=env), "the femu backend has no cxl device")
    one_line_error(kvbed("up", "--backend", "nosuch", "-d", "fdp", env=env), "unknown VM backend 'nosuch'")
    assert not (tmp_path / "vms").exists()


def _chosen(device: str, *overrides: str) -> dict:
    p, chosen = femu_params(device, overrides)
    femu_mapping(device, p)  # expressible, or this raises
    return {c.field: c.value for c in chosen}


def test_femu_defaults_from_capacity_op_and_handles_alone():
    """Fields the user left out that FEMU cannot express take a value it can; the model gets the same ones."""
    # 4 GiB, 25% OP: 80 lines of 64 dies x 256 pages x 4 KiB = 64 MiB (FEMU's RU); thresholds 2 and 1 free
    # lines are int((1 - 0.97) x 80) and int((1 - 0.98) x 80)
    assert _chosen("fdp", "logical_bytes=4GiB", "op_ratio=0.25", "nruh=4") == {
        "ru_bytes": 64 * MiB, "ruh_type": "persistently", "gc_bg_trigger": "per-command"}
    p, _ = femu_params("fdp", ["logical_bytes=4GiB", "op_ratio=0.25", "nruh=4"])
    f = _opts(femu_mapping("fdp", p).args(), "femu")
    assert (f["gc_thres_pcent"], f["gc_thres_pcent_high"], f["blks_per_pl"]) == ("97", "98", "80")
    # 1 GiB, 25% OP: 64 MiB lines give 20 lines for 16 live + 8 open (4 RUHs x host and GC) + 1 + 1: too few;
    # 128 pages (32 MiB lines): 40 < 32 + 10; 64 pages (16 MiB lines): 80 >= 64 + 10
    assert _chosen("fdp", "logical_bytes=1GiB", "op_ratio=0.25", "nruh=4") == {
        "ru_bytes": 16 * MiB, "ruh_type": "persistently", "gc_bg_trigger": "per-command", "pages_per_block": 64}
    # what the user gave stays: their RU size and 128-page blocks (32 MiB lines) at 4 GiB and 25% OP
    assert "ru_bytes" not in _chosen("fdp", "logical_bytes=4GiB", "op_ratio=0.25", "pages_per_block=128",
                                     "ru_bytes=32MiB")
    # conv: GC into the host's open line needs a second free line, background GC above it
    assert _chosen("conv", "logical_bytes=4GiB", "op_ratio=0.25") == {
        "gc_separate_frontier": False, "gc_fg_free_lines": 2, "gc_bg_free_lines": 3, "gc_bg_trigger": "per-command"}
    # zns: FEMU's flash type nearest the model's 40 us reads (tlc)
    assert _chosen("zns", "logical_bytes=4GiB") == {"page_read_ns": 32_000, "page_program_ns": 937_500}
    # a preset's fields count as given: preset=femu at 50% OP keeps its own thresholds
    assert "gc_bg_free_lines" not in _chosen("fdp", "preset=femu", "logical_bytes=4GiB", "op_ratio=0.5", "nruh=4")


def test_femu_args_lists_the_chosen_values():
    out = json.loads(ok(kvbed("femu", "args", "-d", "fdp", "--json",
                              *params("logical_bytes=4GiB", "op_ratio=0.25", "nruh=4"))).stdout)
    assert {c["field"]: (c["value"], c["model_default"]) for c in out["chosen"]} == {
        "ru_bytes": (64 * MiB, 16 * MiB), "ruh_type": ("persistently", "initially"),
        "gc_bg_trigger": ("per-command", "idle")}
    assert any("fdp.runs=67108864" in a for a in out["args"])
    text = ok(kvbed("femu", "args", "-d", "fdp", *params("logical_bytes=4GiB", "op_ratio=0.25", "nruh=4")))
    assert "chosen for FEMU" in text.stdout and "persistently" in text.stdout


def test_host_memory_is_checked_before_start(tmp_path, monkeypatch):
    monkeypatch.setattr(backends, "host_available_bytes", lambda: 3 * GiB)
    env = {"KVBED_STATE_DIR": str(tmp_path / "vms")}
    res = kvbed("up", "--backend", "femu", "-d", "fdp", *params(*FDP_OK), env=env)  # 4 GiB device + 1 GiB guest
    one_line_error(res, "FEMU keeps the 4GiB device in host RAM", "needs about 5632MiB", "has 3GiB available")
    assert not (tmp_path / "vms").exists()


def test_host_meminfo_reader(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal: 100 kB\nMemAvailable:    2048 kB\n")
    assert backends.host_available_bytes(str(f)) == 2 * MiB
    assert backends.host_available_bytes(str(tmp_path / "none")) is None


def test_zns_and_conv_options():
    z = qemu.resolve_params("zns", ["logical_bytes=1GiB", "zone_bytes=64MiB", "zone_cap_bytes=48MiB",
                                    "page_read_ns=85us", "page_program_ns=12196us", "max_open_zones=4",
                                    "max_active_zones=6"])
    f = _opts(femu_mapping("zns", z).args(), "femu")
    assert (f["femu_mode"], f["zns_num_blk"], f["zns_zone_cap"], f["zns_flash_type"]) == ("3", "16", str(48 * MiB), "4")
    assert (f["zns_num_ch"], f["zns_num_lun"], f["zns_max_open"], f["zns_max_active"]) == ("8", "8", "4", "6")
    # FEMU's zone = num_ch x num_lun x num_plane x (size / 16 KiB / (ch x lun x blk)) x 16 KiB = 64 MiB
    assert 8 * 8 * 1 * (GiB // (16 * 1024) // (8 * 8 * 16)) * 16 * 1024 == 64 * MiB
    with pytest.raises(KvbedError, match=r"zone_bytes=64MiB \(FEMU's zone is whole 16 KiB pages on every die: a multiple of 1008KiB"):
        femu_mapping("zns", qemu.resolve_params("zns", ["logical_bytes=1GiB", "zone_bytes=64MiB",
                                                        "page_read_ns=85us", "page_program_ns=12196us",
                                                        "channels=3", "dies_per_channel=21"]))
    c = qemu.resolve_params("conv", ["logical_bytes=1GiB", "gc_bg_trigger=threshold", "gc_separate_frontier=false",
                                     "gc_fg_free_lines=2", "gc_bg_free_lines=3", "op_ratio=0.5",
                                     "gc_policy=cost-benefit"])
    f = _opts(femu_mapping("conv", c).args(), "femu")
    assert (f["femu_mode"], f["blks_per_pl"], f["gc_policy"]) == ("1", "24", "cost-benefit") and "subsys" not in f
    assert (f["gc_thres_pcent"], f["gc_thres_pcent_high"]) == ("84", "88")  # the smallest percents: int(0.16 x 24) = 3, int(0.12 x 24) = 2


def test_argv_on_the_femu_backend(tmp_path, monkeypatch):
    fake = tmp_path / "femu" / "qemu-system-x86_64"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho QEMU emulator version 10.1.0\n")
    fake.chmod(0o755)
    (fake.parent / "share").mkdir()
    (fake.parent / "share" / "qboot.rom").write_bytes(b"x")
    monkeypatch.setenv("KVBED_FEMU_BIN", str(fake))
    be = backends.backend("femu")
    assert be.binary() == str(fake) and be.forced_accel()[0] == "tcg"
    p = qemu.resolve_params("fdp", FDP_OK)
    paths = qemu.VmPaths(kernel=tmp_path / "k", initrd=tmp_path / "i", overlay=tmp_path / "o", disk=None,
                         console=tmp_path / "c", qmp=tmp_path / "q")
    argv = cmdline.build_argv("fdp", p, paths, accel="tcg", host_port=4000, token="t", qemu_bin=be.binary(),
                           backend="femu")
    s = " ".join(argv)
    assert f"-L {fake.parent / 'share'}" in s and f"-bios {fake.parent / 'share' / 'qboot.rom'}" in s
    assert "-device femu-subsys,id=femu-subsys-0" in s and "nvme-ns" not in s and "-drive file=" in s  # root only
    assert s.count("-drive") == 1
    # the stock backend is unchanged
    q = " ".join(cmdline.build_argv("fdp", qemu.resolve_params("fdp", ["backing=null"]), paths, accel="tcg", host_port=4000, token="t"))
    assert "nvme-subsys" in q and "-device femu" not in q and "-L " not in q


# --- the build cache ---------------------------------------------------------------------------------------------
@pytest.fixture
def femu_env(tmp_path, monkeypatch):
    if shutil.which("ninja") is None:
        pytest.skip("ninja not installed (scripts/setup_host.sh --femu)")
    monkeypatch.setenv("KVBED_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KVBED_FEMU_WORK", str(tmp_path / "work"))
    monkeypatch.setenv("KVBED_VENDOR_DIR", str(tmp_path / "vendor"))
    monkeypatch.delenv("KVBED_FEMU_BIN", raising=False)
    monkeypatch.setattr(fb, "missing_prerequisites", lambda: [])
    return tmp_path


def test_build_is_cached_by_source_hash(femu_env):
    t = femu_env
    src = fake_femu_tree(t / "src" / "femu-x")
    (t / "vendor").mkdir()
    tarball = t / "vendor" / "femu-abc.tar.xz"
    with tarfile.open(tarball, "w:xz") as tf:
        tf.add(src, arcname="femu-x")
    steps = []
    b, built = fb.build(progress=lambda d, n: steps.append((d, n)))  # the vendored tarball by default
    assert built and b.key == fb.source_hash(tarball) and len(b.key) == 64
    assert b.path == t / "cache" / "femu" / b.key and b.binary.is_file() and steps[-1] == (1, 1)
    assert subprocess.run([b.binary, "--version"], capture_output=True, text=True).stdout.startswith("QEMU emulator")
    assert sorted(p.name for p in b.share.iterdir()) == ["qboot.rom"]
    assert b.manifest()["source"] == str(tarball) and not fb.work_dir(b.key).exists()  # work dir removed
    # unchanged source: found, not rebuilt (the fake configure counts its runs in the work tree)
    b2, built2 = fb.build()
    assert (b2, built2) == (b, False) and fb.binary().binary == b.binary
    # a directory source with a changed file is another key; the build patched only its own copy
    b3, built3 = fb.build(src)
    assert built3 and b3.key != b.key and "subdir('fp')\n" in (src / "tests" / "meson.build").read_text()
    (src / "hw" / "femu" / "new.c").write_text("int x;\n")
    assert fb.source_hash(src) != b3.key
    res = kvbed("femu", "status", "--json")
    st = json.loads(res.output)
    assert st["built"] is True and st["key"] == b.key and len(st["builds"]) == 2
    res = kvbed("femu", "build", "-q")
    assert res.exit_code == 0 and "cached" in res.output


def test_build_failures_are_one_line_and_resume(femu_env):
    t = femu_env
    src = fake_femu_tree(t / "src")
    (src / "FAIL").write_text("")
    res = kvbed("femu", "build", "--src", src, "-q")
    one_line_error(res, "FEMU configure failed", "ERROR: glib-2.0 not found", "log: ")
    key = fb.source_hash(src)
    assert fb.find(key) is None and not (t / "cache" / "femu" / key).exists()
    assert (fb.work_dir(key) / ".unpacked").exists()  # kept: the next run resumes from the unpacked tree
    (fb.work_dir(key) / "src" / "FAIL").unlink()
    res = kvbed("femu", "build", "--src", src, "-q")
    assert res.exit_code == 0, res.output
    assert (fb.work_dir(key).exists() is False) and fb.find(key) is not None
    one_line_error(kvbed("femu", "build", "--src", t / "nosuch"), "no such file or directory")
    one_line_error(kvbed("femu", "build", "--src", t), "not a FEMU source tree")
    one_line_error(kvbed("femu", "build"), "no FEMU source: no femu-*.tar.xz in")


def test_femu_missing_is_one_line_exit_2(femu_env):
    env = {"KVBED_STATE_DIR": str(femu_env / "vms")}
    res = kvbed("up", "--backend", "femu", "-d", "fdp", *params(*FDP_OK, "logical_bytes=256MiB", "op_ratio=1.0",
                "ru_bytes=16MiB", "channels=2", "dies_per_channel=2", "pages_per_block=1024", "mem_bytes=512MiB"),
                env=env)
    one_line_error(res, "FEMU is not built: run `kvbed femu build")
    assert not (femu_env / "vms").exists()


def test_prerequisites_name_what_is_missing(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda t: None)
    assert {"gcc", "ninja", "flex", "bison", "pkg-config"} <= set(fb.missing_prerequisites())


# --- FEMU's FDP accounting ----------------------------------------------------------------------------------------
def _fdp_logs(ruamw, host=0, media=0, erased=0, ru=16 * MiB):
    return {"fdp_configs": {"configs": [{"ru_bytes": ru}]},
            "ruh_status": [{"pid": i, "ruamw_lbas": v} for i, v in enumerate(ruamw)],
            "fdp_stats": {"host_bytes_written": host, "media_bytes_written": media, "media_bytes_erased": erased}}


class _Done:
    def __init__(self, n):
        self.status = np.zeros(n, np.int32)


def test_femu_tracker_predicts_ruamw_per_placement_id():
    init = 16 * MiB // 512
    info = {"page_bytes": 4096, "lba_bytes": 512}
    before = _fdp_logs([init - 10, init, init])
    ops = op_batch(np.array([OP_WRITE, OP_WRITE, OP_READ, OP_WRITE]), np.array([0, 16, 0, 40]),
                   np.array([16, 8, 4, 2]), pid=np.array([1, 1, 0, 0]))
    t = checks.FemuFdpTracker(before, info)
    t.feed(ops, _Done(4))
    host = (16 + 8 + 2) * 4096
    after = _fdp_logs([init - 12, init - 24, init], host=host, media=host)
    c = {x["check"]: x for x in t.checks(after)}
    assert all(x["ok"] for x in c.values()) and set(c) == {"fdp_host_bytes_written", "fdp_media_covers_host",
                                                          "ruh_available_media_writes"}
    assert c["ruh_available_media_writes"]["distinguishes_placement_ids"]
    # the same stream with the hints ignored (all on pid 0) would fail the check
    bad = _fdp_logs([init - 36, init, init], host=host, media=host)
    assert not {x["check"]: x for x in t.checks(bad)}["ruh_available_media_writes"]["ok"]
    # GC erased something: RUAMW is not predicted, and says so; host bytes still are
    gc = _fdp_logs([1, 2, 3], host=host, media=3 * host, erased=16 * MiB)
    c = {x["check"]: x for x in t.checks(gc)}
    assert "ruh_available_media_writes" not in c and c["fdp_host_bytes_written"]["ok"] and "GC erased" in t.skipped
