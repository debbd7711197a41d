"""A fake FEMU source tree for the build tests: a configure script that writes a Makefile building a stub
qemu-system-x86_64, and the files the build copies or patches (tests/meson.build, firmware)."""

from __future__ import annotations

from pathlib import Path

FAKE_CONFIGURE = """#!/bin/sh
# a stand-in for QEMU's configure: count runs, write a build.ninja that makes the "binary"
echo run >> "$(dirname "$0")/../configure-runs"
[ -f "$(dirname "$0")/FAIL" ] && { echo "ERROR: glib-2.0 not found" >&2; exit 1; }
cat > build.ninja <<'EOF'
rule mk
  command = printf '#!/bin/sh\\necho QEMU emulator version 10.1.0-fake\\n' > $out && chmod +x $out
build qemu-system-x86_64: mk
EOF
"""


def fake_femu_tree(root: Path) -> Path:
    (root / "hw" / "femu").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "tests" / "meson.build").write_text("if x\n  subdir('fp')\nendif\n")
    (root / "pc-bios").mkdir()
    (root / "pc-bios" / "qboot.rom").write_bytes(b"qboot")
    (root / "pc-bios" / "slof.bin").write_bytes(b"ppc")  # another arch's firmware: not copied
    (root / "configure").write_text(FAKE_CONFIGURE)
    (root / "configure").chmod(0o755)
    return root
