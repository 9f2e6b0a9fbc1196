#!/usr/bin/env bash
# Python frames' cost per allocation, fake driver, this machine: recorder/BENCHMARKS.md.
#   recorder/bench/python.sh [REPEATS] [ROUNDS] [DEPTH]
# Builds the release recorder and the fake driver (nulldriver.c), then runs python_stacks.py
# plainly and under the recorder with VRAMTRACE_STACKS=none, python, mixed and native,
# interleaved REPEATS times; prints each configuration's median of the runs' medians.
# BASELINE=LIB.so adds the same four modes under another build of the library (named base-MODE),
# interleaved with the others: a before/after comparison under the same load. PRELOAD=LIB.so
# measures that build instead of this tree's release build.
# COLD="CALLS COLD_KIB ALTERNATE" runs python_cold.py DEPTH CALLS COLD_KIB ALTERNATE instead (each
# call timed alone in cold caches; ROUNDS unused); MODES="none python" picks the modes run. Each
# mode's line also gives the median over the repetitions of (mode - none) within a repetition.
# RAW=FILE keeps every run's line there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
repeats=${1:-5}
rounds=${2:-30}
depth=${3:-30}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo build --release -q -p vramtrace-recorder --manifest-path "$root/Cargo.toml"
preload=${PRELOAD:-$root/target/release/libvramtrace_preload.so}
cc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o "$out/libcuda.so.1" "$root/recorder/bench/nulldriver.c"
py=${PYTHON:-python3}
if [ -n "${COLD:-}" ]; then
    # shellcheck disable=SC2206
    bench=("$root/recorder/bench/python_cold.py" "$depth" $COLD)
else
    bench=("$root/recorder/bench/python_stacks.py" "$depth" "$rounds")
fi
run() { # NAME [ENV...]
    local name=$1; shift
    env LD_LIBRARY_PATH="$out" "$@" "$py" "${bench[@]}" | sed "s/^/$name /"
}
for r in $(seq "$repeats"); do
    run direct
    for mode in ${MODES:-none python mixed native}; do
        run "$mode" LD_PRELOAD="$preload" VRAMTRACE_OUTPUT="$out/" VRAMTRACE_STACKS=$mode
        if [ -n "${BASELINE:-}" ]; then
            run "base-$mode" LD_PRELOAD="$BASELINE" VRAMTRACE_OUTPUT="$out/" VRAMTRACE_STACKS=$mode
        fi
    done
    rm -f "$out"/*.vramtrace
done >"$out/results"
[ -z "${RAW:-}" ] || cp "$out/results" "$RAW"
python3 - "$out/results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    cfg, call, median, _ = line.split()
    runs.setdefault((cfg, call), []).append(float(median))
print(f"{'config':11} {'call':6} {'median ns':>10} {'over none':>10} {'paired':>7}   runs")
for call in ("alloc", "free"):
    if ("none", call) not in runs:
        continue
    base = ("base-none", "base-python", "base-mixed", "base-native")
    for cfg in ("direct", "none", "python", "mixed", "native") + base:
        if (cfg, call) not in runs:
            continue
        nones = runs[("base-none" if cfg.startswith("base-") else "none", call)]
        v = runs[(cfg, call)]
        m = statistics.median(v)
        paired = statistics.median(x - y for x, y in zip(v, nones))
        print(f"{cfg:11} {call:6} {m:10.1f} {m - statistics.median(nones):10.1f} {paired:7.1f}   "
              + " ".join(f"{x:.0f}" for x in v))
PY
