#!/usr/bin/env bash
# Compares two vramtrace binaries' JSON output, byte for byte, on every bundled trace and on any
# further traces (or job directories) given: `tune --json`, `replay --policy greedy-by-size --json`,
# `replay --policy pytorch --json` and `summary --json` (the last two read the backward passes'
# names as every command does).
#
#     bash analyzer/benches/same_output.sh OLD_BIN NEW_BIN [TRACE...]
#
# Prints one line per difference and the count of comparisons; exits 1 on any difference.
set -u
old=$1 new=$2
shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
compared=0 differ=0
for t in $(find "$root/samples/traces" -name '*.vramtrace' | sort) "$@"; do
    for cmd in "tune --json" "replay --policy greedy-by-size --json" \
        "replay --policy pytorch --json" "summary --json"; do
        "$old" $cmd "$t" >"$tmp/old" 2>"$tmp/old.err"; a=$?
        "$new" $cmd "$t" >"$tmp/new" 2>"$tmp/new.err"; b=$?
        compared=$((compared + 1))
        if [ $a != $b ] || ! cmp -s "$tmp/old" "$tmp/new" || ! cmp -s "$tmp/old.err" "$tmp/new.err"; then
            echo "differ: $cmd $t (exit $a, $b)"
            differ=$((differ + 1))
        fi
    done
done
echo "$compared comparisons, $differ differ"
[ $differ = 0 ]
