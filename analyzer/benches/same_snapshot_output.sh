#!/usr/bin/env bash
# Compares two vramtrace binaries' output on PyTorch memory snapshots, byte for byte: the trace
# `import` writes and the page `report` writes (its index.html), on every bundled snapshot of
# samples/snapshots/ and on any further snapshots given.
#
#     bash analyzer/benches/same_snapshot_output.sh OLD_BIN NEW_BIN [SNAPSHOT...]
#
# Prints one line per difference and the count of comparisons; exits 1 on any difference.
set -u
old=$1 new=$2
shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
compared=0 differ=0
for s in "$root"/samples/snapshots/*.pickle "$@"; do
    for b in old new; do
        bin=${!b}
        # One output name for both, as `import` prints it.
        (cd "$tmp" && mkdir $b && cd $b && "$bin" import "$s" -o out.vramtrace >import.txt 2>&1 \
            && "$bin" report "$s" -o page >/dev/null 2>&1)
    done
    compared=$((compared + 1))
    if ! cmp -s "$tmp/old/out.vramtrace" "$tmp/new/out.vramtrace" \
        || ! cmp -s "$tmp/old/import.txt" "$tmp/new/import.txt" \
        || ! cmp -s "$tmp/old/page/index.html" "$tmp/new/page/index.html"; then
        echo "differ: $s"
        differ=$((differ + 1))
    fi
    rm -rf "$tmp/old" "$tmp/new"
done
echo "$compared snapshots compared, $differ differ"
[ $differ = 0 ]
