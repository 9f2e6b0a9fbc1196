#!/usr/bin/env bash
# Where the recorder's cost goes in a real PyTorch program on the H200 machine
# (recorder/BENCHMARKS.md "Recording overhead on the H200"):
#   1. the machine: clock source, what clock_gettime and rdtsc cost (clock_cost.c);
#   2. the microbenchmarks of this repository on this CPU: tracker_overhead.c against the fake
#      libc10_cuda.so (stacks none / native) and python_stacks.py against the fake driver
#      (stacks none / python / mixed), 3 alternating runs each;
#   3. real PyTorch, one tensor at a time, caches warm and cold (torch_alloc_cost.py): plain,
#      vt (the defaults: tracker, Python stacks), vt-none (tracker, no stacks), vt-notracker
#      (Python stacks, driver calls only: VRAMTRACE_TORCH_TRACKER=0), 3 alternating runs each;
#   4. the MLP and GPT-2 training loops (pyframes_train.py), each process pinned to the same
#      four cores (taskset) to take the scheduler's placement out of the spread, the order
#      rotated every repetition: MLP x 4 settings x MLP_REPS, GPT-2 x 3 settings x GPT2_REPS.
#
#   BIN=DIR [MLP_REPS=6] [GPT2_REPS=3] samples/workloads/h200/recording_cost_h200.sh
#
# DIR holds vramtrace, libvramtrace_preload.so, nd/libcuda.so.1 (recorder/bench/nulldriver.c),
# fc/libcuda.so.1 and torch-2.11/ (the tests' fake driver tests/c/fakecuda.c and fake
# libc10_cuda.so tests/c/fake_c10_cuda.c, as target/debug/vramtrace-tests-c holds them),
# tracker_overhead and clock_cost (cc -O2), bench/python_stacks.py and workloads/ (a copy of samples/workloads).
# About 7 minutes. Results: $OUT/cost.tar.gz (packed after each phase) and $OUT/table.txt.
set -u
BIN=$(cd "${BIN:-.dev-lead}" && pwd)
OUT=${OUT:-/tmp/recording-cost}
R=/tmp/rc
mkdir -p "$R" "$OUT"
export PYTHONUNBUFFERED=1
W=$BIN/workloads
P=$BIN/libvramtrace_preload.so
VT="$BIN/vramtrace record --preload $P"
pack() { tar -C /tmp -czf "$OUT/cost.tar.gz" rc; }
PIN=""
command -v taskset >/dev/null && PIN="taskset -c 8-11"
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'
    echo "clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
    nproc; lscpu | grep -i 'model name'
    echo "pin: ${PIN:-none}"
    date -u
} >"$R/machine.txt" 2>&1
"$BIN/clock_cost" >>"$R/machine.txt" 2>&1

# 2. microbenchmarks on this CPU
for r in 1 2 3; do
    for s in plain none native; do
        if [ $s = plain ]; then
            LD_LIBRARY_PATH=$BIN/fc "$BIN/tracker_overhead" "$BIN/torch-2.11/torch/lib/libc10_cuda.so" 34 50
        else
            rm -rf /tmp/tb; mkdir -p /tmp/tb
            LD_LIBRARY_PATH=$BIN/fc LD_PRELOAD=$P VRAMTRACE_OUTPUT=/tmp/tb/ VRAMTRACE_STACKS=$s \
                "$BIN/tracker_overhead" "$BIN/torch-2.11/torch/lib/libc10_cuda.so" 34 50
        fi | sed "s/^/tracker $s /" >>"$R/micro.txt" 2>&1
    done
    for s in plain none python mixed; do
        if [ $s = plain ]; then
            LD_LIBRARY_PATH=$BIN/nd python3 "$BIN/bench/python_stacks.py" 30 20
        else
            rm -rf /tmp/tb; mkdir -p /tmp/tb
            LD_LIBRARY_PATH=$BIN/nd LD_PRELOAD=$P VRAMTRACE_OUTPUT=/tmp/tb/ VRAMTRACE_STACKS=$s \
                python3 "$BIN/bench/python_stacks.py" 30 20
        fi | sed "s/^/python $s /" >>"$R/micro.txt" 2>&1
    done
