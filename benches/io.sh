#!/usr/bin/env bash
# I/O and workload benchmark of tierfs against the native directory and
# mergerfs.
#
# In one run, on the same backing directory, measures for each setup
#   raw I/O    sequential 1 MiB write and read, random 4 KiB read and write
#              (fio, psync, one job), a create/stat/unlink loop, and stat of
#              1 000 existing files in turn (examples/metaloop.rs);
#   workloads  postmark (docs/src/evaluation.md's configuration: 40 000 files of 4-28 KB
#              in 10 directories, 80 000 transactions), `git clone` of a
#              local repository of GIT_FILES files and `git status` in the
#              clone (the second one: the first after a clone rereads files),
#              `tar x` of a tree of TAR_FILES files and `rm -rf` of it;
# for the setups
#   native             the backing directory itself
#   tierfs-pt          tierfs, passthrough I/O mode (the default mount: its
#                      requests come over FUSE-over-io_uring where the kernel
#                      offers it, which io.sh arranges for the run by setting
#                      the fuse module's enable_uring; URING=0 leaves it)
#   tierfs-pt-dev      the same over /dev/fuse (--io-uring never)
#   tierfs-pt-nostats  the same, statistics off
#   tierfs-pt-noheat   the same, statistics on without the eBPF heat source
#                      (--heat opens: each open counts as one access)
#   tierfs-us          tierfs, userspace I/O mode (over io_uring too)
#   tierfs-us-dev      the same over /dev/fuse (--io-uring never)
#   tierfs-us-nostats  the same, statistics off
#   mergerfs           mergerfs, cache.files=off (direct I/O, like tierfs-us)
#   mergerfs-default   mergerfs with its defaults (page cache, cache.files=libfuse)
# and, only when named in ONLY,
#   tierfs-pt-nolinger tierfs-pt without lingering (--linger 0: a request
#   tierfs-us-nolinger thread sleeps as soon as it has answered), and the same
#                      in userspace mode
# and libfuse's reference server passthrough_hp
# (benches/libfuse.sh builds it) with data through the daemon and direct I/O,
# to measure the transport:
#   libfuse-dev        over /dev/fuse (read and write system calls, as fuser)
#   libfuse-uring      over FUSE-over-io_uring (sets the fuse module's
#                      enable_uring for the run and puts it back)
# and prints each figure with its ratio to native, then every tierfs setup's
# ratios to both mergerfs setups (above 1: tierfs is better, also for the
# figures that are times), the cost of the statistics and that of the eBPF
# heat source. The page cache is
# warm for everyone: this measures the software path, not the device.
#
# Each setup's round starts on a fresh ext4 (a sparse image of IMG_SIZE,
# loop-mounted in WORKDIR): ext4's own state after many creates and
# deletes (its search past recently deleted inodes, pending discards) made
# the same create/stat/unlink loop run anywhere from 19 000 to 135 000
# operations/s natively on the long-lived root file system, and whoever ran
# after a delete-heavy figure paid for it. BACKING=dir measures in WORKDIR
# itself instead.
#
# tierfs's SSD directory is on a file system of its own (SSD_FS=own: a
# second image like the first, on the same host disk, so no faster), as in
# any real installation; the HDD directory is the one native and mergerfs
# use. SSD_FS=shared puts both tiers on the one image instead: then the
# fsyncs of every migration commit the journal the workload itself writes
# through, and postmark with the default policy (which promotes each file
# read from the HDD: some 3 500 of them) took 1.6 to 1.7 times as long as
# with the statistics off (nothing moves); with a file system per tier 1.3
# times (benches/results/io-2026-11-28-tiers.md).
#
# Every setup is measured REPS times, interleaved (A B C A B C ...), and
# the median is reported, because these machines are noisy.
#
# Usage: bash benches/io.sh [WORKDIR]
#   env: SIZE=1G RUNTIME=10 META_N=20000 STAT_N=200000 REPS=3
#        PM_FILES=40000 PM_TX=80000 GIT_FILES=20000 TAR_FILES=30000
#        ONLY="native tierfs-us ..." (setups)  TESTS="seq rand meta stat postmark git tar"
#        TIERFS_ARGS="--threads 4" (extra mount arguments for tierfs)
#        BACKING=loop|dir  IMG_SIZE=8G  SSD_FS=own|shared (with BACKING=loop)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${1:-/tmp/tierfs-bench}
SIZE=${SIZE:-1G}
RUNTIME=${RUNTIME:-10}
META_N=${META_N:-20000}
STAT_N=${STAT_N:-200000}
PM_FILES=${PM_FILES:-40000}
PM_TX=${PM_TX:-80000}
GIT_FILES=${GIT_FILES:-20000}
TAR_FILES=${TAR_FILES:-30000}
ONLY=${ONLY:-}
TESTS=${TESTS:-seq rand meta stat postmark git tar}
REPS=${REPS:-3}
TIERFS_ARGS=${TIERFS_ARGS:-}
BACKING=${BACKING:-loop}
IMG_SIZE=${IMG_SIZE:-8G}
SSD_FS=${SSD_FS:-own}
case $SSD_FS in own | shared) ;; *) echo "io.sh: SSD_FS is own or shared, not $SSD_FS" >&2; exit 2 ;; esac
case $BACKING in loop | dir) ;; *) echo "io.sh: BACKING is loop or dir, not $BACKING" >&2; exit 2 ;; esac
if [ "$BACKING" = loop ] && [ "$(id -u)" -ne 0 ]; then
    echo "io.sh: BACKING=loop mounts an ext4 image and needs root; BACKING=dir measures in WORKDIR" >&2
    exit 2
