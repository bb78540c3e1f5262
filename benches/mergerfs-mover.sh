#!/usr/bin/env bash
# The mover of mergerfs's "tiered cache" recipe (man mergerfs, "percentage
# full expiring"): while the cache branch is fuller than PERCENT, move the
# file with the oldest access time from the cache branch (the branch itself,
# not the pool) to the base pool, with the rsync flags the recipe gives.
# The recipe measures the cache file system's use with df; here the cache
# is a byte budget on a bigger file system (the sweep's SSD sizes, as
# tierfs's --ssd-capacity), so its use is the bytes of the files on the
# branch. `tierfs bench sweep --devices` runs it every few seconds (the
# recipe: from cron) for its "mergerfs-cache" runs; each moved file is
# printed as "moved PATH".
#
# Usage: mergerfs-mover.sh CACHE_BRANCH BASE_POOL CAPACITY_BYTES PERCENT
set -euo pipefail
if [ $# != 4 ]; then
    echo "usage: $0 CACHE_BRANCH BASE_POOL CAPACITY_BYTES PERCENT" >&2
    exit 2
fi
CACHE=$1
BASE=$2
CAPACITY=$3
PERCENT=$4
used() { find "$CACHE" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%d\n", s }'; }
while [ $(($(used) * 100)) -gt $((CAPACITY * PERCENT)) ]; do
    FILE=$(find "$CACHE" -type f -printf '%A@ %P\n' | sort | head -n 1 | cut -d' ' -f2-)
    test -n "$FILE"
    rsync -axqHAXWESR --preallocate --remove-source-files "$CACHE/./$FILE" "$BASE/"
    echo "moved $FILE"
done
