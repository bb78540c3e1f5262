#!/usr/bin/env bash
# Daemon memory with a million tracked files: seeds the statistics of N
# files into a fresh state directory, mounts tierfs on it, waits until the
# daemon has loaded them, and prints its resident memory (VmRSS, VmHWM)
# next to that of a daemon with no statistics, measured the same way.
#
# Usage: bash benches/stats_memory.sh [WORKDIR] (env: N=1000000)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-/tmp/tierfs-mem}
N=${N:-1000000}
bash scripts/setup.sh >/dev/null
cargo build --release -q --bin tierfs --example seed_stats
BIN=target/release/tierfs
cleanup() { mountpoint -q "$WORK/mnt" 2>/dev/null && "$BIN" umount "$WORK/mnt" || true; }
trap cleanup EXIT
measure() { # label files
    rm -rf "$WORK"; mkdir -p "$WORK"/{ssd,hdd,mnt,state}
    if [ "$2" -gt 0 ]; then target/release/examples/seed_stats "$WORK/state" "$2" >/dev/null; fi
    "$BIN" mount "$WORK/ssd" "$WORK/hdd" "$WORK/mnt" --state-dir "$WORK/state" --daemon
    until [ "$("$BIN" stats "$WORK/mnt" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["tracked_files"])')" = "$2" ]; do sleep 0.2; done
    local pid; pid=$(cat /run/tierfs/*.pid 2>/dev/null | while read -r p; do if grep -q "$WORK/mnt" /proc/$p/cmdline 2>/dev/null; then echo $p; fi; done | head -1)
    [ -n "$pid" ] || pid=$(pgrep -f "tierfs mount $WORK/ssd" | head -1)
    local rss hwm
    rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status); hwm=$(awk '/VmHWM/{print $2}' /proc/$pid/status)
    echo "$1: $2 tracked files, VmRSS $((rss / 1024)) MiB, VmHWM $((hwm / 1024)) MiB"
    "$BIN" umount "$WORK/mnt"
}
echo "machine: $(uname -srm), $(nproc) cores; command: bash benches/stats_memory.sh $*"
measure "empty" 0
measure "seeded" "$N"
