#!/usr/bin/env bash
# What recording costs inside one process (recorder/BENCHMARKS.md, "In one process"): the MLP and
# GPT-2 loops of pyframes_train.py under `vramtrace record`, their steps in blocks alternately
# recorded and with the recorder paused (`--alternate`, recorder/src/pause.rs), so that the
# spread between processes of this machine (±10-20%, larger than the cost) cancels out. REPS
# processes with the recorder's defaults (tracker, Python stacks) and REPS - 1 with
# --stacks none, interleaved. With BIN_B, every process is run once with each build's preload,
# A then B, so two builds are compared in one call.
#
#   BIN=DIR [BIN_B=DIR2] [REPS=3] [MODELS=mlp,gpt2] samples/workloads/h200/recording_inprocess_h200.sh
#
# DIR holds vramtrace and libvramtrace_preload.so (release builds, stripped) and workloads/ (a copy of
# samples/workloads); DIR2 holds another build's libvramtrace_preload.so (and its vramtrace, else DIR's is
# used). When DIR also holds tracker_overhead (recorder/bench/tracker_overhead.c, cc -O2), fc/
# (the tests' fake driver, tests/c/fakecuda.c, as libcuda.so.1) and torch-2.11/ (the fake
# libc10_cuda.so, tests/c/fake_c10_cuda.c, beside its version.py), the tracker microbenchmark
# runs first on this CPU, cold mode, 3 alternating runs (plain, A, B; stacks none).
# About 25 s a process with both models (mlp alone: about 12 s): REPS=3 with BIN_B is 10
# processes, about 4.5 minutes, plus 1 minute of microbenchmark.
# Results: $OUT/inprocess.tar.gz (packed after each phase) and $OUT/inprocess.txt.
set -u
BIN=$(cd "${BIN:-.dev-lead}" && pwd)
BIN_B=${BIN_B:+$(cd "$BIN_B" && pwd)}
REPS=${REPS:-3}
MODELS=${MODELS:-mlp,gpt2}
OUT=${OUT:-/tmp/recording-inprocess}
R=/tmp/rip
mkdir -p "$R" "$OUT"
export PYTHONUNBUFFERED=1
W=$BIN/workloads
pack() { tar -C /tmp -czf "$OUT/inprocess.tar.gz" rip; }
builds="A"
[ -n "$BIN_B" ] && builds="A B"
dir_of() { if [ "$1" = A ]; then echo "$BIN"; else echo "$BIN_B"; fi; }
launcher_of() { if [ -x "$(dir_of "$1")/vramtrace" ]; then echo "$(dir_of "$1")/vramtrace"; else echo "$BIN/vramtrace"; fi; }
{
    date -u
    nproc; lscpu | grep -i 'model name'
    for b in $builds; do echo "$b = $(dir_of $b)"; sha256sum "$(dir_of $b)/libvramtrace_preload.so"; done
} >"$R/machine.txt" 2>&1

# 1. the tracker microbenchmark on this CPU (cold mode: 4 MiB of other writes between calls)
if [ -x "$BIN/tracker_overhead" ]; then
    L=$BIN/torch-2.11/torch/lib/libc10_cuda.so
    for r in 1 2 3; do
        LD_LIBRARY_PATH=$BIN/fc "$BIN/tracker_overhead" "$L" 34 20 4096 | sed "s/^/plain /"
        for b in $builds; do
            rm -rf /tmp/tb; mkdir -p /tmp/tb
            LD_LIBRARY_PATH=$BIN/fc LD_PRELOAD=$(dir_of $b)/libvramtrace_preload.so \
                VRAMTRACE_OUTPUT=/tmp/tb/ VRAMTRACE_STACKS=none \
                "$BIN/tracker_overhead" "$L" 34 20 4096 | sed "s/^/$b /"
        done
    done >"$R/micro.txt" 2>&1
    rm -rf /tmp/tb
    pack
fi

# 2. the training loops, recorded and paused blocks alternating in each process
for i in $(seq "$REPS"); do
    for s in python none; do
        [ $s = none ] && [ "$i" = "$REPS" ] && [ "$REPS" -gt 1 ] && continue
        for b in $builds; do
            d=$(dir_of $b)
            timeout 150 "$(launcher_of $b)" record --preload "$d/libvramtrace_preload.so" \
                --stacks $s -o /tmp/rip.vramtrace -- python3 "$W/programs/pyframes_train.py" \
                "$R/$b-$s-$i.json" --alternate --models "$MODELS" >>"$R/log.txt" 2>&1
            echo "$b $s $i rc=$?" >>"$R/rc.txt"
            rm -f /tmp/rip.vramtrace
            pack
        done
    done
done
python3 - "$R" <<'PY' >"$OUT/inprocess.txt" 2>&1
import glob, json, os, statistics, sys
r = sys.argv[1]
micro = os.path.join(r, "micro.txt")
if os.path.exists(micro):
    runs = {}
    for line in open(micro):
        f = line.split()
        if len(f) >= 8 and f[2] == "median" and f[6] == "iqm":
            runs.setdefault((f[1], f[0]), []).append(float(f[7]))
    print("tracker_overhead cold (4 MiB between calls), stacks none: interquartile mean ns, "
          "median of runs (min-max)")
    for (kind, build), v in sorted(runs.items()):
        print(f"  {kind:15} {build:6} {statistics.median(v):8.1f} ({min(v):.1f}-{max(v):.1f})")
rows = {}
for f in sorted(glob.glob(os.path.join(r, "*-*-*.json"))):
    name = os.path.basename(f)[:-5]
    build, stacks, _ = name.split("-")
    d = json.load(open(f))
    for m in d:
        if not isinstance(d[m], dict) or "recorded" not in d[m]:
            continue
        rec, pau = d[m]["recorded"]["median_ms"], d[m]["paused"]["median_ms"]
        pct = 100 * (rec / pau - 1)
        rows.setdefault((m, stacks, build), []).append(pct)
        print(f"{name:12} {m:5} recorded {rec:8.3f} ms  paused {pau:8.3f} ms  ({pct:+6.2f}%)  "
              f"steps {d[m]['recorded']['steps']}+{d[m]['paused']['steps']}")
print("recorded against paused, median of the processes (each process):")
for (m, stacks, build), v in sorted(rows.items()):
    each = ", ".join(f"{x:+.2f}" for x in v)
    print(f"  {m:5} {stacks:6} {build}  {statistics.median(v):+6.2f}%  ({each})")
PY
cat "$R/rc.txt" >>"$OUT/inprocess.txt"
pack
cat "$OUT/inprocess.txt"
