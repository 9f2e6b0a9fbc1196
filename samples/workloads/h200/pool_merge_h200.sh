#!/usr/bin/env bash
# Which free ranges of the real stream-ordered pool merge, and when (docs/validation.md, "The
# pool's placement, read off its real addresses", table "Merging on the H200"): every case of
# probes/pool_merge.py, REPS times (default 3), one process each, under
# PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, unrecorded; packed into $OUT/pool_merge.tar.gz
# after each round. Stops starting runs after LIMIT seconds (default 200).
#
#   OUT=/tmp/out bash samples/workloads/h200/pool_merge_h200.sh
set -u
OUT=${OUT:-/tmp/pool_merge}
R=$OUT/pool_merge
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$R"
start=$(date +%s)
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} >"$R/env.txt" 2>&1
for rep in $(seq "${REPS:-3}"); do
    for c in pend_pend done_pend_busy done_pend_synced done_pend_waited done_pend_idle tier_busy tier_idle; do
        [ $(( $(date +%s) - start )) -gt "${LIMIT:-200}" ] && break 2
        PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 30 \
            python3 "$HERE/../probes/pool_merge.py" "$c" "$R/$c.$rep.json" >>"$R/log.txt" 2>&1
        echo "$c $rep rc=$? $(( $(date +%s) - start ))s" >>"$R/progress.log"
    done
    tar -C "$OUT" -czf "$OUT/pool_merge.tar.gz" pool_merge
done
tar -C "$OUT" -czf "$OUT/pool_merge.tar.gz" pool_merge
cat "$R/progress.log"
