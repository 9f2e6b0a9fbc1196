#!/usr/bin/env bash
# The hook path's own CPU time per allocation in cold caches, from samples rather than a clock
# (recorder/BENCHMARKS.md, "Python stacks, cheaper"): python_cold.py (20 frames, 20,000 calls,
# 2 MiB written between two calls) under each library in turn, REPEATS times, with
# `perf record -e cpu-clock -F 20000`; prints per run the samples that fell in the recorder's
# capture path (the hook `cuMemAlloc_v2`, `python::walk`, `stacks::capture_with` and what it
# did not inline, and `__tls_get_addr`, the general-dynamic TLS lookup), one sample being
# 50 µs / 20,000 calls = 2.5 ns a call.
#   recorder/bench/python_perf.sh REPEATS ALTERNATE LIB.so...
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
repeats=$1 alternate=$2
shift 2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o "$out/libcuda.so.1" "$root/recorder/bench/nulldriver.c"
for r in $(seq "$repeats"); do
    for lib in "$@"; do
        LD_LIBRARY_PATH="$out" LD_PRELOAD="$lib" VRAMTRACE_OUTPUT="$out/" VRAMTRACE_STACKS=python \
            perf record -q -e cpu-clock -F 20000 -o "$out/perf.data" \
            "${PYTHON:-python3}" "$root/recorder/bench/python_cold.py" 20 20000 2048 "$alternate" \
            >/dev/null 2>&1
        perf report -i "$out/perf.data" --sort sym --stdio -n 2>/dev/null | awk -v lib="$lib" '
            /python::walk|stacks::capture_with|\] cuMemAlloc_v2|stacks::intern|stacks::look_up|__tls_get_addr/ {
                s[$NF] += $2; t += $2 }
            END { printf "%s total %d", lib, t; for (k in s) printf " %s=%d", k, s[k]; print "" }'
        rm -f "$out"/*.vramtrace
    done
done
