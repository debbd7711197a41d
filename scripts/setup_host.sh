#!/usr/bin/env bash
# Host packages for kvbed's VM testbed, on Debian 12 (bookworm) or newer.
#
# Debian 12's own QEMU (7.2) has no NVMe FDP, so QEMU 10 comes from bookworm-backports, which this
# script adds to apt's sources (same mirror as the system's) when it is missing. The guest image
# recipe (images/) needs mmdebstrap, busybox-static, e2fsprogs, cpio and zstd, plus apt access to
# bookworm-backports for the cloud kernel.
#
# Idempotent and fast when everything is present (no apt-get at all). Needs root or sudo.
# Used by `make host-setup` (and so `make test` and .ci/run) and by the Vagrantfile.
# KVBED_SETUP_DRY_RUN=1 prints what would be done and changes nothing.
#
# FEMU (`kvbed femu build`) is built from source: its build packages are added when `--femu` is given
# or when the vendored FEMU tarball (../shared/vendor/femu-*.tar.xz beside the repo) is present, so
# `make host-setup` on a fresh CI machine prepares the build that `make test` runs (once, then cached).
set -euo pipefail

FEMU=0
for a in "$@"; do
    case $a in
        --femu) FEMU=1 ;;
        *) echo "setup_host: error: unknown option $a (only --femu)" >&2; exit 1 ;;
    esac
done
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENDOR=${KVBED_VENDOR_DIR:-$REPO/../shared/vendor}
if compgen -G "$VENDOR/femu-*.tar.xz" >/dev/null; then FEMU=1; fi

QEMU_MIN_MAJOR=10
BACKPORTS_FILE=/etc/apt/sources.list.d/kvbed-bookworm-backports.sources
DRY=${KVBED_SETUP_DRY_RUN:-0}