fi
bash scripts/setup.sh >/dev/null
cargo build --release --bin tierfs --example metaloop -q
BIN=$ROOT/target/release/tierfs
META=$ROOT/target/release/examples/metaloop

mkdir -p "$WORK"
FS=$WORK/fs; IMG=$WORK/backing.img; MNT=$WORK/mnt; INPUTS=$WORK/inputs
SSDFS=$WORK/ssdfs; SSDIMG=$WORK/ssd.img
if [ "$BACKING" = dir ]; then DATA=$WORK/data; SSD=$WORK/ssd
elif [ "$SSD_FS" = own ]; then DATA=$FS/data; SSD=$SSDFS/ssd
else DATA=$FS/data; SSD=$FS/ssd; fi
mounted() { grep -qs " $1 " /proc/self/mounts; } # also a dead FUSE mount
# Runs on every exit, also after a failure: nothing may stop it half-way.
cleanup() {
    set +e
    if [ -n "${URING_WAS:-}" ]; then echo "$URING_WAS" >/sys/module/fuse/parameters/enable_uring; URING_WAS=; fi
    if mounted "$MNT"; then fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT"; fi
    if [ -n "${HP_PID:-}" ]; then kill "$HP_PID" 2>/dev/null; wait "$HP_PID" 2>/dev/null; HP_PID=; fi
    # A daemon that was just unmounted may still hold the backing directories.
    local fs
    for fs in "$FS" "$SSDFS"; do
        if mounted "$fs"; then
            for _ in $(seq 50); do umount "$fs" 2>/dev/null && break; sleep 0.1; done
            if mounted "$fs"; then umount -l "$fs"; fi
        fi
    done
    rm -f "$IMG" "$SSDIMG"
    set -e
}
trap cleanup EXIT
cleanup
rm -rf "$WORK/data" "$WORK/ssd" "$MNT"
mkdir -p "$FS" "$SSDFS" "$MNT" "$INPUTS"
fresh_image() { # image mount-point
    if mounted "$2"; then umount "$2"; fi
    rm -f "$1"
    truncate -s "$IMG_SIZE" "$1"
    mkfs.ext4 -q -F "$1"
    mount -o loop "$1" "$2"
}
# The backing directories of one setup's round, on fresh file systems.
fresh_backing() {
    if [ "$BACKING" = loop ]; then
        fresh_image "$IMG" "$FS"
        if [ "$SSD_FS" = own ]; then fresh_image "$SSDIMG" "$SSDFS"; fi
    fi
    rm -rf "$DATA" "$SSD"
    mkdir -p "$DATA" "$SSD"
    sync
}
in_list() { [[ " $2 " == *" $1 "* ]]; } # word list
has() { in_list "$1" "$TESTS"; }

# The workloads' inputs, made once outside every setup: a git repository
# and a tarball of a source-like tree (files of 0-16 KB, 100 per directory).
make_tree() { # dir files
    python3 - "$1" "$2" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
for i in range(n):
    d = os.path.join(root, "src%02d" % (i // 2000), "mod%03d" % (i // 100))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%05d.c" % i), "wb") as f:
        f.write(bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 16384, 64))))
