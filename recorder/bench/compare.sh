#!/usr/bin/env bash
# Two builds of the recorder side by side, fake driver, this machine (recorder/BENCHMARKS.md,
# "Two builds compared"): hook_overhead.c and many_stacks.c under library A and library B,
# alternating, REPEATS times each, with VRAMTRACE_STACKS=none and native.
#   recorder/bench/compare.sh A.so B.so [REPEATS] [ROUNDS]
# Prints per configuration and call the median of the runs' medians and every run's median.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
a=$(realpath "${1:?usage: compare.sh A.so B.so [REPEATS] [ROUNDS]}")
b=$(realpath "${2:?usage: compare.sh A.so B.so [REPEATS] [ROUNDS]}")
repeats=${3:-7}
rounds=${4:-30}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o "$out/libcuda.so.1" \
    "$root/recorder/bench/nulldriver.c"
cc -O2 -fno-omit-frame-pointer -o "$out/hook_overhead" "$root/recorder/bench/hook_overhead.c" -ldl
python3 "$root/recorder/bench/many_stacks.py" >"$out/many_stacks.c"
cc -O2 -fno-omit-frame-pointer -o "$out/many_stacks" "$out/many_stacks.c" -ldl
depth=34
run() { # NAME LIBRARY STACKS
    local name=$1 lib=$2 stacks=$3
    env LD_LIBRARY_PATH="$out" LD_PRELOAD="$lib" VRAMTRACE_OUTPUT="$out/" \
        VRAMTRACE_STACKS="$stacks" "$out/hook_overhead" "$depth" "$rounds" | sed "s/^/$name /"
    env LD_LIBRARY_PATH="$out" LD_PRELOAD="$lib" VRAMTRACE_OUTPUT="$out/" \
        VRAMTRACE_STACKS="$stacks" "$out/many_stacks" 50 34 1000 | sed "s/^/$name /"
    rm -f "$out"/*.vramtrace
}
for r in $(seq "$repeats"); do
    for stacks in none native; do
        run "A-$stacks" "$a" "$stacks"
        run "B-$stacks" "$b" "$stacks"
    done
done > "$out/results"
python3 - "$out/results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    cfg, call, _, median, *_ = line.split()
    runs.setdefault((cfg, call), []).append(float(median))
print(f"{'config':9} {'call':6} {'median ns':>10}   runs")
for call in ("alloc", "free", "path"):
    for cfg in ("A-none", "B-none", "A-native", "B-native"):
        v = runs[(cfg, call)]
        print(f"{cfg:9} {call:6} {statistics.median(v):10.1f}   " + " ".join(f"{x:.0f}" for x in v))
PY
