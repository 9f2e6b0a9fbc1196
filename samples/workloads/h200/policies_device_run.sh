#!/bin/sh
# The H200 run of issue 6: PyTorch's backend:cudaMallocAsync on four workloads (the pool's real
# reserved peak), then `vramtrace replay --on-device` of the same workloads' request streams and
# of the pool probes (policies_probes.py). Everything lands in OUT/policies-device.tar.gz.
#   sh policies_device_run.sh DIR OUT
# DIR holds: vramtrace (built with --features device), from ../programs/ replay_validate.py,
# torch_truth.py, models.py and policies_async_validate.py, traces/*.native.vramtrace,
# probes/*.vramtrace.
set -u
dir=${1:?usage: policies_device_run.sh DIR OUT}
out=${2:?usage: policies_device_run.sh DIR OUT}
raw=$out/policies-device
mkdir -p "$raw"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$raw/gpu.csv" 2>&1
for w in mlp transformer_varlen resnet gpt_ckpt_varlen; do
  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 150 python3 "$dir/policies_async_validate.py" $w "$raw" > "$raw/$w.async.log" 2>&1 &
done
wait
cat "$raw"/*.async.log
for t in "$dir"/traces/*.vramtrace "$dir"/probes/*.vramtrace; do
  n=$(basename "$t" .vramtrace)
  timeout 40 "$dir/vramtrace" replay --on-device --json "$t" > "$raw/$n.ondevice.json" 2> "$raw/$n.ondevice.err"
  echo "$n rc=$? $(head -c 300 "$raw/$n.ondevice.err")"
  grep -m3 -E '"(reserved_high|peak_taken|peak_requested)"' "$raw/$n.ondevice.json"
done
tar -czf "$out/policies-device.tar.gz" -C "$out" policies-device
