"""Build FEMU's ``qemu-system-x86_64`` once per source and cache it by the source's sha256.

Why a cache keyed by content: the build takes minutes (about 4.5 on 2 idle cores, 2,400 ninja steps),
and a test suite or a user's later ``kvbed up --backend femu`` must find the binary without rebuilding
an unchanged source. The key is the sha256 of the tarball (or of every file of a source directory), so
an edited checkout gets a new entry and an old entry stays usable.

Steps (each resumable: an interrupted build continues where it stopped): the host's build packages
(``scripts/setup_host.sh --femu`` installs the missing ones), the source copied or unpacked into a work
directory under the system's temporary directory, ``tests/fp`` left out (it would fetch berkeley
softfloat/testfloat from the network), ``configure`` for the x86_64 system emulator only, ``ninja``
for the one binary with a progress bar, then the binary and the x86 firmware it loads (``pc-bios``)
copied into a hidden ``<cache>/femu/.<key>.*.tmp`` and renamed to ``<cache>/femu/<key>`` when complete. A file
lock serialises concurrent builds of one key.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from kvbed.core.atomicio import temp_dir_for, write_json
from kvbed.core.errors import KvbedError
from testbed.vm import paths

BINARY = "qemu-system-x86_64"
CONFIGURE_ARGS = ("--target-list=x86_64-softmmu", "--enable-slirp", "--disable-docs", "--disable-werror",
                  "--disable-kvm", "--disable-gtk", "--disable-sdl", "--disable-vnc", "--disable-opengl",
                  "--disable-spice", "--disable-rust")
#: pkg-config modules and commands the build needs; scripts/setup_host.sh --femu installs their packages
NEEDED_PKGCONFIG = ("glib-2.0", "pixman-1", "slirp")
NEEDED_HEADERS = ("/usr/include/libfdt.h",)  # Debian's libfdt-dev has no .pc file
NEEDED_TOOLS = ("gcc", "make", "ninja", "flex", "bison", "pkg-config")
#: firmware an x86 guest may load (qboot, SeaBIOS, option ROMs); everything else in pc-bios is other arches
FIRMWARE_RE = re.compile(r"^(qboot\.rom|bios(-256k|-microvm)?\.bin|kvmvapic\.bin|linuxboot(_dma)?\.bin|"
                         r"multiboot(_dma)?\.bin|pvh\.bin|efi-virtio\.rom|pxe-virtio\.rom|vgabios.*\.bin)$")
SKIP_DIRS = {".git", "build", ".cache"}
NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


def vendor_dir() -> Path:
    """``../shared/vendor`` beside the repository (where the project keeps third-party tarballs)."""
    return Path(os.environ.get("KVBED_VENDOR_DIR") or paths.REPO_ROOT.parent / "shared" / "vendor")


def default_source() -> Path | None:
    """The newest ``femu-*.tar.xz`` in the vendor directory, or None."""
    found = sorted(vendor_dir().glob("femu-*.tar.xz"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def femu_dir() -> Path:
    return paths.cache_dir() / "femu"


def source_hash(src: Path) -> str:
    """sha256 of a tarball's bytes, or of a directory's files (relative path, size and content each,
    skipping .git and build directories)."""
    h = hashlib.sha256()
    if src.is_file():
        with open(src, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("build"))
        for name in sorted(files):
            p = Path(root, name)
            if p.is_symlink():
                data = os.readlink(p).encode()
            else:
                data = p.read_bytes()
            h.update(f"{p.relative_to(src)}\0{len(data)}\0".encode())
            h.update(data)
    return h.hexdigest()


@dataclass(frozen=True)
class FemuBuild:
    """A cached build: ``<cache>/femu/<key>/{qemu-system-x86_64, share/, manifest.json}``."""

    key: str
    path: Path

    @property
    def binary(self) -> Path:
        return self.path / BINARY

    @property
    def share(self) -> Path:
        """Firmware directory, given to QEMU as ``-L`` (the binary is not installed anywhere)."""
        return self.path / "share"

    def manifest(self) -> dict:
        return paths.read_manifest(self.path)

    def complete(self) -> bool:
        return self.binary.is_file() and os.access(self.binary, os.X_OK) and (self.path / "manifest.json").is_file()


def find(key: str) -> FemuBuild | None:
    b = FemuBuild(key, femu_dir() / key)
    return b if b.complete() else None


def list_builds() -> list[FemuBuild]:
    d = femu_dir()
    if not d.is_dir():
        return []
    out = [FemuBuild(p.name, p) for p in d.iterdir() if re.fullmatch(r"[0-9a-f]{64}", p.name)]
    return sorted((b for b in out if b.complete()), key=lambda b: b.manifest().get("built_unix", 0))


def resolve_source(src: str | os.PathLike | None) -> Path:
    if src is None:
        d = default_source()
        if d is None:
            raise KvbedError(f"no FEMU source: no femu-*.tar.xz in {vendor_dir()}; pass --src DIR|TARBALL "
                             f"(a FEMU checkout or tarball)")
        return d
    p = Path(src).expanduser().resolve()
    if not p.exists():
        raise KvbedError(f"--src {src}: no such file or directory")
    if p.is_dir() and not (p / "configure").is_file() or p.is_dir() and not (p / "hw" / "femu").is_dir():
        raise KvbedError(f"--src {src}: not a FEMU source tree (needs configure and hw/femu/)")
    if p.is_file() and not re.search(r"\.tar(\.xz|\.gz|\.bz2|\.zst)?$|\.tgz$", p.name):
        raise KvbedError(f"--src {src}: expected a directory or a .tar[.xz|.gz|.bz2|.zst] tarball")
    return p


def binary(src: str | os.PathLike | None = None) -> FemuBuild:
    """The cached build ``kvbed up --backend femu`` uses: ``KVBED_FEMU_BIN`` if set, else the build of
    ``src`` (default: the vendored tarball), else the newest cached build. One line if there is none."""
    env = os.environ.get("KVBED_FEMU_BIN")
    if env:
        p = Path(env)
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise KvbedError(f"KVBED_FEMU_BIN={env}: not an executable file")
        return FemuBuild("env", p.parent)
    s = resolve_source(src) if src is not None else default_source()
    if s is not None:
        b = find(source_hash(s))
        if b is not None:
            return b
        if src is not None or not list_builds():
            raise KvbedError(f"FEMU is not built for {s}: run `kvbed femu build`"
                             + (f" --src {src}" if src is not None else "") + " (about 5 minutes, once)")
    builds = list_builds()
    if not builds:
        raise KvbedError("FEMU is not built: run `kvbed femu build [--src DIR|TARBALL]` (about 5 minutes, once)")
    return builds[-1]


# ------------------------------------------------------------------------------------------ prerequisites
def missing_prerequisites() -> list[str]:
    out = [t for t in NEEDED_TOOLS if shutil.which(t) is None]
    if shutil.which("pkg-config"):
        out += [m for m in NEEDED_PKGCONFIG
                if subprocess.run(["pkg-config", "--exists", m], capture_output=True).returncode != 0]
    out += [Path(h).name for h in NEEDED_HEADERS if not Path(h).exists()]
    r = subprocess.run(["python3", "-c", "import venv, ensurepip"], capture_output=True)
    if r.returncode != 0:
        out.append("python3-venv")
    return out


def ensure_prerequisites(log: Callable[[str], None]) -> None:
    missing = missing_prerequisites()
    if not missing:
        return
    script = paths.REPO_ROOT / "scripts" / "setup_host.sh"
    log(f"installing FEMU build packages for: {', '.join(missing)} (scripts/setup_host.sh --femu)")
    r = subprocess.run(["bash", str(script), "--femu"], capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        raise KvbedError(f"FEMU build packages could not be installed ({tail}); missing: {', '.join(missing)}")
    still = missing_prerequisites()
    if still:
        raise KvbedError(f"FEMU build packages still missing after scripts/setup_host.sh --femu: {', '.join(still)}")


# ------------------------------------------------------------------------------------------------ build
@contextlib.contextmanager
def _lock(key: str) -> Iterator[None]:
    femu_dir().mkdir(parents=True, exist_ok=True)
    with open(femu_dir() / f".{key[:16]}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def work_dir(key: str) -> Path:
    """Where the source is unpacked and built (kept until the build succeeds, so a rerun resumes)."""
    return Path(os.environ.get("KVBED_FEMU_WORK") or tempfile.gettempdir()) / f"kvbed-femu-{key[:16]}"


def _run(argv: list[str], cwd: Path, logf: Path, what: str) -> None:
    with open(logf, "ab") as out:
        r = subprocess.run(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise KvbedError(f"FEMU {what} failed (exit status {r.returncode}): {_last_error(logf)} (log: {logf})")


def _last_error(logf: Path) -> str:
    try:
        lines = [ln.strip() for ln in logf.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    for ln in reversed(lines[-200:]):
        if re.search(r"error|ERROR|No such|not found", ln):
            return ln[:200]
    return (lines[-1] if lines else "no output")[:200]


def _tree_root(work: Path) -> Path:
    """The source tree inside the work directory (a tarball has one top directory)."""
    src = work / "src"
    if (src / "configure").is_file():
        return src
    subs = [p for p in src.iterdir() if p.is_dir()] if src.is_dir() else []
    if len(subs) == 1 and (subs[0] / "configure").is_file():
        return subs[0]
    raise KvbedError(f"FEMU source in {src} has no configure script")


def _prepare_tree(src: Path, work: Path, log: Callable[[str], None]) -> Path:
    marker = work / ".unpacked"
    if not marker.exists():
        shutil.rmtree(work, ignore_errors=True)
        (work / "src").mkdir(parents=True)
        if src.is_file():
            log(f"unpacking {src.name}")
            r = subprocess.run(["tar", "-xf", str(src), "-C", str(work / "src")], capture_output=True, text=True)
            if r.returncode != 0:
                raise KvbedError(f"cannot unpack {src}: {(r.stderr.strip().splitlines() or ['tar failed'])[-1]}")
        else:
            log(f"copying {src}")
            shutil.copytree(src, work / "src", symlinks=True, dirs_exist_ok=True,
                            ignore=lambda d, names: [n for n in names if n in SKIP_DIRS or n.startswith("build")])
        root = _tree_root(work)
        # tests/fp needs berkeley-softfloat-3/testfloat-3, which configure would fetch: leave it out
        tm = root / "tests" / "meson.build"
        if tm.is_file():
            tm.write_text(re.sub(r"^(\s*)subdir\('fp'\)", r"\1# subdir('fp')  (kvbed: fetches softfloat)",
                                 tm.read_text(), flags=re.M))
        marker.write_text(str(src))
    return _tree_root(work)


def _ninja(build: Path, logf: Path, progress: Callable[[int, int], None] | None, jobs: int) -> None:
    argv = ["ninja", "-C", str(build), f"-j{jobs}", BINARY]
    with open(logf, "ab") as out:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        assert p.stdout is not None
        for raw in p.stdout:
            out.write(raw)
            m = NINJA_STEP.match(raw.decode(errors="replace"))
            if m and progress:
                progress(int(m.group(1)), int(m.group(2)))
        rc = p.wait()
    if rc != 0:
        raise KvbedError(f"FEMU build failed (ninja exit status {rc}): {_last_error(logf)} (log: {logf})")


def build(src: str | os.PathLike | None = None, *, log: Callable[[str], None] | None = None,
          progress: Callable[[int, int], None] | None = None, jobs: int | None = None,
          force: bool = False) -> tuple[FemuBuild, bool]:
    """Build (or find) FEMU for ``src``; returns (build, built_now)."""
    log = log or (lambda s: None)
    s = resolve_source(src)
    key = source_hash(s)
    if not force and (b := find(key)) is not None:
        return b, False
    with _lock(key):
        if not force and (b := find(key)) is not None:
            return b, False
        ensure_prerequisites(log)
        t0 = time.monotonic()
        work = work_dir(key)
        work.mkdir(parents=True, exist_ok=True)
        logf = work / "build.log"
        root = _prepare_tree(s, work, log)
        bdir = root / "build"
        if not (bdir / "build.ninja").is_file():
            bdir.mkdir(exist_ok=True)
            log("configuring (x86_64 system emulator only)")
            _run([str(root / "configure"), *CONFIGURE_ARGS], bdir, logf, "configure")
        log(f"building {BINARY}")
        _ninja(bdir, logf, progress, jobs or os.cpu_count() or 2)
        final = femu_dir() / key
        tmp = temp_dir_for(final)
        try:
            shutil.copy2(bdir / BINARY, tmp / BINARY)
            (tmp / "share").mkdir()
            for f in sorted((root / "pc-bios").iterdir()):
                if f.is_file() and FIRMWARE_RE.match(f.name):
                    shutil.copyfile(f, tmp / "share" / f.name)
            ver = subprocess.run([str(tmp / BINARY), "--version"], capture_output=True, text=True)
            if ver.returncode != 0:
                raise KvbedError(f"the built {BINARY} does not run: {(ver.stderr.strip() or 'no output')[:200]}")
            write_json(tmp / "manifest.json", {
                "key": key, "source": str(s), "source_kind": "tarball" if s.is_file() else "directory",
                "configure": list(CONFIGURE_ARGS), "qemu_version": ver.stdout.splitlines()[0] if ver.stdout else "",
                "build_s": round(time.monotonic() - t0, 1), "built_unix": time.time(),
                "binary_bytes": (tmp / BINARY).stat().st_size})
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(work, ignore_errors=True)
        return FemuBuild(key, final), True


def status(src: str | os.PathLike | None = None) -> dict:
    """What ``kvbed femu status`` shows: the source, its key, whether it is built, every cached build."""
    s = None
    err = None
    try:
        s = resolve_source(src) if src is not None else default_source()
    except KvbedError as exc:
        err = str(exc)
    key = source_hash(s) if s is not None else None
    cur = find(key) if key else None
    work = work_dir(key) if key else None
    return {
        "source": str(s) if s else None, "source_error": err, "key": key,
        "built": cur is not None, "binary": str(cur.binary) if cur else None,
        "interrupted_build": str(work) if work and work.exists() and cur is None else None,
        "missing_packages": missing_prerequisites(),
        "builds": [{"key": b.key, "path": str(b.path), **{k: b.manifest().get(k) for k in
                                                          ("source", "qemu_version", "build_s", "built_unix")}}
                   for b in list_builds()],
    }
