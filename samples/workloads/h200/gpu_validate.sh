#!/usr/bin/env bash
# Records every validation workload on a GPU machine and collects traces, program outputs and
# ground-truth JSON into $OUT/results.tar.gz. Expects in $BIN: vramtrace,
# libvramtrace_preload.so, cudarc-alloc, and the workload sources (a copy of samples/workloads).
#
#   BIN=.dev-recorder OUT=/tmp/out bash gpu_validate.sh
set -u
BIN=${BIN:-.dev-recorder}
R=$OUT/r
mkdir -p "$R"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
VT="$BIN/vramtrace record --preload $BIN/libvramtrace_preload.so"

# name, then the command: records it, keeps stdout/stderr, times it.
rec() {
    local name=$1
    shift
    local t0=$(date +%s%N)
    timeout 150 $VT -o "$R/$name.vramtrace" "$@" >"$R/$name.out" 2>"$R/$name.err"
    local rc=$?
    echo "$name rc=$rc ms=$((($(date +%s%N) - t0) / 1000000))" | tee -a "$R/runs.txt"
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    nvcc --version | tail -2
    ldd --version | head -1
    python3 --version
    python3 -m pip list 2>/dev/null | grep -iE "^(torch|jax|jaxlib|jax-cuda13-plugin|cupy-cuda13x|numba|numba-cuda|cuda-bindings|nvidia-cuda-runtime) "
} >"$R/machine.txt" 2>&1

W=$BIN/workloads
nvcc -O2 -o /tmp/nvcc_static $W/programs/cudart_counts.cu
nvcc -O2 --cudart shared -o /tmp/nvcc_shared $W/programs/cudart_counts.cu
nvcc -O2 --default-stream per-thread -o /tmp/nvcc_ptds $W/programs/cudart_counts.cu
gcc -O2 -I/usr/local/cuda/include -o /tmp/driver_lcuda $W/programs/driver_counts.c -L/usr/local/cuda/lib64/stubs -lcuda
rec nvcc_static -- /tmp/nvcc_static
rec nvcc_shared -- /tmp/nvcc_shared
rec nvcc_ptds -- /tmp/nvcc_ptds
rec driver_lcuda -- /tmp/driver_lcuda
rec cudarc -- "$BIN/cudarc-alloc"

for m in mlp transformer; do
    rec torch_${m}_requests --requests -- python3 $W/programs/torch_train.py $m "$R/torch_${m}_requests.json"
    PYTORCH_CUDA_ALLOC_CONF= rec torch_${m}_native -- python3 $W/programs/torch_train.py $m "$R/torch_${m}_native.json"
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True rec torch_${m}_expandable -- python3 $W/programs/torch_train.py $m "$R/torch_${m}_expandable.json"
done

rec jax_default -- python3 $W/programs/jax_train.py "$R/jax_default.json"
XLA_PYTHON_CLIENT_PREALLOCATE=false rec jax_nopreallocate -- python3 $W/programs/jax_train.py "$R/jax_nopreallocate.json"
XLA_PYTHON_CLIENT_ALLOCATOR=platform rec jax_platform -- python3 $W/programs/jax_train.py "$R/jax_platform.json"
rec cupy -- python3 $W/programs/cupy_alloc.py "$R/cupy.json"
rec numba -- python3 $W/programs/numba_alloc.py "$R/numba.json"

# An import that never touches CUDA must leave no file.
mkdir -p /tmp/none && $VT -o /tmp/none/ -- python3 -c 'import torch' 2>"$R/import_only.err"
ls /tmp/none >"$R/import_only.files"

tar czf "$OUT/results.tar.gz" -C "$OUT" r