log() { echo "setup_host: $*" >&2; }
die() { echo "setup_host: error: $*" >&2; exit 1; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "run as root or install sudo"
    SUDO=(sudo)
fi
run() {
    if [ "$DRY" = 1 ]; then echo "would run: $*"; else "${SUDO[@]}" "$@"; fi
}

[ -r /etc/os-release ] || die "/etc/os-release missing: only Debian 12+ is supported (use the Vagrantfile elsewhere)"
# shellcheck disable=SC1091
. /etc/os-release
[ "${ID:-}" = debian ] || [ "${ID_LIKE:-}" = debian ] || die "not Debian (ID=${ID:-?}): use the Vagrantfile"
CODENAME=${VERSION_CODENAME:-}
[ "$(dpkg --print-architecture)" = amd64 ] || die "only amd64 hosts are supported"

qemu_ok() {
    command -v qemu-system-x86_64 >/dev/null 2>&1 || return 1
    local major
    major=$(qemu-system-x86_64 --version | sed -n 's/^QEMU emulator version \([0-9]*\)\..*/\1/p')
    [ -n "$major" ] && [ "$major" -ge "$QEMU_MIN_MAJOR" ]
}

# command-or-file -> package providing it (stable suite)
declare -A TOOLS=(
    [qemu-img]=qemu-utils
    [mmdebstrap]=mmdebstrap
    [mkfs.ext4]=e2fsprogs
    [cpio]=cpio
    [zstd]=zstd
    [xz]=xz-utils
    [gzip]=gzip
    [apt-get]=apt
    [/usr/share/seabios/bios-256k.bin]=seabios
    [/usr/share/qemu/qboot.rom]=qemu-system-data
)
missing_pkgs() {
    local t
    qemu_ok || echo qemu-system-x86
    for t in "${!TOOLS[@]}"; do
        case $t in
            /*) [ -e "$t" ] || echo "${TOOLS[$t]}" ;;
            *) command -v "$t" >/dev/null 2>&1 || echo "${TOOLS[$t]}" ;;
        esac
    done
    # the static busybox goes into the guest's initramfs (the dynamic 'busybox' package would not run there)
    pkg_installed busybox-static || echo busybox-static
    if [ "$FEMU" = 1 ]; then femu_missing; fi
}

# FEMU's build (x86_64 system emulator only): compiler, ninja, flex/bison, and four libraries' headers
declare -A FEMU_TOOLS=([gcc]=gcc [make]=make [ninja]=ninja-build [flex]=flex [bison]=bison [pkg-config]=pkg-config)
declare -A FEMU_PC=([glib-2.0]=libglib2.0-dev [pixman-1]=libpixman-1-dev [slirp]=libslirp-dev)
femu_missing() {
    local t
    for t in "${!FEMU_TOOLS[@]}"; do command -v "$t" >/dev/null 2>&1 || echo "${FEMU_TOOLS[$t]}"; done
    for t in "${!FEMU_PC[@]}"; do
        if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists "$t"; then echo "${FEMU_PC[$t]}"; fi
    done
    [ -e /usr/include/libfdt.h ] || echo libfdt-dev  # Debian's libfdt-dev ships no .pc file
    python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || echo python3-venv
}
pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

backports_listed() {
    grep -rqsE '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null
}

debian_mirror() {
    # The system's own Debian mirror, so backports come from the same place (CI: Debian's mirror only).
    local uri
    uri=$(grep -rhsE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' \
        | grep -v -- '-security' | head -n1 || true)
    if [ -z "$uri" ]; then
        uri=$(grep -rhsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
            | awk '$3 !~ /security/ {for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' || true)
    fi
    echo "${uri:-http://deb.debian.org/debian}"
}

# Fast path: nothing to do, no apt calls.
readarray -t NEED < <(missing_pkgs | sort -u)
KERNEL_SUITE_OK=1
if [ "$CODENAME" = bookworm ] && ! backports_listed; then KERNEL_SUITE_OK=0; fi
if [ "${#NEED[@]}" -eq 0 ] && [ "$KERNEL_SUITE_OK" = 1 ]; then
    log "all host packages present ($(qemu-system-x86_64 --version | head -n1))"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
if [ "$CODENAME" = bookworm ] && ! backports_listed; then
    mirror=$(debian_mirror)
    log "adding bookworm-backports from $mirror to $BACKPORTS_FILE"
    if [ "$DRY" = 1 ]; then
        echo "would write $BACKPORTS_FILE"
    else
        printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$mirror" | "${SUDO[@]}" tee "$BACKPORTS_FILE" >/dev/null
    fi
fi

log "installing: ${NEED[*]:-(none; refreshing apt lists for bookworm-backports)}"
run apt-get update -qq
if [ "${#NEED[@]}" -gt 0 ]; then
    QEMU_PKGS=() OTHER=()
    for p in "${NEED[@]}"; do
        case $p in qemu-system-x86|qemu-utils|qemu-system-data) QEMU_PKGS+=("$p") ;; *) OTHER+=("$p") ;; esac
    done
    if [ "${#OTHER[@]}" -gt 0 ]; then
        run apt-get install -y -qq --no-install-recommends "${OTHER[@]}"
    fi
    if [ "${#QEMU_PKGS[@]}" -gt 0 ]; then
        # the three QEMU packages must come from the same suite
        QEMU_PKGS=(qemu-system-x86 qemu-utils qemu-system-data)
        if [ "$CODENAME" = bookworm ]; then
            run apt-get install -y -qq --no-install-recommends -t bookworm-backports "${QEMU_PKGS[@]}"
        else
            run apt-get install -y -qq --no-install-recommends "${QEMU_PKGS[@]}"
        fi
    fi
fi

if [ "$DRY" != 1 ]; then
    qemu_ok || die "QEMU >= $QEMU_MIN_MAJOR not available after install (got: $(qemu-system-x86_64 --version 2>&1 | head -n1))"
    left=$(missing_pkgs | sort -u | tr '\n' ' ')
    [ -z "$left" ] || die "still missing after install: $left"
    log "done ($(qemu-system-x86_64 --version | head -n1))"
fi
