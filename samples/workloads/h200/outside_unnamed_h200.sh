#!/usr/bin/env bash
# Issue 26, item 2: what holds the device memory no allocation call names (docs/validation.md
# "Outside the pool, named", "What the unnamed part is"). Runs probes/outside_unnamed.py,
# unrecorded, under the default lazy module loading and under CUDA_MODULE_LOADING=EAGER, one
# process at a time. About 40 s. Results: $OUT/outside_unnamed.tar.gz (lazy.json, eager.json,
# run.log, machine.txt).
#
#   samples/workloads/h200/outside_unnamed_h200.sh
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
P=$HERE/../probes/outside_unnamed.py
OUT=${OUT:-/tmp/outside-unnamed-out}
R=/tmp/outside_unnamed
rm -rf "$R"
mkdir -p "$R" "$OUT"
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'
} >"$R/machine.txt" 2>&1
for mode in lazy eager; do
    if [ $mode = eager ]; then export CUDA_MODULE_LOADING=EAGER; else unset CUDA_MODULE_LOADING; fi
    timeout 120 python3 -m torch.distributed.run --nproc-per-node 1 "$P" "$R/$mode.json" >>"$R/run.log" 2>&1
    echo "$mode rc=$?" >>"$R/run.log"
done
tar -C /tmp -czf "$OUT/outside_unnamed.tar.gz" outside_unnamed
tail -5 "$R/run.log"
