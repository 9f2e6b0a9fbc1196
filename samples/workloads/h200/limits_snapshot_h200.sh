#!/usr/bin/env bash
# Snapshot to page on the H200 machine's CPU, two vramtrace binaries against each other and
# against PyTorch's `trace_plot` (analyzer/BENCHMARKS.md, "At the limit", H200 rows; issue 27,
# item 1): a real GPT-2 small training snapshot of ENTRIES entries (programs/snapshot_page_gpt2.py,
# as snapshot_page_h200.sh makes it), then REPS repetitions, each running in turn
#   python3 -m torch.cuda._memory_viz trace_plot snap.pickle -o tp.html   (import torch included)
#   and for BASE/vramtrace, then NEW/vramtrace:
#     report snap.pickle -o DIR                   (the default policies)
#     report snap.pickle --policy pytorch -o DIR  (the header's search and one replay)
#     import snap.pickle -o snap.vramtrace        (the unpickler and the trace writer)
# through analyzer/benches/tune_vs_report.py (wall, CPU of the child, peak RSS; medians with
# min-max). Expected run time about 120 s (the snapshot 30-60 s); BUDGET_S caps it.
#
#   BASE=.dev/limits/base NEW=.dev/limits/new bash samples/workloads/h200/limits_snapshot_h200.sh
#
# BASE and NEW each hold a release `vramtrace` (no Rust there). Everything goes to $OUT/r,
# packed into $OUT/limits_snapshot.tar.gz after each phase (the snapshot left out).
set -u
BASE=${BASE:-.dev/limits/base}
NEW=${NEW:-.dev/limits/new}
REPS=${REPS:-5}
ENTRIES=${ENTRIES:-215000}
OUT=${OUT:-/tmp/limits_snapshot}
R=$OUT/r
HERE=$(cd "$(dirname "$0")" && pwd)
BENCH=${BENCH:-$HERE/../../../analyzer/benches/tune_vs_report.py}
mkdir -p "$R"
start=$(date +%s)
pack() { tar -C "$OUT" -czf "$OUT/limits_snapshot.tar.gz" r; echo "$1 $(( $(date +%s) - start ))s" >>"$R/progress.log"; }
{
    date -u
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    nproc
    python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'
    uptime
} >"$R/machine.txt" 2>&1
snap=$OUT/snap.pickle
timeout 120 python3 "$HERE/../programs/snapshot_page_gpt2.py" "$snap" --entries "$ENTRIES" \
    >"$R/snapshot.log" 2>&1
ls -l "$snap" >>"$R/snapshot.log" 2>&1
pack snapshot
[ -s "$snap" ] || exit 1
timeout $(( ${BUDGET_S:-240} - ($(date +%s) - start) - 10 )) \
    python3 "$BENCH" --reps "$REPS" --bin "base=$BASE/vramtrace" --bin "new=$NEW/vramtrace" \
    --peer "trace_plot=python3 -m torch.cuda._memory_viz trace_plot $snap -o $OUT/tp.html" \
    --command "report $snap -o $OUT/page" \
    --command "report $snap --policy pytorch -o $OUT/page-pytorch" \
    --command "import $snap -o $OUT/snap.vramtrace" >"$R/alternated.txt" 2>&1
echo "exit $?" >>"$R/alternated.txt"
uptime >>"$R/machine.txt"
ls -l "$OUT"/tp.html "$OUT"/page/index.html >>"$R/alternated.txt" 2>&1
pack done
