#!/usr/bin/env bash
# tierfs in front of a disk that already holds many files, against the
# native directory and mergerfs (its defaults), in one run.
#
# Builds DIRS x FILES empty files plus one directory `big` of BIG entries
# directly in the HDD directory, then measures, warm page cache for all:
#   - `ls -f big` the first time (for tierfs: adopting it), the second time,
#     and `ls -l big`;
#   - `find -type f | wc -l` of the whole tree (for tierfs: adopting all of it);
#   - for tierfs: the daemon's resident memory after each step, its peak
#     (VmHWM) and at rest (30 s after the last listing), the state
#     database's size on disk (allocated bytes, per file), and after a
#     remount the time until the mount answers and the first `ls -f big`,
#     with the memory after listing everything again.
# Prints each figure and tierfs's ratio to mergerfs.
#
# Usage: bash benches/scale.sh [WORKDIR]
#   env: DIRS=100 FILES=1000 BIG=100000 (10^6 files: DIRS=1000)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-/tmp/tierfs-scale}
DIRS=${DIRS:-100}
FILES=${FILES:-1000}
BIG=${BIG:-100000}
bash scripts/setup.sh >/dev/null
cargo build --release --bin tierfs -q
BIN=$(pwd)/target/release/tierfs
SSD=$WORK/ssd; HDD=$WORK/hdd; MNT=$WORK/mnt
daemon=""
cleanup() {
    if mountpoint -q "$MNT" 2>/dev/null; then
        "$BIN" umount "$MNT" 2>/dev/null || fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT"
    fi
}
trap cleanup EXIT
cleanup
rm -rf "$WORK"
mkdir -p "$SSD" "$HDD/big" "$MNT"
total=$((DIRS * FILES + BIG))
echo "machine: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/{print int($2/1048576) " GiB"}' /proc/meminfo); $(mergerfs --version 2>&1 | head -1); $("$BIN" --version)"
echo "command: DIRS=$DIRS FILES=$FILES BIG=$BIG bash benches/scale.sh $*"
echo "tree: $DIRS directories x $FILES files + big/ with $BIG entries = $total files"
python3 - "$HDD" "$DIRS" "$FILES" "$BIG" <<'EOF'
import os, sys
hdd, dirs, files, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def make(d, n, prefix):
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        os.close(os.open(f"{d}/{prefix}{i:07d}.dat", os.O_CREAT | os.O_WRONLY, 0o644))
make(f"{hdd}/big", big, "entry-")
for d in range(dirs):
    make(f"{hdd}/d{d:04d}", files, "file-")
EOF
sync

secs() { # command... -> seconds, output discarded
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l | xargs printf "%.3f"
}
lsf() { ls -f "$1" | wc -l; }
lsl() { ls -l "$1" | wc -l; }
count() { find "$1" -type f | wc -l; }
mib() { awk -v f="$2" '$1==f":" {print int($2/1024)}' "/proc/$1/status"; }
mem() { echo "VmRSS $(mib "$daemon" VmRSS) MiB"; }

declare -A R
measure() { # label dir
    R[$1.first]=$(secs lsf "$2/big")
    R[$1.second]=$(secs lsf "$2/big")
    R[$1.lsl]=$(secs lsl "$2/big")
    R[$1.find]=$(secs count "$2")
    local n; n=$(count "$2")
    [ "$n" -eq "$total" ] || { echo "$1: found $n files, not $total" >&2; exit 1; }
}

measure native "$HDD"
echo "native: ls -f big ${R[native.first]} s, again ${R[native.second]} s, ls -l ${R[native.lsl]} s, find ${R[native.find]} s"

mergerfs -o allow_other "$HDD" "$MNT"
measure mergerfs "$MNT"
mpid=$(pgrep -nf "mergerfs -o allow_other $HDD" || true)
mrss=$( [ -n "$mpid" ] && mib "$mpid" VmHWM || echo "?")
fusermount3 -u "$MNT"
echo "mergerfs: ls -f big ${R[mergerfs.first]} s, again ${R[mergerfs.second]} s, ls -l ${R[mergerfs.lsl]} s, find ${R[mergerfs.find]} s, peak memory $mrss MiB"

"$BIN" mount "$SSD" "$HDD" "$MNT" --daemon
daemon=$(pgrep -nf "tierfs mount $SSD $HDD")
R[tierfs.first]=$(secs lsf "$MNT/big"); m1=$(mem)
R[tierfs.second]=$(secs lsf "$MNT/big")
R[tierfs.lsl]=$(secs lsl "$MNT/big"); m2=$(mem)
R[tierfs.find]=$(secs count "$MNT"); m3=$(mem)
n=$(count "$MNT"); [ "$n" -eq "$total" ] || { echo "tierfs: found $n files, not $total" >&2; exit 1; }
sleep 30 # at rest: the engine has flushed the statistics and trimmed the heap
rest=$(mib "$daemon" VmRSS); peak=$(mib "$daemon" VmHWM)
echo "tierfs: ls -f big ${R[tierfs.first]} s ($m1), again ${R[tierfs.second]} s, ls -l ${R[tierfs.lsl]} s ($m2), find ${R[tierfs.find]} s ($m3)"
echo "tierfs: memory at rest ${rest} MiB, peak ${peak} MiB"
"$BIN" umount "$MNT"
state=$(du -sk "$SSD/.tierfs/state" | cut -f1)
echo "tierfs: state database $((state / 1024)) MiB on disk, $((state * 1024 / total)) bytes per file"

t0=$(date +%s.%N)
"$BIN" mount "$SSD" "$HDD" "$MNT" --daemon
until ls "$MNT" >/dev/null 2>&1; do sleep 0.05; done
ready=$(echo "$(date +%s.%N) - $t0" | bc -l | xargs printf "%.3f")
daemon=$(pgrep -nf "tierfs mount $SSD $HDD")
again=$(secs lsf "$MNT/big")
refind=$(secs count "$MNT")
sleep 30
echo "tierfs after a remount: ready in $ready s, ls -f big $again s, find $refind s; memory at rest $(mib "$daemon" VmRSS) MiB, peak $(mib "$daemon" VmHWM) MiB"
"$BIN" umount "$MNT"

ratio() { echo "${R[tierfs.$1]} / ${R[mergerfs.$1]}" | bc -l | xargs printf "%.2f"; }
echo
echo "| | native | mergerfs | tierfs | tierfs / mergerfs |"
echo "|---|---|---|---|---|"
for k in first second lsl find; do
    case $k in
        first) what="\`ls -f\` of the $BIG-entry directory, first time" ;;
        second) what="the same, second time" ;;
        lsl) what="\`ls -l\` of that directory" ;;
        find) what="\`find\` of all $total files" ;;
    esac
    echo "| $what | ${R[native.$k]} s | ${R[mergerfs.$k]} s | ${R[tierfs.$k]} s | $(ratio "$k") |"
done
echo "| daemon memory, peak / at rest | | $mrss MiB peak | $peak / $rest MiB | |"
echo "| state database | | | $((state * 1024 / total)) bytes per file | |"
echo "| remount: ready / first \`ls -f\` of big | | | $ready s / $again s | |"
