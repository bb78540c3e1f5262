#!/usr/bin/env bash
# Installs what tierfs needs, builds it, and runs the demo: two fresh
# directories under ./tierfs-demo mounted as one, files written and read
# through the mount, their tiers shown, then unmounted.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --bin tierfs
exec target/release/tierfs demo --dir "${1:-tierfs-demo}"
