#!/usr/bin/env bash
# Python stacks on a GPU (recorder/BENCHMARKS.md "Python stacks on the H200", docs/validation.md):
#   1. overhead, side by side: pyframes_train.py (MLP 16 x 1024 batch 64, GPT-2 small bf16
#      AdamW) under these settings, alternating, REPS times each (SETTINGS to choose):
#        plain        no recorder, PyTorch's default caching allocator
#        history      PyTorch's _record_memory_history(context="all", stacks="python")
#        plain-async  no recorder, backend:cudaMallocAsync (what --requests switches to)
#        vt           vramtrace record --requests (default stacks: python)
#        vt-native    vramtrace record --requests --stacks native (the previous default)
#   2. the traces of the first vt run and the snapshot of the first history run, for checking
#      offline that vramtrace's summary names the same model lines at the peak as PyTorch;
#   3. vramtrace info --json of every recorded trace (bytes per event);
#   4. the bundled real samples (samples/README.md) recorded again, now with stacks, the way
#      gpu_validate.sh made them, while the elapsed time stays under BUDGET_S (default 230).
#
#   BIN=DIR REPS=5 samples/workloads/h200/pyframes_h200.sh
#
# DIR holds vramtrace and libvramtrace_preload.so (cargo build --release) and workloads/ (a copy of
# samples/workloads). Results: $OUT/results.tar.gz.
set -u
BIN=${BIN:-.dev-pyframes}
REPS=${REPS:-5}
OUT=${OUT:-/tmp/pyframes}
R=$OUT/r
mkdir -p "$R/traces"
export PYTHONUNBUFFERED=1
W=$BIN/workloads
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)'
} >"$R/machine.txt" 2>&1

run() { # SETTING REP
    local s=$1 i=$2 json=$R/$1-$2.json
    case $s in
    plain) timeout 150 python3 "$W/programs/pyframes_train.py" "$json" ;;
    history) # Only the first run's snapshot is kept (for the offline check); all record.
        local snap=-; [ "$i" = 1 ] && snap=$R/history-1.pickle
        timeout 150 python3 "$W/programs/pyframes_train.py" "$json" --history "$snap" ;;
    plain-async) PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 150 \
        python3 "$W/programs/pyframes_train.py" "$json" ;;
    vt) timeout 150 "$BIN/vramtrace" record --preload "$BIN/libvramtrace_preload.so" --requests \
        -o "$R/traces/vt-$i.vramtrace" -- python3 "$W/programs/pyframes_train.py" "$json" ;;
    vt-native) timeout 150 "$BIN/vramtrace" record --preload "$BIN/libvramtrace_preload.so" \
        --requests --stacks native -o "$R/traces/vtn-$i.vramtrace" -- \
        python3 "$W/programs/pyframes_train.py" "$json" ;;
    esac
}
start=$(date +%s)
for i in $(seq "$REPS"); do
    for s in ${SETTINGS:-plain history plain-async vt}; do
        run "$s" "$i" >>"$R/runs.log" 2>&1
        echo "$s $i $(( $(date +%s) - start ))s" >>"$R/progress.log"
    done
    # Keep only the first snapshot and traces (they are for the offline checks).
    [ "$i" -gt 1 ] && rm -f "$R"/traces/vt*-"$i".vramtrace 2>/dev/null
    [ $(( $(date +%s) - start )) -gt "${OVERHEAD_S:-150}" ] && break
done
S=$R/samples
mkdir -p "$S"
sample() { # NAME [ENV=VALUE...] -- COMMAND...
    local name=$1; shift
    [ $(( $(date +%s) - start )) -gt "${BUDGET_S:-230}" ] && { echo "skipped $name" >>"$S/log"; return; }
    env "$@" 2>>"$S/$name.err" >>"$S/$name.out"
    echo "$name $(( $(date +%s) - start ))s" >>"$R/progress.log"
}
VT="$BIN/vramtrace record --preload $BIN/libvramtrace_preload.so"
nvcc -O2 -o /tmp/cudart_counts "$W/programs/cudart_counts.cu" 2>>"$S/nvcc.err"
sample nvcc-static $VT -o "$S/nvcc-static.vramtrace" -- /tmp/cudart_counts
sample torch-mlp-requests $VT --requests -o "$S/torch-mlp-requests.vramtrace" -- \
    python3 "$W/programs/torch_train.py" mlp "$S/torch_mlp_requests.json"
sample torch-mlp-native PYTORCH_CUDA_ALLOC_CONF= $VT -o "$S/torch-mlp-native.vramtrace" -- \
    python3 "$W/programs/torch_train.py" mlp "$S/torch_mlp_native.json"
sample torch-mlp-expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $VT \
    -o "$S/torch-mlp-expandable.vramtrace" -- python3 "$W/programs/torch_train.py" mlp "$S/torch_mlp_expandable.json"
sample torch-transformer-requests $VT --requests -o "$S/torch-transformer-requests.vramtrace" -- \
    python3 "$W/programs/torch_train.py" transformer "$S/torch_transformer_requests.json"
sample jax-platform XLA_PYTHON_CLIENT_ALLOCATOR=platform $VT -o "$S/jax-platform.vramtrace" -- \
    python3 "$W/programs/jax_train.py" "$S/jax_platform.json"
for t in "$R"/traces/*.vramtrace "$S"/*.vramtrace; do
    "$BIN/vramtrace" info --json "$t" >"$t.info.json" 2>&1
done
"$BIN/vramtrace" summary "$R/traces/vt-1.vramtrace" >"$R/vt-1.summary.txt" 2>&1
"$BIN/vramtrace" summary --json "$R/traces/vt-1.vramtrace" >"$R/vt-1.summary.json" 2>&1
python3 "$W/programs/pyframes_peak_sites.py" "$R/history-1.pickle" "$R/history-1.sites.json" >/dev/null 2>"$R/sites.err"
rm -f "$R"/history-*.pickle
python3 - "$R" <<'PY' >"$R/table.txt"
import glob, json, os, statistics, sys
r = sys.argv[1]
by = {}
for f in glob.glob(os.path.join(r, "*-*.json")):
    s, i = os.path.basename(f)[:-5].rsplit("-", 1)
    d = json.load(open(f))
    for m in ("mlp", "gpt2"):
        by.setdefault((m, s), []).append(d[m]["median_ms"])
for m in ("mlp", "gpt2"):
    for s in ("plain", "history", "plain-async", "vt", "vt-native"):
        v = sorted(by.get((m, s), []))
        if v:
            print(f"{m:5} {s:12} median {statistics.median(v):8.3f} ms  runs {' '.join(f'{x:.3f}' for x in v)}")
PY
cat "$R/table.txt"
tar -C "$OUT" -czf "$OUT/results.tar.gz" r
