#!/usr/bin/env bash
# Builds tierfs and installs it for system use: /usr/local/bin/tierfs and
# the mount helper /usr/sbin/mount.fuse.tierfs, so that
#   mount -t fuse.tierfs /ssd:/hdd /mnt/tier -o policy=on-demand-cache
# and /etc/fstab lines of type fuse.tierfs work.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --bin tierfs
install -m 0755 target/release/tierfs /usr/local/bin/tierfs
ln -sf /usr/local/bin/tierfs /usr/sbin/mount.fuse.tierfs
echo "installed /usr/local/bin/tierfs and /usr/sbin/mount.fuse.tierfs"
