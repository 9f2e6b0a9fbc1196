#!/usr/bin/env bash
# The PyTorch tracker on a GPU, in about six minutes of run time on the H200 (docs/validation.md,
# recorder/BENCHMARKS.md; measured 2026-12-01: phases 1-2 take about 110 s, each of the 15
# overhead runs about 17 s):
#   1. completeness: torch_tracker_workloads.py complete-* recorded under the native and
#      expandable allocators, a CUDA-graph capture and torch.compile(mode="reduce-overhead"),
#      each beside its own torch.cuda.memory_stats() (tests/examples/torch_complete.rs compares);
#   2. self-check: varlen (native and expandable), multistream, generate recorded, each
#      replayed by `vramtrace replay` (with the recorded segment addresses) against the run's
#      own reserved peak: $OUT/selfcheck.txt; the native varlen trace and its statistics are
#      also copied to $OUT/varlen.vramtrace and $OUT/varlen.json, to be bundled as a sample;
#   3. overhead: `overhead` unrecorded, recorded (native stacks) and recorded without stacks,
#      alternating, five times each.
#
#   BIN=DIR [PHASES=checks] samples/workloads/h200/torch_tracker_validate.sh
#
# PHASES=checks runs phases 1-2 only (about 110 s of run time).
#
# DIR holds vramtrace and libvramtrace_preload.so (cargo build --release -p vramtrace -p
# vramtrace-recorder) and workloads/ (a copy of samples/workloads). Everything is written under /tmp/tt and packed
# after each phase, so that a run stopped at its time limit still returns what it finished:
# $OUT/tt-checks.tar.gz (phases 1-2: json, traces, log), $OUT/tt-overhead.tar.gz (phase 3) and
# $OUT/summary.txt.
set -u
BIN=${BIN:-.dev-torchtrace}
OUT=${OUT:-/tmp/torch-tracker}
R=/tmp/tt
mkdir -p "$R/traces" "$OUT"
export PYTHONUNBUFFERED=1
W=$BIN/workloads
VT="$BIN/vramtrace record --preload $BIN/libvramtrace_preload.so"
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
    ldd --version | head -1
    date -u
} >"$R/machine.txt" 2>&1

run() { # NAME CONF STACKS WORKLOAD
    PYTORCH_CUDA_ALLOC_CONF=$2 timeout 150 $VT --stacks "$3" -o "$R/traces/$1.vramtrace" -- \
        python3 "$W/programs/torch_tracker_workloads.py" "$4" "$R/$1.json" >>"$R/log.txt" 2>&1
    echo "$1 rc=$?" >>"$R/rc.txt"
}
run complete-native "" native complete-native
run complete-expandable expandable_segments:True native complete-native
run complete-graph "" native complete-graph
run complete-compile "" native complete-compile
run varlen "" native varlen
run varlen-expandable expandable_segments:True native varlen
run multistream "" native multistream
run generate "" native generate
date -u >>"$R/rc.txt"
# The self-check: each trace replayed with the policy of its recorded configuration (the
# replay hands out the segment addresses the real driver returned, `torch.segment_alloc`),
# its `recorded` line against the run's own reserved peak.
for n in varlen varlen-expandable multistream generate; do
    $BIN/vramtrace replay "$R/traces/$n.vramtrace" --policy pytorch,pytorch-expandable \
        >"$R/$n.replay.txt" 2>&1
    $BIN/vramtrace replay "$R/traces/$n.vramtrace" --policy pytorch,pytorch-expandable --json \
        >"$R/$n.replay.json" 2>>"$R/log.txt"
    grep '^recorded' "$R/$n.replay.txt" | sed "s/^/$n: /" >>"$R/selfcheck.txt"
done
# The native varlen run, to be bundled as a sample (samples/traces/h200-tracker/).
cp "$R/traces/varlen.vramtrace" "$R/varlen.json" "$OUT/" 2>>"$R/log.txt"
cp "$R/selfcheck.txt" "$OUT/" 2>>"$R/log.txt"
tar czf "$OUT/tt-checks.tar.gz" -C /tmp tt
if [ "${PHASES:-all}" = checks ]; then
    cat "$R/rc.txt" "$R/selfcheck.txt"
    exit 0
fi

for i in 1 2 3 4 5; do
    timeout 120 python3 "$W/programs/torch_tracker_workloads.py" overhead "$R/overhead-plain-$i.json" \
        >>"$R/log.txt" 2>&1
    echo "overhead-plain-$i rc=$?" >>"$R/rc.txt"
    for s in native none; do
        timeout 120 $VT --stacks $s -o "/tmp/overhead-$s-$i.vramtrace" -- \
            python3 "$W/programs/torch_tracker_workloads.py" overhead "$R/overhead-$s-$i.json" \
            >>"$R/log.txt" 2>&1
        echo "overhead-$s-$i rc=$?" >>"$R/rc.txt"
        $BIN/vramtrace info --json "/tmp/overhead-$s-$i.vramtrace" >"$R/overhead-$s-$i.info.json" 2>&1
    done
done
date -u >>"$R/rc.txt"
tar czf "$OUT/tt-overhead.tar.gz" -C /tmp tt/rc.txt $(cd /tmp && ls tt/overhead-*)
{
cat "$R/rc.txt"
python3 - "$R" <<'PY'
import json, sys, glob, statistics
r = sys.argv[1]
for cfg in ("plain", "native", "none"):
    runs = [json.load(open(f)) for f in sorted(glob.glob(f"{r}/overhead-{cfg}-*.json"))]
    for k in ("mlp_ms", "gpt2_ms"):
        v = [x[k] for x in runs if k in x]
        if v:
            print(cfg, k, "median %.3f" % statistics.median(v), "runs", " ".join("%.3f" % x for x in v))
PY
} >"$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
