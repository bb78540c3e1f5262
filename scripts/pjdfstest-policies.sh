#!/usr/bin/env bash
# pjdfstest under every policy, in both I/O modes, each run on a fresh
# mount with a small SSD: 256 KiB under --ssd-capacity, moves unpaced and a
# 1-s interval, so that files move, cached copies are made and dropped,
# chunks are made (hystor) and writes are buffered (write-back-cache,
# hystor with a 30 % area) while the suite runs. pjdfstest switches
# between users itself: the runs are multi-user runs too.
#
#   bash scripts/pjdfstest-policies.sh PJDFSTEST_SOURCE [REPORT]
#   POLICIES="hystor write-back-cache" MODES=userspace bash scripts/pjdfstest-policies.sh SRC
#   RUN_WITH="flock /tmp/build.lock" bash scripts/pjdfstest-policies.sh SRC  # each run under a lock
#
# Each run is scripts/pjdfstest.sh (see there for PJDFSTEST_SOURCE); its
# whole output goes to a log next to REPORT (default
# results/pjdfstest/runs.md), and REPORT gets the command, the machine and
# one line per run: files, tests, failures, time. Exits non-zero if a run
# failed. About 2 minutes a run on 2 cores, 26 runs.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: scripts/pjdfstest-policies.sh PJDFSTEST_SOURCE [REPORT]}
report=${2:-results/pjdfstest/runs.md}
# Every policy (tierfs_core::policy::PolicyKind::ALL).
policies=(${POLICIES:-dynamic-hot-dst interval-hot-dst plain-cold-dst dynamic-cold-dst dynamic-cold-dst-bg
    on-demand-cache interval-cache hdd-only ssd-only hystor write-through-cache write-back-cache measured})
modes=(${MODES:-userspace passthrough})
small=(--ssd-capacity 256K --migrate-rate 0 --interval 1s)
logs=$(dirname "$report")/logs
mkdir -p "$logs"
{
    echo "# pjdfstest under every policy, small SSD"
    echo
    echo "\`bash scripts/pjdfstest-policies.sh $src\` on commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates src || echo ' (with uncommitted changes)'),"
    echo "$(uname -sr) $(uname -m), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo),"
    echo "pjdfstest $(git --git-dir="$src" rev-parse --short HEAD 2>/dev/null || git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '(not a git tree)'), started $(date -u '+%Y-%m-%d %H:%M UTC')."
    echo "Every run: \`scripts/pjdfstest.sh SRC -- --io-mode MODE --policy POLICY ${small[*]} [EXTRA]\`,"
    echo "as root, \`prove -r -j2\` inside the mount; EXTRA for hystor: \`--sieve 8K --chunk 4K --chunk-period 200ms --write-back 30\`."
    echo "Whole outputs in \`logs/\`."
    echo
    echo "| policy | I/O mode | files | tests | failed | result | seconds |"
    echo "|---|---|---|---|---|---|---|"
} >"$report"
failed=0
for policy in "${policies[@]}"; do
    extra=()
    [ "$policy" = hystor ] && extra=(--sieve 8K --chunk 4K --chunk-period 200ms --write-back 30)
    for mode in "${modes[@]}"; do
        log="$logs/$policy-$mode.log"
        start=$(date +%s)
        status=0
        ${RUN_WITH:-} bash scripts/pjdfstest.sh "$src" -- --io-mode "$mode" --policy "$policy" "${small[@]}" "${extra[@]}" \
            >"$log" 2>&1 || status=$?
        secs=$(($(date +%s) - start))
        line=$(grep -m1 -E '^Files=' "$log" || true)
        files=$(sed -n 's/^Files=\([0-9]*\),.*/\1/p' <<<"$line")
        tests=$(sed -n 's/.* Tests=\([0-9]*\),.*/\1/p' <<<"$line")
        # The summary's "(Wstat: ... Tests: N Failed: F)" of each test file.
        fails=$(grep -oE 'Failed: [0-9]+\)' "$log" | tr -dc '0-9\n' | awk '{s += $1} END {print s + 0}')
        result=$(grep -m1 -oE '^Result: [A-Z]+' "$log" | cut -d' ' -f2 || true)
        [ "$status" -eq 0 ] && [ "$result" = PASS ] || failed=$((failed + 1))
        echo "| $policy | $mode | ${files:-?} | ${tests:-?} | $fails | ${result:-none (exit $status)} | $secs |" >>"$report"
        echo "pjdfstest: $policy $mode: ${result:-none (exit $status)}, $fails failed, $secs s"
    done
done
echo >>"$report"
echo "Runs that did not pass: $failed." >>"$report"
echo "pjdfstest: report in $report; $failed runs did not pass"
[ "$failed" -eq 0 ]
