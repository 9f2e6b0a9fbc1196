#!/usr/bin/env bash
# Issue 26, item 2 on one H200 (docs/validation.md "Outside the pool, named"): outside_pool.py
# (a single-rank NCCL process group with an all_reduce, cuBLAS matmuls, a cuDNN convolution)
# under `vramtrace record` with its defaults, launched by torchrun --nproc-per-node 1; then
# `vramtrace summary` (text and --json) of every trace, and outside_compare.py's table: the
# driver's count (NVML, recorded) against the memory the trace names, per process.
#
#   BIN=DIR [W=PROGRAMS] [TORCHRUN=torchrun] samples/workloads/h200/outside_h200.sh
#
# DIR holds `vramtrace` and libvramtrace_preload.so side by side (cargo build --release). About
# 40 s. Results: $OUT/outside.tar.gz (traces/, summary.txt, summary/ (one --json per trace), truth.json,
# table.md, run.log, machine.txt).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(cd "${W:-$HERE/../programs}" && pwd)
BIN=$(cd "${BIN:?BIN=DIR with vramtrace and libvramtrace_preload.so}" && pwd)
OUT=${OUT:-/tmp/outside-out}
R=/tmp/outside
rm -rf "$R"
mkdir -p "$R/traces" "$OUT"
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
    sha256sum "$BIN/vramtrace" "$BIN/libvramtrace_preload.so"
    ls /usr/lib/x86_64-linux-gnu/libnvidia-ml.so* 2>&1
} >"$R/machine.txt" 2>&1
timeout 180 "$BIN/vramtrace" record -o "$R/traces/" -- \
    ${TORCHRUN:-python3 -m torch.distributed.run} --nproc-per-node 1 "$W/outside_pool.py" "$R/truth.json" >"$R/run.log" 2>&1
echo "record rc=$?" >>"$R/run.log"
mkdir -p "$R/summary"
for t in "$R"/traces/*.vramtrace; do
    "$BIN/vramtrace" summary "$t" >>"$R/summary.txt" 2>&1
    "$BIN/vramtrace" summary "$t" --json >"$R/summary/$(basename "$t" .vramtrace).json" 2>>"$R/run.log"
    "$BIN/vramtrace" info "$t" >>"$R/summary.txt" 2>&1
done
python3 "$HERE/outside_compare.py" "$R" >"$R/table.md" 2>&1
cat "$R/table.md"
tar -C /tmp -czf "$OUT/outside.tar.gz" outside