done
pack

vt_run() { # SETTING OUTFILE COMMAND... (under the setting, pinned)
    local s=$1 t=$2; shift 2
    case $s in
    plain) $PIN "$@" ;;
    vt) $PIN $VT -o "$t" -- "$@" ;;
    vt-none) $PIN $VT --stacks none -o "$t" -- "$@" ;;
    vt-notracker) VRAMTRACE_TORCH_TRACKER=0 $PIN $VT -o "$t" -- "$@" ;;
    esac
    echo "$s rc=$?" >>"$R/rc.txt"
    rm -f "$t"
}
# 3. real PyTorch, per tensor
for r in 1 2 3; do
    for s in plain vt vt-none vt-notracker; do
        vt_run $s /tmp/alloc.vramtrace timeout 60 python3 "$W/probes/torch_alloc_cost.py" "$R/alloc-$s-$r.json" \
            >>"$R/log.txt" 2>&1
    done
done
pack

# 4. training loops, pinned, rotated
settings=(plain vt vt-none vt-notracker)
for i in $(seq "${MLP_REPS:-6}"); do
    for k in 0 1 2 3; do
        s=${settings[$(( (k + i - 1) % 4 ))]}
        vt_run $s /tmp/mlp.vramtrace timeout 90 python3 "$W/programs/pyframes_train.py" "$R/mlp-$s-$i.json" \
            --models mlp >>"$R/log.txt" 2>&1
    done
done
pack
settings=(plain vt vt-none)
for i in $(seq "${GPT2_REPS:-3}"); do
    for k in 0 1 2; do
        s=${settings[$(( (k + i - 1) % 3 ))]}
        vt_run $s /tmp/gpt2.vramtrace timeout 120 python3 "$W/programs/pyframes_train.py" "$R/gpt2-$s-$i.json" \
            --models gpt2 >>"$R/log.txt" 2>&1
    done
done
pack

python3 - "$R" <<'PY' >"$OUT/table.txt" 2>&1
import glob, json, os, statistics, sys
r = sys.argv[1]
print(open(os.path.join(r, "machine.txt")).read())
micro = {}
for line in open(os.path.join(r, "micro.txt")):
    p = line.split()
    nums = [float(x) for x in p[3:] if x.replace(".", "", 1).isdigit()]
    if len(p) >= 4 and nums:
        micro.setdefault((p[0], p[1], p[2]), []).append(nums[0])
for k, v in sorted(micro.items()):
    print("micro", *k, "median %.1f ns" % statistics.median(v), "runs", " ".join("%.1f" % x for x in v))
def load(pattern):
    by = {}
    for f in glob.glob(os.path.join(r, pattern)):
        name = os.path.basename(f)[:-5]
        kind, rest = name.split("-", 1)
        s, i = rest.rsplit("-", 1)
        by.setdefault(s, []).append(json.load(open(f)))
    return by
alloc = load("alloc-*.json")
for part in ("warm", "cold"):
    base = statistics.median(d[part]["median_ns"] for d in alloc.get("plain", [])) if alloc.get("plain") else float("nan")
    for s in ("plain", "vt", "vt-none", "vt-notracker"):
        v = sorted(d[part]["median_ns"] for d in alloc.get(s, []))
        if v:
            m = statistics.median(v)
            print(f"tensor {part:4} {s:13} median {m:8.0f} ns/tensor ({m - base:+6.0f})  runs {' '.join('%.0f' % x for x in v)}")
for loop in ("mlp", "gpt2"):
    runs = load(f"{loop}-*.json")
    base = statistics.median(d[loop]["median_ms"] for d in runs.get("plain", [])) if runs.get("plain") else float("nan")
    for s in ("plain", "vt", "vt-none", "vt-notracker"):
        v = sorted(d[loop]["median_ms"] for d in runs.get(s, []))
        if v:
            m = statistics.median(v)
            print(f"{loop:5} {s:13} median {m:8.3f} ms ({100 * (m / base - 1):+6.2f}%)  runs {' '.join('%.3f' % x for x in v)}")
PY
cat "$R/rc.txt" | sort | uniq -c >>"$OUT/table.txt"
cat "$OUT/table.txt"