PY
}
if has git && [ ! -f "$INPUTS/repo-$GIT_FILES/.done" ]; then
    echo "making a git repository of $GIT_FILES files" >&2
    rm -rf "$INPUTS/repo-$GIT_FILES"
    make_tree "$INPUTS/repo-$GIT_FILES" "$GIT_FILES"
    (cd "$INPUTS/repo-$GIT_FILES" && git init -q && git add -A \
        && git -c user.name=bench -c user.email=bench@localhost commit -q -m tree && touch .done)
fi
if has tar && [ ! -f "$INPUTS/tree-$TAR_FILES.tar" ]; then
    echo "making a tarball of $TAR_FILES files" >&2
    rm -rf "$INPUTS/tree"
    make_tree "$INPUTS/tree" "$TAR_FILES"
    tar cf "$INPUTS/tree-$TAR_FILES.tar.tmp" -C "$INPUTS" tree
    mv "$INPUTS/tree-$TAR_FILES.tar.tmp" "$INPUTS/tree-$TAR_FILES.tar"
    rm -rf "$INPUTS/tree"
fi

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

seconds() { # command... -> wall seconds it took
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    python3 -c "print('%.3f' % ($t1 - $t0))"
}

postmark_run() { # dir
    mkdir -p "$1/pm"
    printf 'set location %s\nset number %s\nset transactions %s\nset size 4096 28672\nset read 4096\nset write 4096\nset subdirectories 10\nset seed 42\nset report terse\nrun\nquit\n' \
        "$1/pm" "$PM_FILES" "$PM_TX" | postmark >/dev/null
    rmdir "$1/pm"
}

# One round of one setup: appends "label figure value" lines. Each figure
# starts after a sync, so none pays for the writeback of the one before.
measure() { # label dir
    local label=$1 dir=$2 v line=""
    put() { echo "$label $1 $2" >>"$WORK/results.txt"; line+=" $1=$2"; }
    if has seq; then
        sync
        put seq-write "$(fio_one "$dir" write 1M)"
        put seq-read "$(fio_one "$dir" read 1M)"
        rm -f "$dir/bench.dat"
    fi
    if has rand; then
        sync
        put rand-read "$(fio_one "$dir" randread 4k)"
        put rand-write "$(fio_one "$dir" randwrite 4k)"
        rm -f "$dir/bench.dat"
    fi
    if has meta; then
        sync
        put meta "$("$META" "$dir/meta" "$META_N")"
        rmdir "$dir/meta"
    fi
    if has stat; then
        sync
        put stat "$("$META" "$dir/stat" "$STAT_N" stat)"
        rmdir "$dir/stat"
    fi
    if has postmark; then
        sync
        put postmark-s "$(seconds postmark_run "$dir")"
    fi
    if has git; then
        sync
        put git-clone-s "$(seconds git clone -q "file://$INPUTS/repo-$GIT_FILES" "$dir/repo")"
        # Right after a clone every index entry is "racily clean" (as new
        # as the index), so the first status reads the files' contents and
        # took 0.07 to 0.7 s natively; the one timed is the next, what a
        # user runs again and again (it stats every file). The first comes
        # a second after the clone, so that the index it writes is newer
        # than every file: else the files of the index's last second stay
        # racy, and how many there are (how much the timed status reads)
        # depended on how fast the clone was (0.016 to 0.2 s natively).
        sleep 1.1
        git -C "$dir/repo" status --porcelain >/dev/null
        put git-status-s "$(seconds git -C "$dir/repo" status --porcelain)"
        rm -rf "$dir/repo"
    fi
    if has tar; then
        sync
        put tar-x-s "$(seconds tar xf "$INPUTS/tree-$TAR_FILES.tar" -C "$dir")"
        put rm-rf-s "$(seconds rm -rf "$dir/tree")"
    fi
    v=$(ls -A "$dir" | grep -v '^\.tierfs$' || true)
    [ -z "$v" ] || { echo "io.sh: $label left files behind: $v" >&2; exit 1; }
    echo "  $label:$line" >&2
}

with_tierfs() { # label mount-args...
    local label=$1; shift
    # shellcheck disable=SC2086
    "$BIN" mount "$SSD" "$DATA" "$MNT" --daemon "$@" $TIERFS_ARGS
    measure "$label" "$MNT"
    "$BIN" umount "$MNT"
}

