#!/usr/bin/env bash
# POSIX conformance with pjdfstest (https://github.com/pjd/pjdfstest), run
# on a tierfs mount as root, in parallel, as the project judges it.
#
#   bash scripts/pjdfstest.sh PJDFSTEST_SOURCE [-- tierfs mount options]
#
# PJDFSTEST_SOURCE is a checkout of pjdfstest, or a bare clone of it (it is not packaged for
# Debian, and CI has no GitHub: this runs on demand). Builds it, mounts
# fresh ssd/hdd directories under a temporary directory (default options:
# --io-mode userspace, so that every request reaches the daemon), runs the
# whole suite with prove -j2 from inside the mount, prints the failing
# tests, the total and what the mount moved meanwhile, and always
# unmounts. TIERFS_PJD_JOBS sets the jobs; CARGO the command that builds
# tierfs (e.g. a wrapper that serialises builds on a shared machine).
set -euo pipefail
src=${1:?usage: scripts/pjdfstest.sh PJDFSTEST_SOURCE [-- tierfs mount options]}
shift
[ "${1:-}" = "--" ] && shift
opts=("$@")
[ ${#opts[@]} -eq 0 ] && opts=(--io-mode userspace)
cd "$(dirname "$0")/.."
root=$(pwd)
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
need=()
for p in autoconf automake gcc make perl; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "pjdfstest: installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
${CARGO:-cargo} build --release -q
work=$(mktemp -d /tmp/tierfs-pjd-XXXXXX)
mnt="$work/mnt"
pid=""
cleanup() {
    if grep -q " $mnt fuse" /proc/mounts; then "$root/target/release/tierfs" umount "$mnt" || umount -l "$mnt" || true; fi
    if [ -n "$pid" ]; then wait "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
if [ -f "$src/configure.ac" ]; then
    cp -r "$src" "$work/pjdfstest"
else
    # A bare repository (as `git clone --mirror` makes): its HEAD.
    mkdir "$work/pjdfstest"
    git --git-dir="$src" archive HEAD | tar -x -C "$work/pjdfstest"
fi
(cd "$work/pjdfstest" && autoreconf -ifs >/dev/null 2>&1 && ./configure -q >/dev/null && make -s pjdfstest >/dev/null)
mkdir -p "$work/ssd" "$work/hdd" "$mnt"
"$root/target/release/tierfs" mount "$work/ssd" "$work/hdd" "$mnt" "${opts[@]}" 2>"$work/tierfs.log" &
pid=$!
for _ in $(seq 100); do grep -q " $mnt fuse" /proc/mounts && break; sleep 0.1; done
grep -q " $mnt fuse" /proc/mounts || { cat "$work/tierfs.log"; exit 1; }
start=$(date +%s)
set +e
(cd "$mnt" && prove -r -j"${TIERFS_PJD_JOBS:-2}" "$work/pjdfstest/tests") >"$work/prove.log" 2>&1
set -e
grep -E "^(Failed|Files=|Result)" "$work/prove.log" | head -5 || true
sed -n '/Test Summary Report/,$p' "$work/prove.log" | head -60
# What the mount moved meanwhile: a small SSD is meant to make files move
# (and chunks, and buffered writes) while the suite runs.
"$root/target/release/tierfs" stats "$mnt" 2>&1 | grep -E "^(policy:|sub-file extents:|write-back area:)" || true
echo "pjdfstest on tierfs (${opts[*]}) took $(( $(date +%s) - start )) s"
if grep -q "Result: PASS" "$work/prove.log"; then exit 0; fi
grep -iE "panicked|DEADLOCK|ERROR" "$work/tierfs.log" | head -20 || true
exit 1
