#!/usr/bin/env bash
# Compares two vramtrace binaries' output, byte for byte, on every bundled trace and on any
# further traces (or job directories) given: `tune --json`, `replay --policy greedy-by-size
# --json`, `replay --policy pytorch --json`, the views that read the allocation table
# (`summary` as text and JSON, `diff` of each trace with the first, both exports) and the
# report: its page and `--svg` charts replaying `pytorch`, its page with the default policies,
# and the page of each trace compared with the first. The report, the one command that reads
# PyTorch snapshots, also runs on every bundled snapshot (`samples/snapshots/`).
#
#     bash analyzer/benches/same_output.sh OLD_BIN NEW_BIN [TRACE...]
#
# `COMMANDS="summary;summary --json"` compares those commands only. A command's `OUT` is replaced by a fresh path per binary, whose contents are compared with
# the output. Prints one line per difference and the count of comparisons; exits 1 on any
# difference.
set -u
old=$1 new=$2
shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
traces=$(find "$root/samples/traces" -name '*.vramtrace' | sort)
first=$(echo "$traces" | head -1)
all="tune --json;replay --policy greedy-by-size --json;replay --policy pytorch --json"
all+=";summary;summary --json;diff $first"
all+=";diff --json $first;export --to perfetto -o OUT;export --to pytorch-snapshot -o OUT"
all+=";report --policy pytorch --svg -o OUT;report -o OUT"
all+=";report --policy pytorch --compare $first -o OUT"
snapshots=$(find "$root/samples/snapshots" -name '*.pickle' | sort)
IFS=';' read -ra commands <<<"${COMMANDS:-$all}"
compared=0 differ=0
run() { # BIN DIR CMD TRACE: the command's stdout, stderr, exit status and OUT in DIR
    rm -rf "$2" && mkdir -p "$2"
    # shellcheck disable=SC2086
    "$1" ${3//OUT/$2/out} "$4" >"$2/stdout" 2>"$2/stderr"
    echo $? >"$2/status"
    sed -i "s#$2#DIR#g" "$2/stdout" "$2/stderr"
}
for t in $traces "$@" $snapshots; do
    for cmd in "${commands[@]}"; do
        case "$t:$cmd" in *.pickle:report*) ;; *.pickle:*) continue ;; esac
        run "$old" "$tmp/old" "$cmd" "$t"
        run "$new" "$tmp/new" "$cmd" "$t"
        compared=$((compared + 1))
        if ! diff -r "$tmp/old" "$tmp/new" >/dev/null; then
            echo "differ: $cmd $t"
            differ=$((differ + 1))
        fi
    done
done
echo "$compared comparisons, $differ differ"
[ $differ = 0 ]
