#!/usr/bin/env bash
# Build the kvbed guest image into $OUT (an empty directory). Called by `kvbed image build`
# (testbed/vm/image.py), which picks the cache directory from the recipe hash and renames $OUT
# into place only when this script succeeds.
#
# Produces: vmlinux (the PVH ELF from Debian's cloud kernel, which QEMU boots directly without
# running the decompressor), initrd.img (busybox + virtio_blk.ko), root.qcow2 (mmdebstrap root with
# the agent as kvbed_agent), kernel-release.txt, packages.lst.
#
# Inputs (environment): OUT, RECIPE (this directory), AGENT_SRC (kvreplay/agent), MIRROR (Debian
# mirror URI), SUITE (bookworm), KERNEL_SUITE (bookworm-backports, or "" for the default suite),
# KERNEL_DEB (optional: a linux-image-*-cloud-amd64 .deb to use instead of downloading), ROOT_SIZE.
set -euo pipefail
: "${OUT:?}" "${RECIPE:?}" "${AGENT_SRC:?}"
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SUITE=${SUITE:-bookworm}
KERNEL_SUITE=${KERNEL_SUITE-bookworm-backports}
ROOT_SIZE=${ROOT_SIZE:-1G}

step() { echo "image: $* ($(date +%T))" >&2; }
W=$OUT/work
mkdir -p "$W"
trap 'rm -rf "$W"' EXIT

# --- kernel ---------------------------------------------------------------------------------
step "kernel"
if [ -n "${KERNEL_DEB:-}" ]; then
    cp "$KERNEL_DEB" "$W/"
else
    meta=linux-image-cloud-amd64${KERNEL_SUITE:+/$KERNEL_SUITE}
    pkg=$(apt-cache show "$meta" 2>/dev/null | awk '/^Depends:/ {print $2; exit}')
    [ -n "$pkg" ] || { echo "image: apt knows no $meta (run scripts/setup_host.sh to add bookworm-backports)" >&2; exit 1; }
    (cd "$W" && apt-get download ${KERNEL_SUITE:+-t "$KERNEL_SUITE"} "$pkg" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
fi
deb=$(ls "$W"/linux-image-*.deb 2>/dev/null | head -n1)
[ -n "$deb" ] || { echo "image: kernel package download failed" >&2; exit 1; }
dpkg-deb -x "$deb" "$W/kernel"
KREL=$(ls "$W/kernel/lib/modules" | head -n1)
echo "$KREL" > "$OUT/kernel-release.txt"
python3 - "$W/kernel/boot/vmlinuz-$KREL" "$W/payload" <<'PY'
# bzImage -> its compressed payload (boot protocol: setup_sects @0x1f1, payload_offset/length @0x248;
# the payload ends with the 4-byte decompressed size the kernel build appends)
import struct, sys
d = open(sys.argv[1], "rb").read()
setup = (d[0x1F1] or 4) + 1
off, length = struct.unpack_from("<II", d, 0x248)
start = setup * 512 + off
open(sys.argv[2], "wb").write(d[start:start + length - 4])
PY
case $(head -c4 "$W/payload" | od -An -tx1 | tr -d ' ') in
    28b52ffd) zstd -q -d -c "$W/payload" > "$OUT/vmlinux" ;;
    fd377a58) xz -d -c "$W/payload" > "$OUT/vmlinux" ;;
    1f8b*) gzip -d -c "$W/payload" > "$OUT/vmlinux" ;;
    *) echo "image: unknown kernel payload compression" >&2; exit 1 ;;
esac
[ "$(head -c4 "$OUT/vmlinux" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] || { echo "image: kernel payload is not an ELF" >&2; exit 1; }

# --- initramfs --------------------------------------------------------------------------------
step "initramfs"
I=$W/initramfs
mkdir -p "$I"/{bin,dev,proc,sys,newroot,lib}
cp /bin/busybox "$I/bin/busybox"
vb=$(find "$W/kernel/lib/modules/$KREL" -name 'virtio_blk.ko*' | head -n1)
case $vb in
    *.xz) xz -d -c "$vb" > "$I/lib/virtio_blk.ko" ;;
    *.zst) zstd -q -d -c "$vb" > "$I/lib/virtio_blk.ko" ;;
    *.gz) gzip -d -c "$vb" > "$I/lib/virtio_blk.ko" ;;
    *) cp "$vb" "$I/lib/virtio_blk.ko" ;;
esac
install -m 0755 "$RECIPE/initramfs-init" "$I/init"
(cd "$I" && find . | LC_ALL=C sort | cpio -o -H newc --quiet --reproducible | gzip -n -6 > "$OUT/initrd.img")

# --- root filesystem ------------------------------------------------------------------------------
step "root filesystem (mmdebstrap $SUITE from $MIRROR)"
include=$(grep -v -e '^#' -e '^\s*$' "$RECIPE/packages.txt" | paste -sd, -)
mkdir -p "$W/agent"
cp "$AGENT_SRC"/*.py "$W/agent/"
R=$W/root
mmdebstrap --quiet --variant=essential --include="$include" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook="mkdir -p \"\$1/lib/modules\" && cp -a '$W/kernel/lib/modules/$KREL' \"\$1/lib/modules/\"" \
    --customize-hook="chroot \"\$1\" depmod -a '$KREL'" \
    --customize-hook="mkdir -p \"\$1/usr/lib/python3/dist-packages/kvbed_agent\" && cp '$W'/agent/*.py \"\$1/usr/lib/python3/dist-packages/kvbed_agent/\"" \
    --customize-hook="chroot \"\$1\" python3 -m compileall -q /usr/lib/python3/dist-packages/kvbed_agent" \
    --customize-hook="install -m 0755 '$RECIPE/init' \"\$1/sbin/kvbed-init\"" \
    --customize-hook="echo kvbed > \"\$1/etc/hostname\"" \
    --customize-hook="chroot \"\$1\" dpkg-query -W -f='\${Package} \${Version}\n' > '$OUT/packages.lst'" \
    "$SUITE" "$R" "$MIRROR"

step "ext4 + qcow2"
mkfs.ext4 -q -F -L kvbedroot -E root_owner=0:0 -d "$R" "$W/root.img" "$ROOT_SIZE"
qemu-img convert -q -O qcow2 "$W/root.img" "$OUT/root.qcow2"
step "done"
