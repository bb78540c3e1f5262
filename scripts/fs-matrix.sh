#!/usr/bin/env bash
# Real tiers: the integration suite with the SSD tier on an ext4, an xfs
# and a btrfs loop image, and the HDD tier a mergerfs pool of three ext4
# loop images (the common home setup: many disks pooled, one SSD in front).
# One combination at a time; prints a table of passed and failed tests per
# combination, and the failures. Exits non-zero if a test failed.
#
#   bash scripts/fs-matrix.sh [SSD file systems...]    # default: ext4 xfs btrfs
#   ALL=1 bash scripts/fs-matrix.sh ext4                 # also the tests a pool cannot pass
#   POOL_OPTS=... bash scripts/fs-matrix.sh ext4         # other mergerfs options
#
# The default pool options are the ones the book recommends (docs/src/capacity-tiers.md) for an HDD
# tier (a path-preserving create policy, no caching in mergerfs). The
# documented subset leaves out the 1-GiB extents test (too big for these
# images) and the tests that check what such a pool does not do, each
# named in SKIP below with its reason.
#
# Needs root (loop devices). Installs xfsprogs and btrfs-progs if missing.
# Everything it mounts is unmounted on exit, even on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
[ "$(id -u)" -eq 0 ] || { echo "fs-matrix: needs root for loop devices" >&2; exit 1; }
need=()
for p in xfsprogs btrfs-progs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "fs-matrix: installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
fss=("$@")
[ ${#fss[@]} -eq 0 ] && fss=(ext4 xfs btrfs)
work=$(mktemp -d /tmp/tierfs-matrix.XXXXXX)
# mergerfs reaches a branch by its whole path with the caller's
# credentials: other users (the multi-user tests) must get through.
chmod 755 "$work"
mounts=()
cleanup() {
    # Innermost first: the pool, then the images.
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
        m=${mounts[$i]}
        if mountpoint -q "$m"; then
            umount "$m" 2>/dev/null || fusermount3 -u "$m" 2>/dev/null || umount -l "$m" || true
        fi
    done
    for m in "${mounts[@]}"; do
        if mountpoint -q "$m"; then
            echo "fs-matrix: $m is still mounted; $work left in place" >&2
            return
        fi
    done
    rm -rf "$work"
}
trap cleanup EXIT
image() { # image NAME FS SIZE: a loop-mounted file system at $work/NAME
    local name=$1 fs=$2 size=$3
    truncate -s "$size" "$work/$name.img"
    chmod 600 "$work/$name.img"
    case $fs in
        ext4) mkfs.ext4 -q -F "$work/$name.img" ;;
        xfs) mkfs.xfs -q -f "$work/$name.img" ;;
        btrfs) mkfs.btrfs -q -f "$work/$name.img" >/dev/null ;;
        *) echo "fs-matrix: unknown file system $fs" >&2; exit 1 ;;
    esac
    mkdir -p "$work/$name"
    mount -o loop "$work/$name.img" "$work/$name"
    mounts+=("$work/$name")
    chmod 755 "$work/$name"
}
# The HDD pool: three disks behind mergerfs. POOL_OPTS replaces the
# default options (new files on the disk with the most free space, as
# home setups do; minfreespace because mergerfs's default, 4G, is more
# than these small disks have).
pool_opts=${POOL_OPTS:-category.create=epmfs,cache.files=off,cache.attr=0,cache.entry=0,cache.negative_entry=0,dropcacheonclose=true,minfreespace=64M}
# What a mergerfs pool does not do, so the tests of it are skipped:
SKIP=(
    # The whole file set is bigger than these 1-GiB disks.
    extents::
    # SEEK_DATA/SEEK_HOLE: the pool reports a sparse file as all data.
    posix::seek_data_and_hole
    # With cache.files=off mergerfs opens files for direct I/O, which
    # refuses shared writable mmap (ENODEV): the test of it, and the
    # passthrough torture runs, which mmap.
    posix::shared_writable_mmap_works
    torture::torture_dynamic_hot_dst_passthrough
    torture::torture_on_demand_cache_passthrough
)
# Known failures not understood yet: run apart, reported, and not counted
# in the exit status (a fix shows as "now passes").
EXPECTED=(
    # In passthrough mode an open fails with EIO on the pool, reproducibly
    # with the seed the test prints (docs/src/capacity-tiers.md, "Pooled disks").
    torture::torture_write_through_cache
)
[ -n "${ALL:-}" ] && SKIP=(extents::)
skip_args=()
for t in "${SKIP[@]}" "${EXPECTED[@]}"; do skip_args+=(--skip "$t"); done
for d in disk1 disk2 disk3; do image "$d" ext4 1G; done
mkdir -p "$work/pool"
mergerfs -o "allow_other,use_ino,fsname=tierfs-matrix-pool,$pool_opts" \
    "$work/disk1:$work/disk2:$work/disk3" "$work/pool"
mounts+=("$work/pool")
chmod 755 "$work/pool"
cargo build --features tierfs/lock-check --tests -q 2>/dev/null || cargo build --features tierfs/lock-check --tests
results=()
expected=()
any_failed=
for fs in "${fss[@]}"; do
    image "ssd-$fs" "$fs" 2G
    log="$work/$fs.log"
    echo "fs-matrix: SSD on $fs, HDD a mergerfs pool of 3 ext4 disks: running the integration suite"
    set +e
    TIERFS_TEST_SSD_ROOT="$work/ssd-$fs" TIERFS_TEST_HDD_ROOT="$work/pool" \
        cargo test -q --features tierfs/lock-check --test integration -- "${skip_args[@]}" ${FILTER:-} >"$log" 2>&1
    set -e
    summary=$(grep '^test result:' "$log" | tail -1 || true)
    passed=$(printf '%s' "$summary" | grep -o '[0-9]* passed' | cut -d' ' -f1 || true)
    failed=$(printf '%s' "$summary" | grep -o '[0-9]* failed' | cut -d' ' -f1 || true)
    results+=("| $fs | mergerfs pool of 3 × ext4 (\`$pool_opts\`) | ${passed:-?} | ${failed:-?} |")
    if [ "${failed:-1}" != 0 ]; then
        any_failed=1
        echo "fs-matrix: failures on $fs:"
        sed -n '/^failures:$/,$p' "$log" | grep -E '^    [a-z_]+::' | sed 's/^    /  /' || tail -20 "$log"
        cp "$log" "/tmp/tierfs-matrix-$fs.log"
        echo "fs-matrix: full log in /tmp/tierfs-matrix-$fs.log"
    fi
    if [ -z "${ALL:-}" ] && [ -z "${FILTER:-}" ]; then
        for t in "${EXPECTED[@]}"; do
            if TIERFS_TEST_SSD_ROOT="$work/ssd-$fs" TIERFS_TEST_HDD_ROOT="$work/pool" \
                cargo test -q --features tierfs/lock-check --test integration -- --exact "$t" >"$log.expected" 2>&1; then
                echo "fs-matrix: $t, a known failure, now passes on $fs: take it off EXPECTED"
                expected+=("$fs: $t passes")
            else
                expected+=("$fs: $t fails (known)")
            fi
        done
    fi
    umount "$work/ssd-$fs"
    unset 'mounts[${#mounts[@]}-1]'
    rm -f "$work/ssd-$fs.img"
done
echo
echo "| SSD tier | HDD tier | passed | failed |"
echo "|---|---|---|---|"
printf '%s\n' "${results[@]}"
echo "skipped: ${SKIP[*]}"
[ ${#expected[@]} -gt 0 ] && printf 'expected failure: %s\n' "${expected[@]}"
[ -z "$any_failed" ]
