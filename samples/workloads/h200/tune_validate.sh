#!/bin/sh
# The H200 validation of `vramtrace tune` (docs/validation.md, "tune"): records three workloads
# under the default allocator (PyTorch's own request history and figures), tunes each trace,
# runs each workload again under tune's best setting, and packs everything into
# OUT/tune-validation.tar.gz. Processes of one phase run side by side on the GPU: each has its
# own caching allocator, so their figures do not disturb each other.
#   sh samples/workloads/h200/tune_validate.sh BIN OUT
# BIN holds vramtrace and import_torch_trace (release builds), and from ../programs/
# tune_validate.py, replay_validate.py, torch_truth.py and models.py.
set -u
bin=${1:?usage: tune_validate.sh BIN OUT}
out=${2:?usage: tune_validate.sh BIN OUT}
raw=$out/tune-validation
mkdir -p "$raw"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$raw/gpu.csv" 2>&1
python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' > "$raw/versions.txt" 2>&1
python3 "$bin/tune_validate.py" context "$raw" > "$raw/context.log" 2>&1
W="transformer_varlen multires_cnn generate"
for w in $W; do
  PYTORCH_CUDA_ALLOC_CONF= python3 "$bin/tune_validate.py" $w "$raw" $w.recorded > "$raw/$w.recorded.log" 2>&1 &
done
wait
for w in $W; do
  gunzip -kf "$raw/$w.recorded.requests.csv.gz"
  "$bin/import_torch_trace" "$raw/$w.recorded.requests.csv" "$raw/$w.recorded.vramtrace" "$raw/$w.recorded.stats.json" > "$raw/$w.import.log" 2>&1
  rm -f "$raw/$w.recorded.requests.csv"
  ( time "$bin/vramtrace" tune "$raw/$w.recorded.vramtrace" --json ) > "$raw/$w.tune.json" 2> "$raw/$w.tune.time"
  "$bin/vramtrace" tune "$raw/$w.recorded.vramtrace" > "$raw/$w.tune.txt" 2>&1
  # The best setting that is not the recorded one: its exact line to paste.
  python3 -c 'import json,sys; r=[x for x in json.load(open(sys.argv[1]))["ranked"] if not x["recorded"]]; print(r[0]["select"])' "$raw/$w.tune.json" > "$raw/$w.select"
done
for w in $W; do
  ( eval "$(cat "$raw/$w.select")"; python3 "$bin/tune_validate.py" $w "$raw" $w.tuned > "$raw/$w.tuned.log" 2>&1 ) &
done
wait
cat "$raw"/context.log "$raw"/*.log
tar -czf "$out/tune-validation.tar.gz" -C "$out" tune-validation
rm -rf "$raw"
