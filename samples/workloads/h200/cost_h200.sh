#!/usr/bin/env bash
# Issue 25 item 3, the recorder's cost (recorder/BENCHMARKS.md "Where a tensor's recording time
# goes", "Where the time goes, by the counters"), on the H200 in one call:
#   parts: recorder_parts.py (MODELS; blocks of steps under each variant of a bench build, one
#          process, rotated; PARTS_REPS processes), then, where `perf` works, `perf stat` of one
#          MLP process per variant in PERF_VARIANTS (whole process, that variant in every block);
#   stamps: recorder_parts.py --variants STAMPS_VARIANTS (default full,stamped,whole; MODELS):
#          the bench build's per-part counters (recorder/src/stamps.rs) in blocks rotated with
#          full and paused ones; STAMPS_REPS processes, STAMPS_ROUNDS rounds each;
#   pin:   recorder_parts.py --variants full,whole --pin MODE for each MODE of PIN_MODES
#          (default "none apart same"; "sibling" where the CPUs show hyperthreads), rotated,
#          PIN_REPS processes of each (default 3), PIN_ROUNDS rounds (default 16): the writer
#          thread beside, apart from or on the main thread's CPU (recorder/BENCHMARKS.md
#          "Where the indirect cost goes");
#   ab:    pyframes_train.py --alternate (recorded against paused blocks, one process, the
#          defaults), AB_REPS processes of each build, A then B each time;
#   proc:  between processes, MLP: unrecorded, A's defaults, B's defaults and PyTorch's
#          _record_memory_history(context="all", stacks="python"), PROC_REPS processes each, the
#          order rotated.
#
#   BENCH=DIR A=DIR [B=DIR] [PHASES="parts ab proc"] [MODELS=mlp,gpt2] [PARTS_REPS=5] \
#       [STAMPS_REPS=5] [STAMPS_ROUNDS=30] [STAMPS_VARIANTS=full,stamped,whole] [PIN_REPS=3] \
#       [PIN_ROUNDS=16] [PIN_MODES="none apart same"] [AB_REPS=3] \
#       [PROC_REPS=3] [PERF_VARIANTS="paused full"] bash samples/workloads/h200/cost_h200.sh
#
# Each DIR holds a stripped release libvramtrace_preload.so: BENCH's built with
# `--features bench` (recorder/src/bench.rs), A and B the builds compared (this branch, main).
# About 25 s a process of `parts` with both models, 30 s of `stamps`, 25 s of `ab`, 8 s of
# `proc`. A is needed by `ab` and `proc` only.
# Results: $OUT/cost.tar.gz (json/, logs/, traces/ (proc's first recorded MLP run of each build),
# machine.txt, summary.txt; packed after each phase).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(cd "$HERE/../programs" && pwd)
lib() { echo "$(cd "$1" && pwd)/libvramtrace_preload.so"; }
PHASES=" ${PHASES:-parts ab proc} "
phase() { case $PHASES in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
MODELS=${MODELS:-mlp,gpt2}
OUT=${OUT:-/tmp/cost-out}
R=/tmp/cost
mkdir -p "$R/json" "$R/logs" "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$W"
pack() { tar -C /tmp -czf "$OUT/cost.tar.gz" cost; }
builds="A"
[ -n "${B:-}" ] && builds="A B"
libof() { if [ "$1" = A ]; then lib "$A"; else lib "$B"; fi; }
{
    date -u
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)'
    nproc; lscpu | grep -i 'model name'
    cat /sys/devices/system/clocksource/clocksource0/current_clocksource
    grep -o -w -m1 -e constant_tsc -e nonstop_tsc /proc/cpuinfo | sort -u | tr '\n' ' '; echo
    [ -n "${BENCH:-}" ] && echo "bench $(sha256sum "$(lib "$BENCH")")"
    if [ -n "${A:-}" ]; then for b in $builds; do echo "$b $(sha256sum "$(libof $b)")"; done; fi
} >"$R/machine.txt" 2>&1

