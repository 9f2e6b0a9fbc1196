#!/usr/bin/env bash
# Snapshot to page on the H200 machine (analyzer/BENCHMARKS.md, "Snapshot to page"; issue 15's
# targets): a real GPT-2 small training snapshot (snapshot_page_gpt2.py: bf16 autocast, AdamW,
# PyTorch's _record_memory_history with max_entries=ENTRIES, _dump_snapshot), then, alternating
# REPS times (analyzer/benches/snapshot_page.py):
#   python3 -m torch.cuda._memory_viz trace_plot snap.pickle -o tp.html   (import torch included)
#   $BIN/vramtrace report snap.pickle -o out                             (its default policies)
#   pickle.load of the file                                               (CPython)
#   $BIN/unpickle snap.pickle 1                                           (vramtrace's unpickler)
# with wall and CPU time of each and both page sizes; then once each `vramtrace report
# --policy pytorch` and `--policy all` for reference. Expected run time: about 100 s (torch's
# import and the snapshot 30-60 s, the five repetitions about 35 s), at most BUDGET_S (240).
#
#   BIN=.dev-snapfast bash samples/workloads/h200/snapshot_page_h200.sh
#
# BIN holds vramtrace and unpickle (the release binaries; no Rust there). With BIN_B (another
# build's two binaries, main's say), its `import` and unpickler are then alternated with BIN's
# and `pickle.load` REPS times (analyzer/benches/snapshot_import.py --unpickle). Everything goes to
# $OUT, packed into $OUT/snapshot_page.tar.gz after each phase (the snapshot included).
set -u
BIN=${BIN:-.dev-snapfast}
REPS=${REPS:-5}
ENTRIES=${ENTRIES:-215000}
OUT=${OUT:-/tmp/snapshot_page}
R=$OUT/r
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$R"
start=$(date +%s)
pack() { tar -C "$OUT" -czf "$OUT/snapshot_page.tar.gz" r; echo "$1 $(( $(date +%s) - start ))s" >>"$R/progress.log"; }
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    nproc
    python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)'
    uptime
} >"$R/machine.txt" 2>&1
timeout 120 python3 "$HERE/../programs/snapshot_page_gpt2.py" "$R/snap.pickle" --entries "$ENTRIES" \
    >"$R/snapshot.log" 2>&1
pack snapshot
[ -s "$R/snap.pickle" ] || exit 1
# BIN_B (optional, another build's folder): its report alternated with BIN's, pages compared.
timeout $(( ${BUDGET_S:-240} - ($(date +%s) - start) - 25 )) \
    python3 "$HERE/../../../analyzer/benches/snapshot_page.py" "$R/snap.pickle" torch \
    --reps "$REPS" --bin "$BIN" ${BIN_B:+--bin-b "$BIN_B"} --json "$R/snapshot_page.json" \
    >"$R/snapshot_page.txt" 2>&1
pack alternating
if [ -n "${BIN_B:-}" ]; then
    timeout 60 python3 "$HERE/../../../analyzer/benches/snapshot_import.py" "$R/snap.pickle" \
        "$BIN_B/vramtrace" "$BIN/vramtrace" --unpickle "$BIN_B/unpickle" "$BIN/unpickle" \
        --reps "$REPS" >"$R/import_ab.txt" 2>&1
    pack import_ab
fi
TIMEFORMAT='%R s wall, %U s user, %S s system'
for p in pytorch all; do
    [ $(( $(date +%s) - start )) -gt $(( ${BUDGET_S:-240} - 20 )) ] && break
    echo "--policy $p" >>"$R/policies.txt"
    { time timeout 15 "$BIN/vramtrace" report "$R/snap.pickle" -o "$OUT/page-$p" --policy "$p" \
        >>"$R/policies.txt" 2>&1 || echo "exit $?" >>"$R/policies.txt"; } 2>>"$R/policies.txt"
done
cp "$OUT"/page-pytorch/index.html "$R/page-pytorch.html" 2>/dev/null
pack done
