#!/bin/sh
# The real run of every setting `vramtrace tune` picks today on the bundled h200-tune traces
# (docs/validation.md, "tune on an H200", "The picks of the capture-keyed bands"): for each
# workload, tune's best setting that is not the recorded one is read from `tune --json` and the
# workload runs under it (replay_validate.py's figures: NAME.stats.json). Everything is packed
# into OUT/tune-picks.tar.gz.
#   sh samples/workloads/h200/tune_picks_h200.sh VRAMTRACE OUT
# VRAMTRACE is a release build of the analyzer; the workloads are ../programs/tune_validate.py.
set -u
vt=${1:?usage: tune_picks_h200.sh VRAMTRACE OUT}
out=${2:?usage: tune_picks_h200.sh VRAMTRACE OUT}
here=$(cd "$(dirname "$0")" && pwd)
traces=$here/../../traces/h200-tune
raw=$out/tune-picks
mkdir -p "$raw"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$raw/gpu.csv" 2>&1
python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' > "$raw/versions.txt" 2>&1
W="transformer_varlen multires_cnn generate"
for w in $W; do
  "$vt" tune "$traces/$w.recorded.vramtrace" --json > "$raw/$w.tune.json" 2> "$raw/$w.tune.err"
  "$vt" tune "$traces/$w.recorded.vramtrace" > "$raw/$w.tune.txt" 2>&1
  python3 -c 'import json,sys; r=[x for x in json.load(open(sys.argv[1]))["ranked"] if not x["recorded"]]; print(r[0]["select"])' "$raw/$w.tune.json" > "$raw/$w.select"
done
# Processes side by side: each has its own caching allocator.
for w in $W; do
  ( eval "$(cat "$raw/$w.select")"; env | grep PYTORCH_CUDA_ALLOC_CONF > "$raw/$w.picked.conf"
    python3 "$here/../programs/tune_validate.py" $w "$raw" $w.picked > "$raw/$w.picked.log" 2>&1 ) &
done
wait
tar -czf "$out/tune-picks.tar.gz" -C "$out" tune-picks
rm -rf "$raw"