# One recorder_parts.py process under the bench build: parts_run PHASE NAME [ARGS...] writes
# json/NAME.json, appends to logs/PHASE.log and its exit status to logs/rc.txt, then packs.
parts_run() {
    local phase=$1 name=$2
    shift 2
    LD_PRELOAD=$(lib "$BENCH") VRAMTRACE_OUTPUT=/tmp/cost-parts.vramtrace timeout 150 \
        python3 "$W/recorder_parts.py" "$R/json/$name.json" --models "$MODELS" "$@" \
        >>"$R/logs/$phase.log" 2>&1
    echo "$name rc=$?" >>"$R/logs/rc.txt"
    rm -f /tmp/cost-parts.vramtrace
    pack
}

if phase parts; then
    for i in $(seq "${PARTS_REPS:-5}"); do
        parts_run parts "parts-$i"
    done
    if perf stat -e cycles true >"$R/logs/perf-probe.txt" 2>&1; then
        for v in ${PERF_VARIANTS:-paused full}; do
            LD_PRELOAD=$(lib "$BENCH") VRAMTRACE_OUTPUT=/tmp/cost-perf.vramtrace timeout 100 \
                perf stat -x, -o "$R/logs/perf-$v.csv" \
                -e cycles,instructions,cache-misses,LLC-load-misses \
                python3 "$W/recorder_parts.py" "$R/json/perf-$v.json" --models mlp --only "$v" \
                >>"$R/logs/perf.log" 2>&1
            echo "perf $v rc=$?" >>"$R/logs/rc.txt"
            rm -f /tmp/cost-perf.vramtrace
        done
    fi
    pack
fi

if phase stamps; then
    for i in $(seq "${STAMPS_REPS:-5}"); do
        parts_run stamps "stamps-$i" --variants "${STAMPS_VARIANTS:-full,stamped,whole}" \
            --rounds "${STAMPS_ROUNDS:-30}"
    done
fi

if phase pin; then
    for i in $(seq "${PIN_REPS:-3}"); do
        for m in ${PIN_MODES:-none apart same}; do
            parts_run pin "pin-$m-$i" --variants full,whole --rounds "${PIN_ROUNDS:-16}" --pin "$m"
        done
    done
    { lscpu; for c in 0 1 2 3; do echo "cpu$c siblings $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list)"; done; } >"$R/topology.txt" 2>&1
    pack
fi

if phase ab; then
    for i in $(seq "${AB_REPS:-3}"); do
        for b in $builds; do
            LD_PRELOAD=$(libof $b) VRAMTRACE_OUTPUT=/tmp/cost-alt.vramtrace timeout 150 \
                python3 "$W/pyframes_train.py" "$R/json/ab-$b-$i.json" --alternate \
                --models "$MODELS" >>"$R/logs/ab.log" 2>&1
            echo "ab $b $i rc=$?" >>"$R/logs/rc.txt"
            rm -f /tmp/cost-alt.vramtrace
            pack
        done
    done
fi

if phase proc; then
    settings=(plain A B history)
    [ -z "${B:-}" ] && settings=(plain A history)
    k=${#settings[@]}
    for i in $(seq "${PROC_REPS:-3}"); do
        for j in $(seq 0 $((k - 1))); do
            s=${settings[$(((j + i - 1) % k))]}
            f=$R/json/proc-$s-$i.json
            case $s in
                plain) timeout 90 python3 "$W/pyframes_train.py" "$f" --models mlp ;;
                history) timeout 90 python3 "$W/pyframes_train.py" "$f" --models mlp --history - ;;
                *) LD_PRELOAD=$(libof "$s") VRAMTRACE_OUTPUT=/tmp/cost-mlp.vramtrace timeout 90 \
                    python3 "$W/pyframes_train.py" "$f" --models mlp ;;
            esac >>"$R/logs/proc.log" 2>&1
            echo "proc $s $i rc=$?" >>"$R/logs/rc.txt"
            # One trace of each build comes back, to check its times offline.
            [ "$i" = 1 ] && [ -f /tmp/cost-mlp.vramtrace ] && mkdir -p "$R/traces" &&
                mv /tmp/cost-mlp.vramtrace "$R/traces/mlp-$s.vramtrace"
            rm -f /tmp/cost-mlp.vramtrace
        done
        pack
    done
fi
python3 "$HERE/cost_compare.py" "$R" >"$R/summary.txt" 2>&1
pack
cat "$R/logs/rc.txt" "$R/summary.txt"
