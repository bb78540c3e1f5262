#!/usr/bin/env bash
# Builds libfuse's own high-performance example server, passthrough_hp, from
# the Debian source of libfuse 3.18.3 (the first release line with
# FUSE-over-io_uring), and prints the path of the binary.
#
# benches/io.sh uses it as a reference for the transport: the same server
# measured once over /dev/fuse (read and write system calls, like fuser
# and so tierfs) and once over io_uring (FUSE_IO_URING_CMD_*), so the
# difference is what io_uring would bring a FUSE daemon on this machine.
#
# The tarball is checked against the SHA-256 of Debian's Sources index.
# Needs meson, ninja, liburing-dev, libnuma-dev and a C++ compiler; installs what is
# missing (as root). The build lives in WORKDIR (default /tmp/tierfs-libfuse)
# and is reused when it is already there.
#
# Usage: bash benches/libfuse.sh [WORKDIR]
set -euo pipefail
VERSION=3.18.3
SHA256=bcd19582c5e30f7fe45dd86a5540e998590aa01903afc7ebcbeea6c8ac5421ee
URL=http://deb.debian.org/debian/pool/main/f/fuse3/fuse3_$VERSION.orig.tar.gz
WORK=${1:-/tmp/tierfs-libfuse}
BIN=$WORK/fuse-$VERSION/build/example/passthrough_hp
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi

missing=()
for p in meson ninja-build liburing-dev libnuma-dev g++ pkg-config; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || { echo "libfuse.sh: need root to install: ${missing[*]}" >&2; exit 1; }
    echo "libfuse.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mkdir -p "$WORK"
tarball=$WORK/fuse3_$VERSION.orig.tar.gz
if [ ! -f "$tarball" ]; then
    curl -sSf -m 300 -o "$tarball.tmp" "$URL"
    mv "$tarball.tmp" "$tarball"
fi
echo "$SHA256  $tarball" | sha256sum -c --quiet - \
    || { echo "libfuse.sh: $tarball does not have the expected SHA-256" >&2; rm -f "$tarball"; exit 1; }
rm -rf "$WORK/fuse-$VERSION"
tar xzf "$tarball" -C "$WORK"
cd "$WORK/fuse-$VERSION"
# Only the library and the examples; io_uring must be found, or the
# comparison is meaningless.
meson setup build -Dbuildtype=release -Dutils=false -Dtests=false \
    -Denable-io-uring=true >"$WORK/meson.log" 2>&1 \
    || { cat "$WORK/meson.log" >&2; exit 1; }
grep -q "^#define HAVE_URING" build/fuse_config.h \
    || { echo "libfuse.sh: meson did not enable io_uring (liburing or libnuma missing?); see $WORK/meson.log" >&2; exit 1; }
ninja -C build example/passthrough_hp >"$WORK/ninja.log" 2>&1 \
    || { tail -30 "$WORK/ninja.log" >&2; exit 1; }
echo "$BIN"
