#!/usr/bin/env bash
# Recording changes nothing: every workload of recording_equality.py run unrecorded and recorded
# (the recorder's defaults: PyTorch tracker, Python stacks), and PyTorch's own figures compared to
# the byte (docs/validation.md, "Recording changes nothing", is this script's table).
#
#   BIN=DIR samples/workloads/h200/recording_equality_h200.sh
#
# DIR holds libvramtrace_preload.so (cargo build --release -p vramtrace-recorder); the library is
# loaded the way the launcher loads it (LD_PRELOAD, VRAMTRACE_OUTPUT). Compile caches: every run
# of a workload shares one TorchInductor/Triton cache folder that an unmeasured run warmed first;
# the two torch.compile workloads are also run in pairs on cold caches (a fresh folder each).
# Three processes run at a time (the figures compared are the allocator's, not times). Writes
# $OUT/equality.txt (the table) and $OUT/equality-json.tar.gz (every JSON and log) and $OUT/equality-traces.tar.gz.
set -u
BIN=${BIN:-.dev-equality}
OUT=${OUT:-/tmp/equality-out}
HERE=$(cd "$(dirname "$0")" && pwd)
R=/tmp/equality
mkdir -p "$R/json" "$R/traces" "$R/cache" "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$HERE"
LIB=$(cd "$BIN" && pwd)/libvramtrace_preload.so
WORKLOADS="mlp cuda-graph compile-default compile-reduce-overhead varlen amp checkpointing pinned-loader gpt2-train"

one() { # WORKLOAD MODE(plain|recorded) TAG CACHE
    local w=$1 mode=$2 tag=$3 cache=$4
    export TORCHINDUCTOR_CACHE_DIR=$cache/inductor TRITON_CACHE_DIR=$cache/triton
    if [ "$mode" = recorded ]; then
        LD_PRELOAD=$LIB VRAMTRACE_OUTPUT="$R/traces/$w.$tag.vramtrace" timeout 300 \
            python3 "$HERE/../programs/recording_equality.py" "$w" "$R/json/$w.$tag.recorded.json"
    else
        timeout 300 python3 "$HERE/../programs/recording_equality.py" "$w" "$R/json/$w.$tag.plain.json"
    fi >"$R/json/$w.$tag.$mode.log" 2>&1
    echo "$w $tag $mode rc=$?"
}
export -f one
export R HERE LIB

# Warm each workload's cache with one unmeasured run, then the measured pairs.
printf '%s\n' $WORKLOADS | xargs -P 3 -I{} bash -c 'one {} plain warmup "$R/cache/{}"'
{
    for w in $WORKLOADS; do
        echo "$w plain warm $R/cache/$w"
        echo "$w recorded warm $R/cache/$w"
    done
    for w in compile-default compile-reduce-overhead; do
        echo "$w plain cold $R/cache/$w.cold.plain"
        echo "$w recorded cold $R/cache/$w.cold.recorded"
    done
} | xargs -P 3 -L 1 bash -c 'one "$0" "$1" "$2" "$3"'

python3 "$HERE/recording_equality_compare.py" "$R/json" >"$OUT/equality.txt"
cat "$OUT/equality.txt"
tar -C "$R" -czf "$OUT/equality-json.tar.gz" json
tar -C "$R" -czf "$OUT/equality-traces.tar.gz" traces
