#!/usr/bin/env bash
# The db workload under hystor on the modelled devices (`tierfs bench
# devices`), a passthrough mount (the kernel serves the requests, the eBPF
# heat source counts them) against a userspace mount (the daemon serves and
# counts them), interleaved: the heat issue's throughput comparison, which
# --emulate cannot make (passthrough bypasses the daemon's emulated stores;
# the modelled devices sit under the kernel, below both paths).
#
# Each run: mount, prepare the tables and run the workload with the device
# models paused (the warm-up that places the chunks), wait until the chunks
# settle (nothing queued, the same chunks over three 2-s periods), drop the
# page cache, reset and resume the models, then the measured run of
# DURATION on the same tables with another seed.
#
# Usage: bash benches/heat-devices.sh [TIERFS] (root). Environment: ROUNDS
# (3), SCALE (0.02), WARMUP (20s), DURATION (20s), DIR
# (/tmp/tierfs-devices-heat). Prints each run and the ratio of medians.
set -euo pipefail
BIN=${1:-target/release/tierfs}
BIN=$(readlink -f "$BIN")
ROUNDS=${ROUNDS:-3}
SCALE=${SCALE:-0.02}
WARMUP=${WARMUP:-20s}
DURATION=${DURATION:-20s}
DIR=${DIR:-/tmp/tierfs-devices-heat}
[ "$(id -u)" -eq 0 ] || { echo "heat-devices: needs root (loop devices, passthrough)" >&2; exit 1; }

MNT=$DIR/tierfs-mnt
cleanup() {
    if mountpoint -q "$MNT" 2>/dev/null; then "$BIN" umount "$MNT" >/dev/null 2>&1 || fusermount3 -uz "$MNT" || true; fi
    "$BIN" bench devices down --dir "$DIR" >/dev/null 2>&1 || true
}
trap cleanup EXIT
"$BIN" bench devices down --dir "$DIR" >/dev/null 2>&1 || true
"$BIN" bench devices up --dir "$DIR" >/dev/null
mkdir -p "$MNT"

settled() {
    python3 -c '
import json, subprocess, sys, time
bin, mnt = sys.argv[1], sys.argv[2]
last, same = None, 0
for _ in range(60):
    r = json.loads(subprocess.check_output([bin, "stats", mnt, "--json"]))["remap"]
    now = (r.get("used_bytes", 0), r.get("added", 0) + r.get("dropped", 0))
    same = same + 1 if now == last and r.get("queued") == 0 else 0
    last = now
    if same >= 3:
        print(r.get("used_bytes", 0)); sys.exit(0)
    time.sleep(2)
sys.exit("the chunks did not settle in 120 s")
' "$BIN" "$MNT"
}

ops() { python3 -c 'import json,sys; print(json.load(sys.stdin)["ops_per_sec"])'; }

run() { # mode round
    local mode=$1 r=$2 sub="$1-$2"
    mkdir -p "$DIR/ssd/$sub" "$DIR/hdd/$sub" "$DIR/state-$sub"
    for d in ssd hdd; do "$BIN" bench devices model --dir "$DIR" "$d" pause >/dev/null; done
    "$BIN" mount "$DIR/ssd/$sub" "$DIR/hdd/$sub" "$MNT" --daemon --io-mode "$mode" --policy hystor \
        --chunk-period 2s --migrate-rate 0 --state-dir "$DIR/state-$sub" --ssd-capacity "${CAP:-1T}" >/dev/null
    "$BIN" bench workload db "$MNT/w" --scale "$SCALE" --seed 42 --duration "$WARMUP" --json >/dev/null
    local used
    used=$(settled)
    sync
    echo 3 >/proc/sys/vm/drop_caches
    for d in ssd hdd; do "$BIN" bench devices model --dir "$DIR" "$d" reset >/dev/null; "$BIN" bench devices model --dir "$DIR" "$d" resume >/dev/null; done
    local rate
    rate=$("$BIN" bench workload db "$MNT/w" --scale "$SCALE" --seed $((43 + r)) --duration "$DURATION" --no-prepare --json | ops)
    "$BIN" umount "$MNT" >/dev/null
    rm -rf "${DIR:?}/ssd/$sub" "${DIR:?}/hdd/$sub" "${DIR:?}/state-$sub"
    echo "$mode round $r: $rate ops/s (chunks on the SSD: $used bytes)" >&2
    echo "$mode $rate"
}

# The SSD's capacity: a tenth of the tables, measured on a first preparation.
for d in ssd hdd; do "$BIN" bench devices model --dir "$DIR" "$d" pause >/dev/null; done
mkdir -p "$DIR/hdd/size"
"$BIN" bench workload db "$DIR/hdd/size/w" --scale "$SCALE" --seed 42 --ops-per-file 1 --json >/dev/null
TABLES=$(du -sb "$DIR/hdd/size/w" | cut -f1)
rm -rf "${DIR:?}/hdd/size"
CAP=$((TABLES / 10))
echo "heat-devices: db at scale $SCALE, tables $TABLES bytes, SSD capacity $CAP bytes, $ROUNDS rounds, warm-up $WARMUP, measured $DURATION" >&2

results=()
for r in $(seq 1 "$ROUNDS"); do
    for mode in userspace passthrough; do
        results+=("$(CAP=$CAP run "$mode" "$r")")
    done
done
printf '%s\n' "${results[@]}" | python3 -c '
import statistics, sys
by = {}
for line in sys.stdin:
    mode, rate = line.split()
    by.setdefault(mode, []).append(float(rate))
u, p = by["userspace"], by["passthrough"]
us, pt = statistics.median(u), statistics.median(p)
print("userspace: median %.1f ops/s of %s" % (us, ", ".join("%.1f" % x for x in u)))
print("passthrough (eBPF heat): median %.1f ops/s of %s" % (pt, ", ".join("%.1f" % x for x in p)))
print("passthrough / userspace: %.2f (per round: %s)" % (pt / us, ", ".join("%.2f" % (b / a) for a, b in zip(u, p))))
'
