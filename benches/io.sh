#!/usr/bin/env bash
# Raw I/O benchmark of tierfs against the native directory and mergerfs.
#
# In one run, on the same backing directory, measures sequential 1 MiB read
# and write, random 4 KiB read and write (fio, psync, one job) and a
# create/stat/unlink loop, for:
#   native            the backing directory itself
#   tierfs-pt         tierfs, passthrough I/O mode
#   tierfs-us         tierfs, userspace I/O mode
#   tierfs-us-nostats tierfs, userspace I/O, statistics off (when supported)
#   mergerfs          mergerfs, cache.files=off (direct I/O, like tierfs-us)
# and prints each figure and its ratio to native. The page cache is warm
# for everyone: this measures the software path, not the device.
#
# Every setup is measured REPS times, interleaved (A B C A B C ...), and
# the median is reported, because these machines are noisy.
#
# Usage: bash benches/io.sh [WORKDIR]
#   env: SIZE=1G RUNTIME=10 META_N=20000 REPS=3 ONLY="native tierfs-us ..."
#        TIERFS_ARGS="--threads 4" (extra mount arguments for tierfs)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${1:-/tmp/tierfs-bench}
SIZE=${SIZE:-1G}
RUNTIME=${RUNTIME:-10}
META_N=${META_N:-20000}
ONLY=${ONLY:-}
REPS=${REPS:-3}
TIERFS_ARGS=${TIERFS_ARGS:-}
bash scripts/setup.sh >/dev/null
cargo build --release --bin tierfs --example metaloop -q
BIN=$ROOT/target/release/tierfs
META=$ROOT/target/release/examples/metaloop

mkdir -p "$WORK"
DATA=$WORK/data; SSD=$WORK/ssd; MNT=$WORK/mnt
cleanup() {
    for m in "$MNT"; do
        if mountpoint -q "$m" 2>/dev/null; then fusermount3 -u "$m" 2>/dev/null || umount -l "$m"; fi
    done
}
trap cleanup EXIT
cleanup
rm -rf "$DATA" "$SSD" "$MNT"
mkdir -p "$DATA" "$SSD" "$MNT"

fio_one() { # dir rw bs -> MB/s or IOPS
    local dir=$1 rw=$2 bs=$3 out
    local common=(--name=t --directory="$dir" --filename=bench.dat --ioengine=psync --numjobs=1 --invalidate=0 --group_reporting --output-format=json)
    case $rw in
        write) out=$(fio "${common[@]}" --rw=write --bs=$bs --size=$SIZE --end_fsync=1) ;;
        read) out=$(fio "${common[@]}" --rw=read --bs=$bs --size=$SIZE) ;;
        randread) out=$(fio "${common[@]}" --rw=randread --bs=$bs --size=256M --runtime=$RUNTIME --time_based) ;;
        randwrite) out=$(fio "${common[@]}" --rw=randwrite --bs=$bs --size=256M --runtime=$RUNTIME --time_based) ;;
    esac
    python3 -c '
import json,sys
j=json.loads(sys.stdin.read())["jobs"][0]
rw=sys.argv[1]
side=j["write"] if "write" in rw else j["read"]
print("%.0f" % (side["iops"] if rw.startswith("rand") else side["bw_bytes"]/1e6))' "$rw" <<<"$out"
}

measure() { # label dir
    local label=$1 dir=$2
    local sw sr rr rw meta
    sw=$(fio_one "$dir" write 1M)
    sr=$(fio_one "$dir" read 1M)
    rm -f "$dir/bench.dat"
    rr=$(fio_one "$dir" randread 4k)
    rw=$(fio_one "$dir" randwrite 4k)
    rm -f "$dir/bench.dat"
    meta=$("$META" "$dir/meta" "$META_N")
    rmdir "$dir/meta" 2>/dev/null || true
    echo "$label $sw $sr $rr $rw $meta" >>"$WORK/results.txt"
    echo "  $label: seq-write ${sw} MB/s, seq-read ${sr} MB/s, rand-read ${rr} IOPS, rand-write ${rw} IOPS, meta ${meta} ops/s" >&2
}

with_tierfs() { # label mount-args...
    local label=$1; shift
    # shellcheck disable=SC2086
    "$BIN" mount "$SSD" "$DATA" "$MNT" --daemon "$@" $TIERFS_ARGS
    measure "$label" "$MNT"
    "$BIN" umount "$MNT"
    rm -rf "$SSD"; mkdir -p "$SSD"
}

: >"$WORK/results.txt"
echo "machine: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/{print $2/1048576 " GiB"}' /proc/meminfo); fio $(fio --version); $(mergerfs --version 2>&1 | head -1); size=$SIZE runtime=${RUNTIME}s" >&2
echo "command: bash benches/io.sh $*" >&2
want() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }
for rep in $(seq 1 "$REPS"); do
    echo "round $rep of $REPS" >&2
    want native && measure native "$DATA"
    want tierfs-pt && with_tierfs tierfs-pt --io-mode passthrough
    want tierfs-us && with_tierfs tierfs-us --io-mode userspace
    if want tierfs-us-nostats && "$BIN" mount --help | grep -q -- '--no-stats'; then
        with_tierfs tierfs-us-nostats --io-mode userspace --no-stats
    fi
    if want mergerfs; then
        mergerfs -o cache.files=off,allow_other,category.create=ff "$DATA" "$MNT"
        measure mergerfs "$MNT"
        fusermount3 -u "$MNT"
    fi
done

python3 - "$WORK/results.txt" <<'PY'
import sys
import statistics
raw=[l.split() for l in open(sys.argv[1]) if l.strip()]
order=[]
by={}
for r in raw:
    if r[0] not in by:
        order.append(r[0]); by[r[0]]=[]
    by[r[0]].append([float(x) for x in r[1:]])
rows=[[n]+[statistics.median(col) for col in zip(*by[n])] for n in order]
names=["seq write MB/s","seq read MB/s","rand read IOPS","rand write IOPS","meta ops/s"]
base=next((r for r in rows if r[0]=="native"), None)
print("| setup | " + " | ".join(names) + " |")
print("|---|" + "---|"*len(names))
for r in rows:
    cells=[]
    for i,v in enumerate(r[1:]):
        v=float(v)
        ratio = " (%.2f)" % (v/float(base[i+1])) if base and float(base[i+1])>0 else ""
        cells.append("%.0f%s" % (v, ratio))
    print("| %s | %s |" % (r[0], " | ".join(cells)))
print("\n(median of %d runs; ratio to native in parentheses)" % len(by[order[0]]))
PY
