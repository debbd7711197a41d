"""Guest images: built from images/guest by its build.sh, cached by recipe hash.

The hash covers every recipe file and the agent's source, so editing the agent
or the package list gives a new image directory and the old one stays usable
until removed. A build runs in a hidden ``.<hash>.*.tmp`` and is renamed into place
only when complete; a file lock serialises concurrent builds of one hash.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from kvbed.core.atomicio import temp_dir_for, write_json
from kvbed.core.errors import KvbedError
from testbed.vm import paths

IMAGE_FILES = ("vmlinux", "initrd.img", "root.qcow2")
HASH_LEN = 16


def recipe_files(recipe_dir: Path | None = None, agent_dir: Path | None = None) -> list[tuple[str, Path]]:
    recipe_dir = recipe_dir or paths.RECIPE_DIR
    agent_dir = agent_dir or paths.AGENT_DIR
    files = [(f"recipe/{p.relative_to(recipe_dir)}", p) for p in sorted(recipe_dir.rglob("*"))
             if p.is_file() and p.suffix != ".md"]  # documentation does not change the image
    files += [(f"agent/{p.name}", p) for p in sorted(agent_dir.glob("*.py"))]
    return files


def recipe_hash(recipe_dir: Path | None = None, agent_dir: Path | None = None) -> str:
    h = hashlib.sha256()
    for name, p in recipe_files(recipe_dir, agent_dir):
        data = p.read_bytes()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
        h.update(b"\x01" if os.access(p, os.X_OK) else b"\x00")
    return h.hexdigest()[:HASH_LEN]


@dataclass(frozen=True)
class Image:
    hash: str
    path: Path

    @property
    def kernel(self) -> Path:
        return self.path / "vmlinux"

    @property
    def initrd(self) -> Path:
        return self.path / "initrd.img"

    @property
    def root(self) -> Path:
        return self.path / "root.qcow2"

    def manifest(self) -> dict:
        return paths.read_manifest(self.path)

    def complete(self) -> bool:
        return all((self.path / f).is_file() for f in IMAGE_FILES) and (self.path / "manifest.json").is_file()


def find(hash_: str | None = None) -> Image | None:
    h = hash_ or recipe_hash()
    img = Image(h, paths.images_dir() / h)
    return img if img.complete() else None


def list_images() -> list[Image]:
    root = paths.images_dir()
    if not root.is_dir():
        return []
    out = []
    for d in sorted(root.iterdir()):
        if d.is_dir() and re.fullmatch(r"[0-9a-f]{%d}" % HASH_LEN, d.name):
            img = Image(d.name, d)
            if img.complete():
                out.append(img)
    return out


def remove(hash_prefix: str | None = None, *, all_: bool = False) -> list[str]:
    imgs = list_images()
    if all_:
        victims = imgs
    else:
        if not hash_prefix:
            raise KvbedError("image rm: give an image hash (or a unique prefix) or --all")
        victims = [i for i in imgs if i.hash.startswith(hash_prefix)]
        if not victims:
            raise KvbedError(f"image rm: no image matches {hash_prefix!r}")
        if len(victims) > 1:
            raise KvbedError(f"image rm: {hash_prefix!r} matches {len(victims)} images; give more of the hash")
    for i in victims:
        shutil.rmtree(i.path)
    return [i.hash for i in victims]


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def host_debian_mirror() -> str:
    """The host's own Debian mirror (CI may reach only that), else deb.debian.org."""
    for src in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in src.read_text(errors="replace").splitlines():
            if line.startswith("URIs:"):
                for uri in line.split()[1:]:
                    if "security" not in uri and "debian" in uri:
                        return uri
    for lst in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]:
        if lst.is_file():
            for line in lst.read_text(errors="replace").splitlines():
                m = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m and "security" not in m.group(1) and "debian" in m.group(1):
                    return m.group(1)
    return "http://deb.debian.org/debian"


def _missing_tools() -> list[str]:
    tools = ("mmdebstrap", "mkfs.ext4", "qemu-img", "cpio", "zstd", "xz", "gzip", "apt-get", "dpkg-deb")
    missing = [t for t in tools if shutil.which(t) is None]
    if not Path("/bin/busybox").exists():
        missing.append("busybox-static")
    return missing


def build(*, force: bool = False, log=None, kernel_deb: str | None = None) -> Image:
    """Build the image for the current recipe unless a complete one is cached."""
    h = recipe_hash()
    root = paths.images_dir()
    final = root / h
    with _lock(root / f".{h}.lock"):
        img = Image(h, final)
        if img.complete() and not force:
            return img
        missing = _missing_tools()
        if missing:
            raise KvbedError(f"image build needs {', '.join(missing)}: run scripts/setup_host.sh")
        if os.geteuid() != 0:
            raise KvbedError("image build needs root (mmdebstrap, chroot, root-owned files): run it with sudo "
                             "or as root, with XDG_CACHE_HOME/KVBED_CACHE_DIR pointing at your cache")
        tmp = temp_dir_for(final)
        env = dict(os.environ, OUT=str(tmp), RECIPE=str(paths.RECIPE_DIR), AGENT_SRC=str(paths.AGENT_DIR),
                   MIRROR=os.environ.get("KVBED_MIRROR") or host_debian_mirror())
        deb = kernel_deb or os.environ.get("KVBED_KERNEL_DEB")
        if deb:
            env["KERNEL_DEB"] = str(Path(deb).resolve())
        if _codename() != "bookworm":
            env["KERNEL_SUITE"] = ""  # newer Debian has a 6.12+ cloud kernel in its own suite
        t0 = time.monotonic()
        logf = tmp.parent / f".{h}.build.log"
        try:
            with open(logf, "w") as lf:
                proc = subprocess.Popen(["bash", str(paths.RECIPE_DIR / "build.sh")], env=env, stdout=lf,
                                        stderr=subprocess.PIPE, text=True)
                tail: list[str] = []
                for line in proc.stderr:
                    lf.write(line)
                    tail = (tail + [line.rstrip()])[-20:]
                    if log and line.startswith("image: "):
                        log(line.rstrip())
                rc = proc.wait()
            if rc != 0:
                last = next((t for t in reversed(tail) if t.strip()), "no output")
                raise KvbedError(f"image build failed (exit {rc}): {last} (full log: {logf})")
            write_json(tmp / "manifest.json", {
                "hash": h,
                "built_unix": int(time.time()),
                "build_s": round(time.monotonic() - t0, 1),
                "kernel_release": (tmp / "kernel-release.txt").read_text().strip(),
                "mirror": env["MIRROR"],
                "files": {f: (tmp / f).stat().st_size for f in IMAGE_FILES},
                "recipe": [name for name, _ in recipe_files()],
                "python": sys.version.split()[0],
            })
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return Image(h, final)


def ensure(log=None) -> Image:
    return find() or build(log=log)


def _codename() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return ""
