#!/usr/bin/env bash
# Re-records the validation fixtures with stacks (issue "Recorder, part 3": every bundled real
# sample carries stacks). The same seeded workloads and configurations as
# replay_validate.sh + replay_validate_pressure.sh (samples/traces/h200-torch/), tune_validate.sh
# (samples/traces/h200-tune/) and validation_device_run.sh's `transformer` under the native
# allocator (samples/traces/h200-validation/transformer.native.*), each process now run under
# `vramtrace record` with the recorder's defaults (PyTorch's allocator unchanged, every tensor
# through its trace tracker, Python stacks). Each process still writes what it wrote before:
# PyTorch's own request history (NAME.requests.csv.gz, the cross-check of the trace) and its
# `memory_stats()` (NAME.stats.json, the ground truth). Then:
#   tune    `vramtrace tune` of each new `.recorded` trace, and the workload run again, unrecorded,
#           under the best setting it names (as tune_validate.sh does);
#   snap    a 215,000-entry GPT-2 snapshot (snapshot_page_gpt2.py) for local profiling of
#           `report snapshot.pickle` (analyzer/BENCHMARKS.md, "Snapshot to page").
#
#   BIN=DIR bash samples/workloads/h200/stacks_rerecord_h200.sh
#
# DIR holds the release `vramtrace` and `libvramtrace_preload.so` (stripped). Processes of one
# wave run side by side on the GPU (each has its own caching allocator). Expected run time: about
# 5 minutes (four waves of 20-40 s each, the tune runs, the snapshot about 60 s). Results, packed
# after each phase: $OUT/torch.tar.gz, torch-csv.tar.gz, tune.tar.gz, validation.tar.gz,
# snap.tar.gz.
set -u
BIN=$(cd "${BIN:?BIN=DIR}" && pwd)
OUT=${OUT:-/tmp/rerecord}
HERE=$(cd "$(dirname "$0")" && pwd)
R=/tmp/rr
mkdir -p "$R/torch" "$R/tune" "$R/validation" "$R/snap" "$OUT"
export PYTHONUNBUFFERED=1
VT="$BIN/vramtrace record --preload $BIN/libvramtrace_preload.so"
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$R/progress.log"; }
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, torch.version.cuda)'
    "$BIN/vramtrace" --version
    date -u
} >"$R/machine.txt" 2>&1

# NAME WORKLOAD CONF [CAP_GIB]: replay_validate.py under the recorder, in the background.
total=$(python3 -c 'import torch; print(torch.cuda.get_device_properties(0).total_memory)')
frac() { python3 -c "print(repr($1 * 2**30 / $total))"; }
torch_run() {
    local fraction=
    [ -n "${4:-}" ] && fraction=$(frac "$4")
    PYTORCH_CUDA_ALLOC_CONF=$3 REPLAY_MEMORY_FRACTION=$fraction timeout 200 \
        $VT -o "$R/torch/$1.vramtrace" -- \
        python3 "$HERE/../programs/replay_validate.py" "$2" "$R/torch" "$1" >"$R/torch/$1.log" 2>&1 &
}
pack_torch() {
    tar -czf "$OUT/torch.tar.gz" -C "$R" --exclude='*.csv.gz' torch machine.txt progress.log
    tar -czf "$OUT/torch-csv.tar.gz" -C "$R" --wildcards 'torch/*.csv.gz'
}

stamp "wave 1: replay_validate.sh's configurations"
for w in mlp transformer_varlen resnet gpt_ckpt_varlen; do
    torch_run $w.native $w ""
    torch_run $w.expandable $w expandable_segments:True
    torch_run $w.split64 $w max_split_size_mb:64,roundup_power2_divisions:4
done
wait
pack_torch
stamp "wave 2: replay_validate_pressure.sh's configurations"
torch_run transformer_varlen.cap5_5g transformer_varlen "" 5.5
torch_run transformer_varlen.expandable_cap4_6g transformer_varlen expandable_segments:True 4.6
torch_run transformer_varlen.gc0_6_cap8g transformer_varlen garbage_collection_threshold:0.6 8
torch_run resnet.cap6g resnet "" 6
torch_run resnet.split64_cap7g resnet max_split_size_mb:64 7
torch_run gpt_ckpt_varlen.gc0_5_cap5g gpt_ckpt_varlen garbage_collection_threshold:0.5 5
torch_run gpt_ckpt_varlen.cap3g gpt_ckpt_varlen "" 3
torch_run gpt_ckpt_varlen.cap2_5g gpt_ckpt_varlen "" 2.5
torch_run transformer_varlen.expandable_cap4_2g transformer_varlen expandable_segments:True 4.2
torch_run resnet.cap5_6g resnet "" 5.6
# validation_device_run.sh's transformer under the native allocator, beside them.
PYTORCH_CUDA_ALLOC_CONF= timeout 200 $VT -o "$R/validation/transformer.native.vramtrace" -- \
    python3 "$HERE/../programs/validation_workloads.py" transformer "$R/validation" transformer.native \
    >"$R/validation/transformer.native.log" 2>&1 &
wait
pack_torch
tar -czf "$OUT/validation.tar.gz" -C "$R" validation
grep -h "reserved_peak" "$R"/torch/*.log "$R"/validation/*.log

stamp "tune: three workloads recorded, tuned, run under the best setting"
python3 "$HERE/../programs/tune_validate.py" context "$R/tune" >"$R/tune/context.log" 2>&1
W="transformer_varlen multires_cnn generate"
for w in $W; do
    PYTORCH_CUDA_ALLOC_CONF= timeout 200 $VT -o "$R/tune/$w.recorded.vramtrace" -- \
        python3 "$HERE/../programs/tune_validate.py" $w "$R/tune" $w.recorded >"$R/tune/$w.recorded.log" 2>&1 &
done
wait
for w in $W; do
    ( time "$BIN/vramtrace" tune "$R/tune/$w.recorded.vramtrace" --json ) \
        >"$R/tune/$w.tune.json" 2>"$R/tune/$w.tune.time"
    "$BIN/vramtrace" tune "$R/tune/$w.recorded.vramtrace" >"$R/tune/$w.tune.txt" 2>&1
    python3 -c 'import json,sys; r=[x for x in json.load(open(sys.argv[1]))["ranked"] if not x["recorded"]]; print(r[0]["select"])' \
        "$R/tune/$w.tune.json" >"$R/tune/$w.select"
done
for w in $W; do
    ( eval "$(cat "$R/tune/$w.select")"; timeout 200 python3 "$HERE/../programs/tune_validate.py" $w "$R/tune" $w.tuned \
        >"$R/tune/$w.tuned.log" 2>&1 ) &
done
wait
cat "$R"/tune/*.select "$R"/tune/*.log
tar -czf "$OUT/tune.tar.gz" -C "$R" tune

stamp "snap: a GPT-2 snapshot of 215,000 entries"
timeout 150 python3 "$HERE/../programs/snapshot_page_gpt2.py" "$R/snap/gpt2-215k.pickle" >"$R/snap/snapshot.log" 2>&1
gzip -f "$R/snap/gpt2-215k.pickle"
tar -cf "$OUT/snap.tar" -C "$R" snap
stamp done
pack_torch
ls -la "$OUT"
