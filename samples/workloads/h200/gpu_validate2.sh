#!/usr/bin/env bash
# Second pass, on two GPUs: device attribution of runtime programs, and torchrun with two ranks
# (NCCL), one trace per rank. Same conventions as gpu_validate.sh.
set -u
BIN=${BIN:-.dev-recorder}
R=$OUT/r2
mkdir -p "$R/ddp"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
VT="$BIN/vramtrace record --preload $BIN/libvramtrace_preload.so"
W=$BIN/workloads
nvidia-smi --query-gpu=index,name,driver_version --format=csv >"$R/machine.txt" 2>&1
nvcc -O2 -o /tmp/nvcc_static $W/programs/cudart_counts.cu
timeout 60 $VT -o "$R/nvcc_static.vramtrace" -- /tmp/nvcc_static >"$R/nvcc_static.out" 2>"$R/nvcc_static.err"
timeout 120 $VT -o "$R/torch_mlp_native.vramtrace" -- python3 $W/programs/torch_train.py mlp "$R/torch_mlp_native.json" >"$R/torch_mlp_native.out" 2>"$R/torch_mlp_native.err"
timeout 200 $VT -o "$R/ddp/" -- torchrun --nproc-per-node 2 $W/programs/torch_ddp.py "$R/ddp" >"$R/ddp.out" 2>"$R/ddp.err"
echo "ddp rc=$?" >>"$R/ddp.err"
tar czf "$OUT/results2.tar.gz" -C "$OUT" r2
