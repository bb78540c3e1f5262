#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit and property tests, and the
# integration tests that mount real FUSE file systems (needs root for the
# multi-user tests and passthrough). `.ci/run` runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
# Leftovers of an earlier, interrupted run would make mounts fail.
awk '$5 ~ /^\/tmp\/tierfs-test-/ {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
    fusermount3 -u "$m" 2>/dev/null || umount -l "$m" || true
done
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The daemon the integration tests mount is built with deadlock detection.
cargo test --workspace --all-targets --features tierfs/lock-check
# A real Prometheus server scrapes a mount's --metrics endpoint.
bash scripts/prometheus.sh target/debug/tierfs
# The HDD tier on a single-node GlusterFS volume: the integration suite's
# documented subset and an unreachable server (about five minutes).
bash scripts/gluster.sh
