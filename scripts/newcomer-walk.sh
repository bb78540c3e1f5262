#!/usr/bin/env bash
# A newcomer's walk, as a test: the README's two commands, then every `sh`
# block of the book's "Getting started" page (docs/src/getting-started.md),
# in order, in one shell, against a real mount in a temporary HOME. The
# blocks are read from the page itself, so the page and the test cannot
# drift apart.
#
#   bash scripts/newcomer-walk.sh [TIERFS]
#
# TIERFS is a built binary (default target/debug/tierfs): the README's
# `bash scripts/demo.sh` is run as what it does, `scripts/setup.sh` and
# then `tierfs demo`, with that binary instead of a release build of its
# own. NEWCOMER_CLONE=1 runs it literally instead, in a fresh clone of this
# repository's HEAD (a release build: many minutes). The README's other
# command, `bash scripts/test.sh`, is the suite this walk is part of.
# Needs root (as the README's commands do). Every mount it makes is
# unmounted on the way out, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
bin=$(realpath "${1:-target/debug/tierfs}")
[ -x "$bin" ] || { echo "newcomer-walk: no tierfs binary at $bin (build it first)" >&2; exit 1; }

# Under /tmp/tierfs-test-* so that scripts/test.sh also clears a mount an
# interrupted walk left.
tmp=$(mktemp -d /tmp/tierfs-test-walk.XXXXXX)
cleanup() {
    awk -v t="$tmp/" 'index($5, t) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
        echo "newcomer-walk: unmounting $m" >&2
        fusermount3 -u "$m" 2>/dev/null || umount -l "$m" || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

# The command block of a Markdown heading's section: its lines, comments
# dropped.
block_after() {
    awk -v h="$2" '
        $0 == h { inside = 1; next }
        inside && /^## / { exit }
        inside && /^```/ { if (code) exit; code = 1; next }
        code { sub(/[ \t]*#.*/, ""); if ($0 != "") print }
    ' "$1"
}

echo "== README: the two commands"
commands=$(block_after README.md "## Two commands")
[ -n "$commands" ] || { echo "newcomer-walk: README.md has no command block under '## Two commands'" >&2; exit 1; }
while read -r cmd; do
    case "$cmd" in
    "bash scripts/demo.sh")
        if [ "${NEWCOMER_CLONE:-0}" = 1 ]; then
            git clone -q "$repo" "$tmp/clone"
            (cd "$tmp/clone" && bash scripts/demo.sh "$tmp/demo")
        else
            grep -q '^exec target/release/tierfs demo ' scripts/demo.sh ||
                { echo "newcomer-walk: scripts/demo.sh no longer ends in tierfs demo; update this walk" >&2; exit 1; }
            bash scripts/setup.sh
            "$bin" demo --dir "$tmp/demo"
        fi
        ;;
    "bash scripts/test.sh")
        echo "(scripts/test.sh: the suite this walk runs in)"
        ;;
    *)
        echo "newcomer-walk: the README's command '$cmd' is not one this walk knows how to run" >&2
        exit 1
        ;;
    esac
done <<<"$commands"

echo "== Getting started"
page=docs/src/getting-started.md
walk=$tmp/getting-started.sh
awk '
    /^```sh[ \t]*$/ { code = 1; n++; print "echo \"-- block " n "\""; next }
    code && /^```/ { code = 0; next }
    code { print }
' "$page" >"$walk"
blocks=$(grep -c '^```sh[[:space:]]*$' "$page" || true)
[ "$blocks" -ge 3 ] || { echo "newcomer-walk: $page has $blocks sh blocks; expected the walk's" >&2; exit 1; }
mkdir -p "$tmp/home" "$tmp/bin"
ln -s "$bin" "$tmp/bin/tierfs"
(cd "$tmp/home" && HOME="$tmp/home" PATH="$tmp/bin:$PATH" bash -euxo pipefail "$walk")

# The page unmounts what it mounted.
left=$(awk -v t="$tmp/" 'index($5, t) == 1 {print $5}' /proc/self/mountinfo)
if [ -n "$left" ]; then
    echo "newcomer-walk: $page left mounted: $left" >&2
    exit 1
fi
echo "newcomer-walk: the README's commands and $blocks blocks of $page passed"
