#!/usr/bin/env bash
# Hook overhead over a direct call, fake driver, this machine: recorder/BENCHMARKS.md.
#   recorder/bench/run.sh [REPEATS] [ROUNDS]
# Builds the release recorder, a minimal fake libcuda (nulldriver.c), hook_overhead.c and
# many_stacks.c, then runs each program plainly and under the recorder (stacks none, native, fp),
# interleaved REPEATS times: hook_overhead makes ROUNDS x 1000 alloc/free pairs from one call
# site whose stack is 40 frames; many_stacks allocates at the end of 50 call paths of 40 frames
# over 400 functions (1000 rounds). BASELINE=LIB.so adds the three recorded modes under another
# build of the library (named base-MODE), interleaved with the others: a before/after comparison
# under the same load. PRELOAD=LIB.so measures that build instead of this tree's release build.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
repeats=${1:-5}
rounds=${2:-50}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo build --release -q -p vramtrace-recorder --manifest-path "$root/Cargo.toml"
preload=${PRELOAD:-$root/target/release/libvramtrace_preload.so}
cc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o "$out/libcuda.so.1" \
    "$root/recorder/bench/nulldriver.c"
cc -O2 -fno-omit-frame-pointer -o "$out/hook_overhead" "$root/recorder/bench/hook_overhead.c" -ldl
python3 "$root/recorder/bench/many_stacks.py" >"$out/many_stacks.c"
cc -O2 -fno-omit-frame-pointer -o "$out/many_stacks" "$out/many_stacks.c" -ldl
# The call site sits 34 recursion frames up; with round_of_calls, main and glibc's three
# start-up frames the allocation's stack is 40 frames.
depth=34
run() { # NAME [ENV...]
    local name=$1; shift
    env LD_LIBRARY_PATH="$out" "$@" "$out/hook_overhead" "$depth" "$rounds" |
        sed "s/^/$name /"
    env LD_LIBRARY_PATH="$out" "$@" "$out/many_stacks" 50 34 1000 | sed "s/^/$name /"
}
for r in $(seq "$repeats"); do
    run direct
    for mode in none native fp; do
        run "$mode" LD_PRELOAD="$preload" VRAMTRACE_OUTPUT="$out/" VRAMTRACE_STACKS=$mode
        if [ -n "${BASELINE:-}" ]; then
            run "base-$mode" LD_PRELOAD="$BASELINE" VRAMTRACE_OUTPUT="$out/" VRAMTRACE_STACKS=$mode
        fi
    done
    rm -f "$out"/*.vramtrace
done > "$out/results"
# Median over the runs of each configuration's median, and the overhead over direct calls.
python3 - "$out/results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    cfg, call, _, median, *_ = line.split()
    runs.setdefault((cfg, call), []).append(float(median))
print(f"{'config':11} {'call':6} {'median ns':>10} {'overhead ns':>12}   runs")
for call in ("alloc", "free", "query", "record", "path"):
    direct = statistics.median(runs[("direct", call)])
    for cfg in ("direct", "none", "native", "fp", "base-none", "base-native", "base-fp"):
        if (cfg, call) not in runs:
            continue
        v = runs[(cfg, call)]
        m = statistics.median(v)
        print(f"{cfg:11} {call:6} {m:10.1f} {m - direct:12.1f}   " + " ".join(f"{x:.0f}" for x in v))
PY