# passthrough_hp runs in the foreground so its pid is ours; fusermount3 -u
# ends it. Its transport is checked both ways by its threads (fuse-ring-N
# run io_uring queues), or a fallback to /dev/fuse, or libfuse's own
# FUSE_URING_ENABLE, would mislabel the figure.
with_libfuse() { # label uring(0|1)
    local opts=() rings
    if [ "$2" = 1 ]; then opts=(-o io_uring); fi
    env -u FUSE_URING_ENABLE "$HP" --foreground --nopassthrough --direct-io "${opts[@]}" "$DATA" "$MNT" >"$WORK/hp.log" 2>&1 &
    HP_PID=$!
    for _ in $(seq 100); do
        mountpoint -q "$MNT" && break
        kill -0 "$HP_PID" 2>/dev/null || break
        sleep 0.1
    done
    mountpoint -q "$MNT" || { echo "io.sh: passthrough_hp did not mount:" >&2; cat "$WORK/hp.log" >&2; exit 1; }
    rings=$(cat /proc/"$HP_PID"/task/*/comm | grep -c '^fuse-ring' || true)
    if [ "$2" = 1 ] && [ "$rings" -eq 0 ]; then
        echo "io.sh: $1 has no io_uring threads; libfuse fell back to /dev/fuse" >&2; cat "$WORK/hp.log" >&2; exit 1
    fi
    if [ "$2" = 0 ] && [ "$rings" -ne 0 ]; then
        echo "io.sh: $1 runs io_uring threads, not /dev/fuse" >&2; exit 1
    fi
    measure "$1" "$MNT"
    fusermount3 -u "$MNT"
    wait "$HP_PID"
    HP_PID=
}

with_mergerfs() { # label options
    mergerfs -o "$2" "$DATA" "$MNT"
    measure "$1" "$MNT"
    fusermount3 -u "$MNT"
}

: >"$WORK/results.txt"
echo "machine: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/{print $2/1048576 " GiB"}' /proc/meminfo); fio $(fio --version); $(mergerfs --version 2>&1 | head -1); $(git --version); tierfs $("$BIN" --version)" >&2
echo "command: bash benches/io.sh $* (SIZE=$SIZE RUNTIME=$RUNTIME META_N=$META_N STAT_N=$STAT_N PM_FILES=$PM_FILES PM_TX=$PM_TX GIT_FILES=$GIT_FILES TAR_FILES=$TAR_FILES REPS=$REPS TESTS=\"$TESTS\" ONLY=\"$ONLY\" TIERFS_ARGS=\"$TIERFS_ARGS\" BACKING=$BACKING IMG_SIZE=$IMG_SIZE SSD_FS=$SSD_FS URING=${URING:-1})" >&2
named() { in_list "$1" "$ONLY"; }
want() { [ -z "$ONLY" ] || named "$1"; }
if named libfuse-dev || named libfuse-uring; then
    HP=$(bash benches/libfuse.sh)
    echo "reference: libfuse 3.18.3 passthrough_hp --nopassthrough --direct-io" >&2
fi
URING_PARAM=/sys/module/fuse/parameters/enable_uring
if { [ "${URING:-1}" = 1 ] || named libfuse-uring; } && [ -w "$URING_PARAM" ]; then
    URING_WAS=$(cat "$URING_PARAM")
    echo 1 >"$URING_PARAM"
fi
echo "fuse enable_uring: $(cat "$URING_PARAM" 2>/dev/null || echo absent)" >&2
for rep in $(seq 1 "$REPS"); do
    echo "round $rep of $REPS" >&2
    if want native; then fresh_backing; measure native "$DATA"; fi
    if want tierfs-pt; then fresh_backing; with_tierfs tierfs-pt --io-mode passthrough; fi
    if want tierfs-pt-dev; then fresh_backing; with_tierfs tierfs-pt-dev --io-mode passthrough --io-uring never; fi
    if want tierfs-pt-nostats; then fresh_backing; with_tierfs tierfs-pt-nostats --io-mode passthrough --no-stats; fi
    if want tierfs-pt-noheat; then fresh_backing; with_tierfs tierfs-pt-noheat --io-mode passthrough --heat opens; fi
    if named tierfs-pt-nolinger; then fresh_backing; with_tierfs tierfs-pt-nolinger --io-mode passthrough --linger 0; fi
    if want tierfs-us; then fresh_backing; with_tierfs tierfs-us --io-mode userspace; fi
    if want tierfs-us-dev; then fresh_backing; with_tierfs tierfs-us-dev --io-mode userspace --io-uring never; fi
    if want tierfs-us-nostats; then fresh_backing; with_tierfs tierfs-us-nostats --io-mode userspace --no-stats; fi
    if named tierfs-us-nolinger; then fresh_backing; with_tierfs tierfs-us-nolinger --io-mode userspace --linger 0; fi
    if want mergerfs; then fresh_backing; with_mergerfs mergerfs cache.files=off,allow_other,category.create=ff; fi
    if want mergerfs-default; then fresh_backing; with_mergerfs mergerfs-default allow_other,category.create=ff; fi
    if named libfuse-dev; then fresh_backing; with_libfuse libfuse-dev 0; fi
    if named libfuse-uring; then fresh_backing; with_libfuse libfuse-uring 1; fi
done

python3 - "$WORK/results.txt" <<'PY'
import sys, statistics
by, setups, figures = {}, [], []
for line in open(sys.argv[1]):
    label, fig, v = line.split()
    if label not in setups: setups.append(label)
    if fig not in figures: figures.append(fig)
    by.setdefault((label, fig), []).append(float(v))
med = {k: statistics.median(v) for k, v in by.items()}
def better(a, b, fig):  # how many times better a is than b
    x, y = med.get((a, fig)), med.get((b, fig))
    if x is None or y is None or x <= 0 or y <= 0: return None
    return y / x if fig.endswith("-s") else x / y
def table(title, rows, cell):
    print("\n" + title + "\n")
    print("| setup | " + " | ".join(figures) + " |")
    print("|---|" + "---|" * len(figures))
    for r in rows:
        print("| %s | %s |" % (r, " | ".join(cell(r, f) for f in figures)))
def fmt(x): return "–" if x is None else "%.2f" % x
def value(r, f):
    v = med.get((r, f))
    if v is None: return "–"
    s = ("%.2f" % v) if f.endswith("-s") else ("%.0f" % v)
    return s + ("" if "native" not in setups else " (%s)" % fmt(better(r, "native", f)))
n = len(by[next(iter(by))])
table("Medians of %d rounds (MB/s, IOPS, operations/s; -s: seconds). In parentheses: how many times better than native (above 1: faster)." % n, setups, value)
tierfs = [s for s in setups if s.startswith("tierfs")]
for base in ("mergerfs", "mergerfs-default"):
    if base in setups and tierfs:
        table("tierfs against %s (above 1: tierfs is faster)" % base, tierfs, lambda r, f: fmt(better(r, base, f)))
def paired(a, b, fig):  # the median over rounds of a / b within one round
    xs, ys = by.get((a, fig), []), by.get((b, fig), [])
    rs = [y / x if fig.endswith("-s") else x / y for x, y in zip(xs, ys) if x > 0 and y > 0]
    return statistics.median(rs) if rs and len(xs) == len(ys) else None
pairs = [(s, s + "-nostats") for s in tierfs if s + "-nostats" in setups]
if pairs:
    table("Cost of the statistics: with / without (1.00: none; 0.95: 5 % slower)", [a for a, _ in pairs], lambda r, f: fmt(better(r, r + "-nostats", f)))
    table("The same, round by round: the median of the rounds' with / without (each round measures both, one after the other, so a host that drifts between rounds moves both)", [a for a, _ in pairs], lambda r, f: fmt(paired(r, r + "-nostats", f)))
if "tierfs-pt" in setups and "tierfs-pt-noheat" in setups:
    table("Cost of the eBPF heat source: tierfs-pt / tierfs-pt-noheat (1.00: none; 0.97: 3 % slower)", ["tierfs-pt"], lambda r, f: fmt(better(r, "tierfs-pt-noheat", f)))
    table("The same, round by round (the median of the rounds' ratios)", ["tierfs-pt"], lambda r, f: fmt(paired(r, "tierfs-pt-noheat", f)))
ring_rows = [s for s in ("tierfs-pt", "tierfs-us") if s in setups and s + "-dev" in setups]
if ring_rows:
    table("What FUSE-over-io_uring brings tierfs: tierfs-X / tierfs-X-dev (above 1: io_uring is faster)", ring_rows, lambda r, f: fmt(better(r, r + "-dev", f)))
if "libfuse-dev" in setups and "libfuse-uring" in setups:
    table("What FUSE-over-io_uring brings the same server: libfuse-uring / libfuse-dev (above 1: io_uring is faster)", ["libfuse-uring"], lambda r, f: fmt(better(r, "libfuse-dev", f)))
PY
