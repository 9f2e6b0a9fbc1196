#!/usr/bin/env bash
# Issue 25, items 2 and 3, on the H200 (recorder/BENCHMARKS.md "Python stacks in cold caches",
# docs/validation.md R2), in one call:
#   1. recording changes nothing, rechecked with this build: gpt2-train, mlp and checkpointing of
#      recording_equality.py, each unrecorded and recorded with the defaults (tracker, Python
#      stacks; LD_PRELOAD as the launcher loads it), three processes at a time; the recorded
#      traces come back (GPT-2's `<no stack>` share at the peak is read from its trace offline:
#      `vramtrace summary --json`, backward_compare.py);
#   2. the cost in one process: pyframes_train.py --alternate (blocks of steps alternately
#      recorded and paused, recording_inprocess_h200.sh's method), MLP and GPT-2, REPS processes
#      of each build with the defaults, A (BIN) then B (BIN_B) each repetition;
#   3. the cost between processes, MLP: unrecorded, recorded (defaults, build A) and PyTorch's
#      _record_memory_history(stacks="python"), REPS processes each, the order rotated.
#
#   BIN=DIR [BIN_B=DIR2] [REPS=3] [PHASES="1 2 3"] samples/workloads/h200/backward_h200.sh
#
# DIR and DIR2 hold libvramtrace_preload.so (cargo build --release -p vramtrace-recorder). About
# 4.5 minutes with REPS=3 and BIN_B. Results: $OUT/backward.tar.gz (packed after each phase:
# json/, traces/, logs/, machine.txt) and $OUT/backward.txt.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(cd "$HERE/../programs" && pwd)
BIN=$(cd "${BIN:-.dev-backward}" && pwd)
BIN_B=${BIN_B:+$(cd "$BIN_B" && pwd)}
REPS=${REPS:-3}
PHASES=" ${PHASES:-1 2 3} "
phase() { case $PHASES in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
OUT=${OUT:-/tmp/backward-out}
R=/tmp/bw
mkdir -p "$R/json" "$R/traces" "$R/logs" "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$W"
pack() { tar -C /tmp -czf "$OUT/backward.tar.gz" bw; }
lib_of() { if [ "$1" = A ]; then echo "$BIN/libvramtrace_preload.so"; else echo "$BIN_B/libvramtrace_preload.so"; fi; }
builds="A"
[ -n "$BIN_B" ] && builds="A B"
{
    date -u
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'
    nproc; lscpu | grep -i 'model name'
    for b in $builds; do echo "$b $(sha256sum "$(lib_of $b)")"; done
} >"$R/machine.txt" 2>&1

# 1. equality, and the recorded traces
one() { # WORKLOAD MODE(plain|recorded)
    local w=$1 mode=$2
    if [ "$mode" = recorded ]; then
        LD_PRELOAD=$LIB VRAMTRACE_OUTPUT="$R/traces/$w.vramtrace" timeout 200 \
            python3 "$W/recording_equality.py" "$w" "$R/json/$w.warm.recorded.json"
    else
        timeout 200 python3 "$W/recording_equality.py" "$w" "$R/json/$w.warm.plain.json"
    fi >"$R/logs/$w.$mode.log" 2>&1
    echo "$w $mode rc=$?"
}
export -f one
export R W
export LIB=$BIN/libvramtrace_preload.so
if phase 1; then
    for w in gpt2-train mlp checkpointing; do printf '%s plain\n%s recorded\n' $w $w; done |
        xargs -P 3 -L 1 bash -c 'one "$0" "$1"' >"$R/logs/equality-rc.txt" 2>&1
    python3 "$HERE/recording_equality_compare.py" "$R/json" >"$R/equality.txt" 2>&1
    pack
fi

# 2. in-process alternation
phase 2 && for i in $(seq "$REPS"); do
    for b in $builds; do
        LD_PRELOAD=$(lib_of $b) VRAMTRACE_OUTPUT=/tmp/bw-alt.vramtrace timeout 150 \
            python3 "$W/pyframes_train.py" "$R/json/inprocess-$b-$i.json" --alternate \
            --models mlp,gpt2 >>"$R/logs/inprocess.log" 2>&1
        echo "inprocess $b $i rc=$?" >>"$R/logs/rc.txt"
        rm -f /tmp/bw-alt.vramtrace
        pack
    done
done

# 3. between processes, MLP
settings=(plain vt history)
phase 3 && for i in $(seq "$REPS"); do
    for k in 0 1 2; do
        s=${settings[$(((k + i - 1) % 3))]}
        f=$R/json/process-$s-$i.json
        case $s in
            plain) timeout 90 python3 "$W/pyframes_train.py" "$f" --models mlp ;;
            vt) LD_PRELOAD=$LIB VRAMTRACE_OUTPUT=/tmp/bw-mlp.vramtrace timeout 90 \
                    python3 "$W/pyframes_train.py" "$f" --models mlp ;;
            history) timeout 90 python3 "$W/pyframes_train.py" "$f" --models mlp --history - ;;
        esac >>"$R/logs/process.log" 2>&1
        echo "process $s $i rc=$?" >>"$R/logs/rc.txt"
        rm -f /tmp/bw-mlp.vramtrace
    done
    pack
done
python3 "$HERE/backward_compare.py" "$R" >"$OUT/backward.txt" 2>&1
pack
cat "$OUT/backward.txt"
