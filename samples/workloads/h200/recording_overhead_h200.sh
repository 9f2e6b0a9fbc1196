#!/usr/bin/env bash
# What recording costs a PyTorch program, with the recorder's defaults, on a GPU
# (recorder/BENCHMARKS.md "Recording overhead on the H200", issues "Recorder, part 3/4"):
#   1. pyframes_train.py (an MLP of 16 x 1024 at batch 64, then HF GPT-2 small with bf16 autocast
#      and AdamW; median step times) under four settings, REPS times each, the order rotated by
#      one setting every repetition so that no setting always runs first or last:
#        plain    no recorder, PyTorch's default caching allocator
#        history  PyTorch's own recorder, _record_memory_history(context="all", stacks="python")
#        vt       `vramtrace record` with its defaults: PyTorch's own allocator kept, every
#                 tensor recorded through its trace tracker, Python stacks
#        vt-none  the same with --stacks none (what the stacks themselves cost)
#      All four run the same allocator (the native one); only `history` and `vt*` record.
#   2. for the check that vramtrace names the same lines as PyTorch at the peak: the first vt
#      run's trace (summary, summary --json, info --json) and the sites PyTorch's snapshot of the
#      first history run attributes by the same rule (pyframes_peak_sites.py);
#   3. the bundled `jax-platform` sample recorded again, with (Python) stacks.
#
#   BIN=DIR [REPS=5] [OVERHEAD_S=420] samples/workloads/h200/recording_overhead_h200.sh
#
# DIR holds vramtrace and libvramtrace_preload.so (release builds, stripped) and workloads/ (a copy of
# samples/workloads). Each run takes about 15-20 s on the H200: five repetitions of the four settings take
# about six minutes. Results are packed after each phase: $OUT/overhead.tar.gz (phases 1-2),
# $OUT/samples.tar.gz (phase 3), and $OUT/table.txt.
set -u
BIN=${BIN:-.dev-lead}
REPS=${REPS:-5}
OUT=${OUT:-/tmp/recording-overhead}
R=/tmp/ro
mkdir -p "$R/traces" "$OUT"
export PYTHONUNBUFFERED=1
W=$BIN/workloads
VT="$BIN/vramtrace record --preload $BIN/libvramtrace_preload.so"
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)'
    date -u
} >"$R/machine.txt" 2>&1

run() { # SETTING REP
    local s=$1 i=$2 json=$R/$1-$2.json
    case $s in
    plain) timeout 150 python3 "$W/programs/pyframes_train.py" "$json" ;;
    history)
        local snap=-; [ "$i" = 1 ] && snap=$R/history-1.pickle
        timeout 150 python3 "$W/programs/pyframes_train.py" "$json" --history "$snap" ;;
    vt) timeout 150 $VT -o "$R/traces/vt-$i.vramtrace" -- python3 "$W/programs/pyframes_train.py" "$json" ;;
    vt-none) timeout 150 $VT --stacks none -o "$R/traces/vtnone-$i.vramtrace" -- \
        python3 "$W/programs/pyframes_train.py" "$json" ;;
    esac
    echo "$s $i rc=$?" >>"$R/rc.txt"
}
settings=(plain history vt vt-none)
start=$(date +%s)
for i in $(seq "$REPS"); do
    for k in 0 1 2 3; do
        s=${settings[$(( (k + i - 1) % 4 ))]}
        run "$s" "$i" >>"$R/runs.log" 2>&1
        echo "$s $i $(( $(date +%s) - start ))s" >>"$R/progress.log"
    done
    for t in "$R"/traces/vt*-"$i".vramtrace; do
        [ -f "$t" ] && "$BIN/vramtrace" info --json "$t" >"$t.info.json" 2>&1
    done
    [ "$i" -gt 1 ] && rm -f "$R"/traces/vt*-"$i".vramtrace
    [ $(( $(date +%s) - start )) -gt "${OVERHEAD_S:-420}" ] && break
done
"$BIN/vramtrace" summary "$R/traces/vt-1.vramtrace" >"$R/vt-1.summary.txt" 2>&1
"$BIN/vramtrace" summary --json "$R/traces/vt-1.vramtrace" >"$R/vt-1.summary.json" 2>&1
python3 "$W/programs/pyframes_peak_sites.py" "$R/history-1.pickle" "$R/history-1.sites.json" \
    >/dev/null 2>"$R/sites.err"
rm -f "$R"/history-*.pickle
python3 - "$R" <<'PY' >"$OUT/table.txt"
import glob, json, os, statistics, sys
r = sys.argv[1]
by = {}
for f in glob.glob(os.path.join(r, "*-*.json")):
    s, i = os.path.basename(f)[:-5].rsplit("-", 1)
    if not i.isdigit():
        continue
    d = json.load(open(f))
    for m in ("mlp", "gpt2"):
        by.setdefault((m, s), []).append(d[m]["median_ms"])
for m in ("mlp", "gpt2"):
    base = statistics.median(by.get((m, "plain"), [float("nan")]))
    for s in ("plain", "history", "vt", "vt-none"):
        v = sorted(by.get((m, s), []))
        if v:
            med = statistics.median(v)
            print(f"{m:5} {s:8} median {med:8.3f} ms ({100 * (med / base - 1):+6.2f}%)  "
                  f"runs {' '.join(f'{x:.3f}' for x in v)}")
PY
cat "$R/rc.txt" >>"$OUT/table.txt"
tar -C /tmp -czf "$OUT/overhead.tar.gz" ro
S=/tmp/ro-samples
mkdir -p "$S"
XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout 120 $VT -o "$S/jax-platform.vramtrace" -- \
    python3 "$W/programs/jax_train.py" "$S/jax_platform.json" >"$S/jax-platform.log" 2>&1
echo "jax-platform rc=$?" >>"$S/jax-platform.log"
"$BIN/vramtrace" info --json "$S/jax-platform.vramtrace" >"$S/jax-platform.info.json" 2>&1
"$BIN/vramtrace" summary "$S/jax-platform.vramtrace" >"$S/jax-platform.summary.txt" 2>&1
tar -C /tmp -czf "$OUT/samples.tar.gz" ro-samples
cat "$OUT/table.txt"
