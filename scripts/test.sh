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
# No merge left its conflict markers in a tracked file.
if git grep -n -E '^(<<<<<<<|>>>>>>>) ' -- . ':!vendor'; then
    echo "test.sh: conflict markers above" >&2
    exit 1
fi
cargo clippy --workspace --all-targets -- -D warnings
# The book builds, and no relative link of it or of the README is broken.
mdbook build docs
bash scripts/check-doc-links.sh
# The patched fuser's own unit tests (vendor/fuser/TIERFS.md).
cargo test --manifest-path vendor/fuser/Cargo.toml --target-dir target/fuser --lib
# FUSE over io_uring (Linux 6.14+) is offered to new mounts only while the
# fuse module's enable_uring is set: on for the tests, so that the mounts
# take their requests over the rings (tests/integration/uring.rs checks
# that they do); put back afterwards. The GlusterFS suite below runs over
# /dev/fuse.
URING=/sys/module/fuse/parameters/enable_uring
URING_WAS=
if [ -w "$URING" ]; then
    URING_WAS=$(cat "$URING")
    trap 'echo "$URING_WAS" >"$URING"' EXIT
    echo 1 >"$URING"
    export TIERFS_TEST_URING=1
fi
# The daemon the integration tests mount is built with deadlock detection.
cargo test --workspace --all-targets --features tierfs/lock-check
if [ -n "$URING_WAS" ]; then echo "$URING_WAS" >"$URING"; fi
unset TIERFS_TEST_URING
# A newcomer's walk: the README's commands, then every command block of
# the book's "Getting started" in order, on a real mount.
bash scripts/newcomer-walk.sh target/debug/tierfs
# A real Prometheus server scrapes a mount's --metrics endpoint.
bash scripts/prometheus.sh target/debug/tierfs
# The HDD tier on a single-node GlusterFS volume: the integration suite's
# documented subset and an unreachable server (about five minutes).
bash scripts/gluster.sh
