#!/bin/sh
# The H200 run of issue 16 (docs/validation.md, "Part 3"), one call of the device tool.
#   sh validation_device_run.sh DIR OUT
# DIR holds bin/vramtrace + bin/libvramtrace_preload.so (release, stripped), whl/*.whl (rmm-cu13
# 26.10, librmm-cu13, rapids-logger), w/ (from ../programs/: validation_workloads.py,
# torch_truth.py, torch_train.py, models.py, jax_validate.py; ../probes/async_probes.py;
# rmm_replay.py) and logs/*.rmm.csv.gz (RMM logs). Everything
# lands in OUT/validation.tar.gz.
#
# 1. the seven PyTorch workloads of validation_workloads.py, each as four processes:
#    `vramtrace record --requests` (backend:cudaMallocAsync: the request trace and the real pool
#    of the same run), the same under CUDA_LAUNCH_BLOCKING=1 (every kernel done before the next
#    request: no free is pending), native and expandable_segments (PyTorch's memory history and
#    snapshot of the same seeded program);
# 2. async_probes.py (the pool with kernels running);
# 3. jax_validate.py: mlp and varshape under the default BFC, PREALLOCATE=false (also with BFC's
#    own log, TF_CPP_VMODULE=bfc_allocator=4) and `record --requests` (platform allocator);
# 4. rmm_replay.py over the carried logs (exported beforehand with `vramtrace export --to rmm-csv`
#    from samples/traces/h200-torch/*.native.vramtrace and from step 1's request traces), alone
#    on the GPU but for the JAX runs without preallocation.
set -u
dir=$(cd "${1:?usage: validation_device_run.sh DIR OUT}" && pwd)
out=${2:?usage: validation_device_run.sh DIR OUT}
raw=$out/validation
mkdir -p "$raw"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
vt=$dir/bin/vramtrace
w=$dir/w
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$raw/gpu.csv" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$dir"/whl/*.whl > "$raw/pip.log" 2>&1 &
pip_pid=$!

W="generate_kv side_stream amp_vit multires_cnn varbatch_infer lstm_varlen transformer"
torch_run() { # NAME CONF [extra env]
  n=$1; conf=$2; shift 2
  for x in $W; do
    case $n in
      async*) env "$@" timeout 100 "$vt" record --requests -o "$raw/$x.$n.vramtrace" -- \
                python3 "$w/validation_workloads.py" $x "$raw" $x.$n > "$raw/$x.$n.log" 2>&1 & ;;
      *) env PYTORCH_CUDA_ALLOC_CONF=$conf "$@" timeout 100 \
                python3 "$w/validation_workloads.py" $x "$raw" $x.$n > "$raw/$x.$n.log" 2>&1 & ;;
    esac
  done
}
stamp torch async + native
torch_run async "" PYTORCH_CUDA_ALLOC_CONF=
torch_run native ""
wait_torch() { wait; }  # every child: the pip install ends long before the workloads
wait_torch
stamp torch blocking + expandable
torch_run async_blocking "" PYTORCH_CUDA_ALLOC_CONF= CUDA_LAUNCH_BLOCKING=1
torch_run expandable expandable_segments:True
wait_torch
grep -h -E "reserved_peak|Error|error" "$raw"/*.log | head -60

stamp probes
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 40 python3 "$w/async_probes.py" "$raw/async_probes.json" > "$raw/async_probes.log" 2>&1
tail -3 "$raw/async_probes.log"

stamp rmm + jax
(export PYTHONPATH=/tmp/site; timeout 150 python3 "$w/rmm_replay.py" "$raw/rmm_replay.json" \
   "$dir"/logs/*.rmm.csv.gz > "$raw/rmm_replay.log" 2>&1) &
for j in mlp varshape; do
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 120 python3 "$w/jax_validate.py" $j "$raw/jax_$j.growth.json" > "$raw/jax_$j.growth.log" 2>&1 &
  timeout 120 "$vt" record --requests -o "$raw/jax_$j.platform.vramtrace" -- \
    python3 "$w/jax_validate.py" $j "$raw/jax_$j.platform.json" > "$raw/jax_$j.platform.log" 2>&1 &
  XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=bfc_allocator=4 timeout 120 \
    python3 "$w/jax_validate.py" $j "$raw/jax_$j.bfclog.json" > "$raw/jax_$j.bfclog.out" 2> "$raw/jax_$j.bfclog.err" &
done
wait  # the JAX runs and the RMM replay
for j in mlp varshape; do  # the default preallocates 75% of the device: one at a time
  timeout 60 python3 "$w/jax_validate.py" $j "$raw/jax_$j.default.json" > "$raw/jax_$j.default.log" 2>&1
done
grep -h -o '"peak_bytes_in_use": [0-9]*\|"peak_pool_bytes": [0-9]*\|"pool_bytes": [0-9]*' "$raw"/jax_*.json | head -20
gzip -f "$raw"/jax_*.bfclog.err
tail -5 "$raw/rmm_replay.log"
stamp tar
tar -czf "$out/validation.tar.gz" -C "$out" validation
ls -la "$out"
stamp done
