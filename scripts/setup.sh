#!/usr/bin/env bash
# Installs what tierfs needs on a fresh Debian (bookworm) machine, as root:
# FUSE 3 (fusermount3, mount.fuse3), build tools, and the tools the tests and
# benchmarks drive (attr for getfattr/setfattr, fio, postmark, mergerfs and
# rsync for the mover of its tiered-cache recipe,
# prometheus for promtool and a server that scrapes a mount), clang,
# which compiles the eBPF heat source (crates/tierfs-heat), python3, which
# the doc link check and some benchmark scripts run, and mdBook,
# which builds the book under docs/ (not packaged in bookworm: from
# crates.io).
# Safe to run again: it only installs what is missing.
set -euo pipefail

packages=(fuse3 libfuse3-dev pkg-config attr e2fsprogs fio postmark mergerfs rsync util-linux procps prometheus curl clang python3)
missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup: need root to install: ${missing[*]}" >&2
        exit 1
    fi
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "setup: installing the Rust toolchain with rustup"
        apt-get install -y -qq --no-install-recommends curl ca-certificates build-essential >/dev/null
        curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
fi
if ! command -v mdbook >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/mdbook" ]; then
    echo "setup: installing mdbook from crates.io"
    cargo install mdbook --locked --no-default-features --version 0.4.52
fi
# FUSE needs the device and, for allow_other as non-root, this line.
[ -e /dev/fuse ] || { echo "setup: /dev/fuse is missing; load the fuse module (modprobe fuse)" >&2; exit 1; }
if [ -f /etc/fuse.conf ] && ! grep -q '^user_allow_other' /etc/fuse.conf; then
    echo user_allow_other >>/etc/fuse.conf
fi
