#!/usr/bin/env bash
# Issue 26, item 1: real distributed jobs, one trace per rank (docs/validation.md "Jobs on two
# H200s"). Each job of torch_jobs.py (DDP, FSDP fully sharded with and without CPU offload, a
# tensor-parallel MLP) runs under `vramtrace record` with its defaults, launched by
#   torchrun --nproc-per-node $NPROC
# then, per job directory: `vramtrace summary DIR`, `replay DIR`, `fit DIR`, `tune DIR` (text),
# `summary --json` and `replay --policy pytorch --json` of every rank's trace, and
# jobs_compare.py's table (each rank's peaks and replay against its own max_memory_reserved).
#
#   BIN=DIR [W=PROGRAMS] [TORCHRUN=torchrun] [NPROC=2] [JOBS="ddp fsdp fsdp-offload tp"] samples/workloads/h200/jobs_x2_h200.sh
#
# DIR holds `vramtrace` and libvramtrace_preload.so side by side. NPROC=1 on one GPU is the smoke
# test; the lead runs NPROC=2 on an nvidia-h200-x2. About 30 s a job. Results:
# $OUT/jobs.tar.gz (packed after each job: one folder per job with traces, JSON and outputs,
# table.md, machine.txt).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(cd "${W:-$HERE/../programs}" && pwd)
BIN=$(cd "${BIN:?BIN=DIR with vramtrace and libvramtrace_preload.so}" && pwd)
NPROC=${NPROC:-2}
OUT=${OUT:-/tmp/jobs-out}
R=/tmp/jobs
rm -rf "$R"
mkdir -p "$R" "$OUT"
VT=$BIN/vramtrace
{
    date -u
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
    sha256sum "$VT" "$BIN/libvramtrace_preload.so"
    echo "NPROC=$NPROC"
} >"$R/machine.txt" 2>&1
pack() { tar -C /tmp -czf "$OUT/jobs.tar.gz" jobs; }
for job in ${JOBS:-ddp fsdp fsdp-offload tp}; do
    D=$R/$job
    mkdir -p "$D/summary" "$D/replay"
    timeout 240 "$VT" record -o "$D/" -- \
        ${TORCHRUN:-python3 -m torch.distributed.run} --nproc-per-node "$NPROC" "$W/torch_jobs.py" "$job" "$D" >"$D/run.log" 2>&1
    echo "record rc=$?" >>"$D/run.log"
    {
        for cmd in summary replay fit tune; do
            echo "\$ vramtrace $cmd $job/"
            timeout 120 "$VT" "$cmd" "$D/" 2>&1
        done
    } >"$D/outputs.txt"
    for t in "$D"/*.vramtrace; do
        n=$(basename "$t" .vramtrace)
        "$VT" summary "$t" --json >"$D/summary/$n.json" 2>>"$D/run.log"
        "$VT" replay "$t" --policy pytorch --json >"$D/replay/$n.json" 2>>"$D/run.log"
    done
    pack
done
python3 "$HERE/jobs_compare.py" "$R" >"$R/table.md" 2>&1
cat "$R/table.md"
pack
