#!/usr/bin/env bash
# The real stream-ordered pool, one process at a time (docs/validation.md, "The stream-ordered
# pool from its synchronizations", table "Alone on the GPU"): every workload of
# programs/pool_workloads.py unrecorded under PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync,
# ROUNDS times (default 3), the workloads alternated, nothing else on the GPU; each round packed
# into $OUT/pool_solo.tar.gz as it ends. Stops starting runs after LIMIT seconds (default 500).
#
#   bash samples/workloads/h200/pool_solo_h200.sh
set -u
OUT=${OUT:-/tmp/pool_solo}
R=$OUT/pool_solo
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$R"
start=$(date +%s)
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} >"$R/env.txt" 2>&1
for round in $(seq "${ROUNDS:-3}"); do
    for w in generate_kv varbatch_infer multires_cnn transformer amp_vit gpt2_varlen; do
        [ $(( $(date +%s) - start )) -gt "${LIMIT:-500}" ] && break 2
        PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 60 \
            python3 "$HERE/../programs/pool_workloads.py" "$w" "$R/$w.$round.json" >"$R/$w.$round.log" 2>&1
        echo "$w $round rc=$? $(( $(date +%s) - start ))s" >>"$R/progress.log"
    done
    tar -C "$OUT" -czf "$OUT/pool_solo.tar.gz" pool_solo
done
