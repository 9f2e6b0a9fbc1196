#!/bin/sh
# Runs every workload of replay_validate.py under three allocator configurations, all processes
# side by side on one GPU (each process has its own caching allocator, so they do not disturb each
# other's figures), and packs the results into OUT/replay-validation.tar.gz.
#   sh samples/workloads/h200/replay_validate.sh OUTDIR
set -u
here=$(dirname "$0")
out=${1:?usage: replay_validate.sh OUTDIR}
raw=$out/replay-validation
mkdir -p "$raw"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$raw/gpu.csv" 2>&1
python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' > "$raw/versions.txt" 2>&1
for w in mlp transformer_varlen resnet gpt_ckpt_varlen; do
  PYTORCH_CUDA_ALLOC_CONF= python3 "$here/../programs/replay_validate.py" $w "$raw" $w.native > "$raw/$w.native.log" 2>&1 &
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 "$here/../programs/replay_validate.py" $w "$raw" $w.expandable > "$raw/$w.expandable.log" 2>&1 &
  PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64,roundup_power2_divisions:4 python3 "$here/../programs/replay_validate.py" $w "$raw" $w.split64 > "$raw/$w.split64.log" 2>&1 &
done
wait
cat "$raw"/*.log
tar -czf "$out/replay-validation.tar.gz" -C "$out" replay-validation
rm -rf "$raw"
