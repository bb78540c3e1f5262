#!/usr/bin/env bash
# Builds tierfs and installs it for system use: /usr/local/bin/tierfs,
# shell completions, the manual page, and the mount helper
# /usr/sbin/mount.fuse.tierfs, so that
#   mount -t fuse.tierfs /ssd:/hdd /mnt/tier -o policy=on-demand-cache
# and /etc/fstab lines of type fuse.tierfs work.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --bin tierfs
install -m 0755 target/release/tierfs /usr/local/bin/tierfs
ln -sf /usr/local/bin/tierfs /usr/sbin/mount.fuse.tierfs
# Completions and the manual page, generated from the command's own
# definitions.
share=/usr/local/share
install -d "$share/bash-completion/completions" "$share/zsh/site-functions" \
    "$share/fish/vendor_completions.d" "$share/man/man1"
target/release/tierfs completions bash >"$share/bash-completion/completions/tierfs"
target/release/tierfs completions zsh >"$share/zsh/site-functions/_tierfs"
target/release/tierfs completions fish >"$share/fish/vendor_completions.d/tierfs.fish"
target/release/tierfs manpage >"$share/man/man1/tierfs.1"
echo "installed /usr/local/bin/tierfs, /usr/sbin/mount.fuse.tierfs, completions for bash, zsh and fish, and tierfs(1)"
