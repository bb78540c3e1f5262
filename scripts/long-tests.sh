#!/usr/bin/env bash
# The long versions of the hardening tests, on demand (CI runs the short
# ones through scripts/test.sh):
#   - the torture test, TIERFS_TORTURE_SECS seconds of operations per
#     configuration (default 180: 17 configurations, 51 minutes in all);
#   - the kill -9 loop of issue 16, TIERFS_KILL_ROUNDS rounds per policy
#     (default 20: 7 policies, 140 rounds);
#   - the quiet HDD on a loop device, TIERFS_QUIET_SECS seconds of
#     SSD-side activity that must leave the HDD's disk untouched (default
#     600: the issue's ten minutes).
# The daemon is built with deadlock detection. Prints each test's result
# and the total time; a failure names its seed (TIERFS_TORTURE_SEED) and
# the file with every operation. Then the scale benchmark at 10^5 files
# (benches/scale.sh: adopting a tree, listing, memory, the state database;
# TIERFS_SCALE=0 skips it). With PJDFSTEST_SOURCE set (a pjdfstest checkout
# or bare clone: CI has no GitHub), then pjdfstest under every policy and
# both I/O modes on a small SSD (scripts/pjdfstest-policies.sh, about an
# hour; its report in results/pjdfstest/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
export TIERFS_TORTURE_SECS="${TIERFS_TORTURE_SECS:-180}"
export TIERFS_KILL_ROUNDS="${TIERFS_KILL_ROUNDS:-20}"
export TIERFS_QUIET_SECS="${TIERFS_QUIET_SECS:-600}"
start=$(date +%s)
echo "torture: $TIERFS_TORTURE_SECS s per configuration; kill loop: $TIERFS_KILL_ROUNDS rounds per policy; quiet HDD: $TIERFS_QUIET_SECS s"
log="$(mktemp /tmp/tierfs-long-XXXXXX.log)"
status=0
cargo test --features tierfs/lock-check --test integration -- torture:: killloop:: quiet:: \
    --nocapture "$@" >"$log" 2>&1 || status=$?
grep -E "^test |operations by|kill -9 rounds|quiet HDD:|panicked|rerun with|every operation|^test result" "$log" || true
if [ "$status" -ne 0 ]; then
    echo "long tests FAILED (exit $status); whole output in $log"
    exit "$status"
fi
rm -f "$log"
if [ "${TIERFS_SCALE:-1}" != 0 ]; then
    DIRS=100 FILES=1000 BIG=100000 bash benches/scale.sh
fi
if [ -n "${PJDFSTEST_SOURCE:-}" ]; then
    bash scripts/pjdfstest-policies.sh "$PJDFSTEST_SOURCE"
fi
echo "long tests passed in $(( $(date +%s) - start )) s"
