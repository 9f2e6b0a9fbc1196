#!/usr/bin/env bash
# The H200 run of issue 24 (docs/validation.md, "The stream-ordered pool from its
# synchronizations"): the pool probes, then the workloads, each phase packed under OUT as soon as
# it ends.
#
#   bash samples/workloads/h200/pool_h200.sh DIR OUT
#
# DIR holds libvramtrace_preload.so (cargo build --release -p vramtrace-recorder), loaded as the
# launcher loads it (LD_PRELOAD, VRAMTRACE_OUTPUT, VRAMTRACE_STACKS=none), and w/, a copy of
# samples/workloads/ (programs/, probes/ and the flat scripts they import). Phase 1: every probe of probes/pool_rules.py in its own process under
# backend:cudaMallocAsync, recorded (one at a time: a probe's "busy" stream must not share the GPU
# with another process). Phase 2: every workload of programs/pool_workloads.py three times:
# recorded under the native allocator, recorded under backend:cudaMallocAsync, and unrecorded under
# backend:cudaMallocAsync (four processes at a time, the phase cut at LIMIT seconds, default 400). OUT gets env.txt, probes.tar.gz,
# workloads.tar.gz (JSON and logs) and traces.tar.gz.
set -u
DIR=$(cd "${1:?usage: pool_h200.sh DIR OUT}" && pwd)
OUT=${2:?usage: pool_h200.sh DIR OUT}
R=/tmp/pool-h200
mkdir -p "$R/probes" "$R/json" "$R/traces" "$OUT"
export PYTHONUNBUFFERED=1 VRAMTRACE_STACKS=none
LIB="$DIR/libvramtrace_preload.so"
W="$DIR/w"
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} >"$OUT/env.txt" 2>&1

PROBES="same_stream_busy cross_busy cross_wait_stream cross_stream_sync cross_device_sync
cross_event_sync cross_query cross_idle pending_first ties threshold_zero empty_cache"
for p in $PROBES; do
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync LD_PRELOAD=$LIB \
        VRAMTRACE_OUTPUT="$R/probes/$p.vramtrace" timeout 120 \
        python3 "$W/probes/pool_rules.py" "$p" "$R/probes/$p.json" >"$R/probes/$p.log" 2>&1
    echo "probe $p rc=$?"
done
tar -C "$R" -czf "$OUT/probes.tar.gz" probes

one() { # WORKLOAD MODE(native|async|async-plain)
    local w=$1 mode=$2
    local conf=backend:cudaMallocAsync
    [ "$mode" = native ] && conf=
    if [ "$mode" = async-plain ]; then
        PYTORCH_CUDA_ALLOC_CONF=$conf timeout 400 python3 "$W/programs/pool_workloads.py" "$w" \
            "$R/json/$w.$mode.json"
    else
        PYTORCH_CUDA_ALLOC_CONF=$conf LD_PRELOAD=$LIB VRAMTRACE_OUTPUT="$R/traces/$w.$mode.vramtrace" \
            timeout 400 python3 "$W/programs/pool_workloads.py" "$w" "$R/json/$w.$mode.json"
    fi >"$R/json/$w.$mode.log" 2>&1
    echo "workload $w $mode rc=$?"
}
export -f one
export R LIB W
WORKLOADS="side_stream generate_kv gpt2_varlen amp_vit multires_cnn transformer varbatch_infer"
# At most LIMIT seconds for the phase (the device call's limit): what finished is packed.
for w in $WORKLOADS; do for m in native async async-plain; do echo "$w $m"; done; done |
    timeout "${LIMIT:-400}" xargs -P 4 -L 1 bash -c 'one "$0" "$1"'
tar -C "$R" -czf "$OUT/workloads.tar.gz" json
tar -C "$R" -czf "$OUT/traces.tar.gz" traces
ls -la "$OUT"
