#!/bin/sh
# Second validation pass: the allocator's release and garbage-collection paths. Each process caps
# PyTorch with torch.cuda.set_per_process_memory_fraction (REPLAY_MEMORY_FRACTION) below what the
# workload reserves uncapped, so the caching allocator must free cached segments (or unmap pages,
# or collect garbage) and retry; the last four caps are too small and end in an out-of-memory
# error. Results in OUT/replay-pressure.tar.gz.
#   sh samples/workloads/h200/replay_validate_pressure.sh OUTDIR
set -u
here=$(dirname "$0")
out=${1:?usage: replay_validate_pressure.sh OUTDIR}
raw=$out/replay-pressure
mkdir -p "$raw"
total=$(python3 -c 'import torch; print(torch.cuda.get_device_properties(0).total_memory)')
frac() { python3 -c "print(repr($1 * 2**30 / $total))"; }
run() { # NAME WORKLOAD CONF CAP_GIB
  PYTORCH_CUDA_ALLOC_CONF=$3 REPLAY_MEMORY_FRACTION=$(frac $4) \
    python3 "$here/../programs/replay_validate.py" $2 "$raw" $1 > "$raw/$1.log" 2>&1 &
}
run transformer_varlen.cap5_5g transformer_varlen "" 5.5
run transformer_varlen.expandable_cap4_6g transformer_varlen expandable_segments:True 4.6
run transformer_varlen.gc0_6_cap8g transformer_varlen garbage_collection_threshold:0.6 8
run resnet.cap6g resnet "" 6
run resnet.split64_cap7g resnet max_split_size_mb:64 7
run gpt_ckpt_varlen.gc0_5_cap5g gpt_ckpt_varlen garbage_collection_threshold:0.5 5
run gpt_ckpt_varlen.cap3g gpt_ckpt_varlen "" 3
run gpt_ckpt_varlen.cap2_5g gpt_ckpt_varlen "" 2.5
run transformer_varlen.expandable_cap4_2g transformer_varlen expandable_segments:True 4.2
run resnet.cap5_6g resnet "" 5.6
wait
cat "$raw"/*.log
tar -czf "$out/replay-pressure.tar.gz" -C "$out" replay-pressure
rm -rf "$raw"
