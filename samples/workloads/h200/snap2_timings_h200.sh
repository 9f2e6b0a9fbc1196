#!/usr/bin/env bash
# Where `vramtrace report snap.pickle` spends its wall time on the H200 machine (branch snap2,
# analyzer/BENCHMARKS.md "snap2"): `report --timings` prints when each stage starts, the
# header's search (beside the rest) when it starts and ends. No model run: the snapshot is
# SNAP, a GPT-2 snapshot made there earlier by snapshot_page_h200.sh.
#
#   D=.dev/snap2 NEW=$D/new BASE=$D/base SNAP=$D/gpt2-215k.pickle REPS=7 \
#       bash samples/workloads/h200/snap2_timings_h200.sh
#
# REPS times, alternating: NEW's `report --timings` and BASE's `report`, each timed (wall,
# user, system); then NEW with `--policy pytorch`, on 8, 4 and 2 cores (taskset) and with
# RAYON_NUM_THREADS=8, 3 times each; the pages of both builds compared. Everything goes to
# $OUT/r, packed into $OUT/snap2.tar.gz at the end.
set -u
OUT=${OUT:-/tmp/snap2}
REPS=${REPS:-7}
R=$OUT/r
mkdir -p "$R"
{ nproc; uptime; grep -m1 'model name' /proc/cpuinfo; cat /sys/kernel/mm/transparent_hugepage/enabled; } >"$R/machine.txt" 2>&1
# shellcheck source=timed_runs.sh
. "$(dirname "$0")/timed_runs.sh"
for i in $(seq "$REPS"); do
    run "new $i" "$NEW" report "$SNAP" -o "$OUT/page-new" --timings
    run "base $i" "$BASE" report "$SNAP" -o "$OUT/page-base"
done
cmp "$OUT/page-new/index.html" "$OUT/page-base/index.html" >"$R/pages.txt" 2>&1 && echo same >>"$R/pages.txt"
for i in 1 2 3; do
    run "new --policy pytorch $i" "$NEW" report "$SNAP" -o "$OUT/p1" --policy pytorch --timings
    for c in 0-7 0-3 0-1; do
        run "new taskset $c $i" taskset -c "$c" "$NEW" report "$SNAP" -o "$OUT/p2" --timings
    done
    run "new RAYON_NUM_THREADS=8 $i" env RAYON_NUM_THREADS=8 "$NEW" report "$SNAP" -o "$OUT/p3" --timings
done
uptime >>"$R/machine.txt"
tar -C "$OUT" -czf "$OUT/snap2.tar.gz" r
