#!/usr/bin/env bash
# Issue 25, the autograd node's name (docs/validation.md R3; recorder/BENCHMARKS.md "Autograd
# nodes"), on the H200 in one call:
#   1. names against PyTorch's profiler: backward_nodes.py MODEL (the MLP, GPT-2 small; STEPS
#      training steps) recorded with the defaults (LD_PRELOAD as the launcher loads it: tracker,
#      Python stacks), and the same program in another process under
#      torch.profiler.profile(profile_memory=True); the four processes at once. The traces and
#      the profiler's JSON come back; `cargo run -p vramtrace-tests --example backward_nodes --
#      TRACE PROFILE.json` makes the table offline;
#   2. the cost in one process with the names on: pyframes_train.py --alternate (blocks of steps
#      alternately recorded and paused, recording_inprocess_h200.sh's method), MODELS, REPS
#      processes with the defaults and REPS - 1 with VRAMTRACE_STACKS=none, interleaved
#      (SETTINGS=python: the defaults only, REPS processes); with BIN_B, each process once with
#      each build, A then B.
#
#   BIN=DIR [BIN_B=DIR2] [REPS=3] [MODELS=mlp,gpt2] [STEPS=5] [PHASES="1 2"] \
#       [SETTINGS="python none"] samples/workloads/h200/node_h200.sh
#
# DIR (and DIR2) hold libvramtrace_preload.so (cargo build --release -p vramtrace-recorder,
# stripped). About 40 s for phase 1, 25 s a process of phase 2 with both models (12 s for the MLP
# alone). Results: $OUT/node.tar.gz (packed after each phase: json/, traces/, logs/,
# machine.txt, inprocess.txt).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(cd "$HERE/../programs" && pwd)
BIN=$(cd "${BIN:-.dev/node}" && pwd)
BIN_B=${BIN_B:+$(cd "$BIN_B" && pwd)}
REPS=${REPS:-3}
MODELS=${MODELS:-mlp,gpt2}
STEPS=${STEPS:-5}
SETTINGS=${SETTINGS:-python none}
PHASES=" ${PHASES:-1 2} "
phase() { case $PHASES in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
OUT=${OUT:-/tmp/node-out}
R=/tmp/node
mkdir -p "$R/json" "$R/traces" "$R/logs" "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$W"
pack() { tar -C /tmp -czf "$OUT/node.tar.gz" node; }
lib_of() { if [ "$1" = A ]; then echo "$BIN/libvramtrace_preload.so"; else echo "$BIN_B/libvramtrace_preload.so"; fi; }
builds="A"
[ -n "$BIN_B" ] && builds="A B"
{
    date -u
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)'
    nproc; lscpu | grep -i 'model name'
    for b in $builds; do echo "$b $(sha256sum "$(lib_of $b)")"; done
} >"$R/machine.txt" 2>&1

# 1. the names, against the profiler's
one() { # MODEL MODE(recorded|profiled)
    local m=$1 mode=$2
    if [ "$mode" = recorded ]; then
        LD_PRELOAD=$LIB VRAMTRACE_OUTPUT="$R/traces/$m.vramtrace" timeout 200 \
            python3 "$W/backward_nodes.py" "$m" "$R/json/$m.recorded.json" --steps "$STEPS"
    else
        timeout 200 python3 "$W/backward_nodes.py" "$m" "$R/json/$m.profiled.json" \
            --steps "$STEPS" --profile
    fi >"$R/logs/$m.$mode.log" 2>&1
    echo "$m $mode rc=$?"
}
export -f one
export R W STEPS
export LIB=$BIN/libvramtrace_preload.so
if phase 1; then
    for m in mlp gpt2; do printf '%s recorded\n%s profiled\n' $m $m; done |
        xargs -P 4 -L 1 bash -c 'one "$0" "$1"' >"$R/logs/names-rc.txt" 2>&1
    pack
fi

# 2. in-process alternation, names on
phase 2 && for i in $(seq "$REPS"); do
    for s in $SETTINGS; do
        [ $s = none ] && [ "$i" = "$REPS" ] && [ "$REPS" -gt 1 ] && continue
        for b in $builds; do
            LD_PRELOAD=$(lib_of $b) VRAMTRACE_STACKS=$s VRAMTRACE_OUTPUT=/tmp/node-alt.vramtrace \
                timeout 150 python3 "$W/pyframes_train.py" "$R/json/inprocess-$b-$s-$i.json" \
                --alternate --models "$MODELS" >>"$R/logs/inprocess.log" 2>&1
            echo "inprocess $b $s $i rc=$?" >>"$R/logs/rc.txt"
            rm -f /tmp/node-alt.vramtrace
            pack
        done
    done
done
python3 - "$R" <<'PY' >"$R/inprocess.txt" 2>&1
import glob, json, os, statistics, sys
r = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(r, "json", "inprocess-*.json"))):
    name = os.path.basename(f)[len("inprocess-"):-5]
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
pack
cat "$R/logs/names-rc.txt" "$R/logs/rc.txt" "$R/inprocess.txt" 2>/dev/null
