#!/usr/bin/env bash
# The snapshot's report on the H200 machine, builds alternated (branch snap3,
# analyzer/BENCHMARKS.md "snap3"): each build's `report --timings` on SNAP (a GPT-2 snapshot
# made there earlier by snapshot_page_h200.sh; no model run), timed.
#
#   D=.dev/snap3 SNAP=.dev/snap2/gpt2-215k.pickle REPS=9 \
#       BINS="$D/base $D/new" bash samples/workloads/h200/snap3_timings_h200.sh
#
# REPS rounds, each running every build of BINS once in turn (labelled by file name), then
# every build with `--policy pytorch` (the search with almost nothing beside it) 3 times; the
# pages of all builds compared with the first's. Everything goes to $OUT/r, packed into
# $OUT/snap3.tar.gz at the end.
set -u
OUT=${OUT:-/tmp/snap3}
REPS=${REPS:-9}
R=$OUT/r
mkdir -p "$R"
{ nproc; uptime; grep -m1 'model name' /proc/cpuinfo; lscpu | grep -E '^(Thread|Core|Socket)'; } >"$R/machine.txt" 2>&1
# shellcheck source=timed_runs.sh
. "$(dirname "$0")/timed_runs.sh"
for i in $(seq "$REPS"); do
    for b in $BINS; do
        run "$(basename "$b") $i" "$b" report "$SNAP" -o "$OUT/page-$(basename "$b")" --timings
    done
done
first=
for b in $BINS; do
    page=$OUT/page-$(basename "$b")/index.html
    if [ -z "$first" ]; then first=$page; continue; fi
    { cmp "$first" "$page" && echo "$(basename "$b") same"; } >>"$R/pages.txt" 2>&1
done
for i in 1 2 3; do
    for b in $BINS; do
        run "$(basename "$b") --policy pytorch $i" "$b" report "$SNAP" -o "$OUT/p1" --policy pytorch --timings
    done
done
uptime >>"$R/machine.txt"
tar -C "$OUT" -czf "$OUT/snap3.tar.gz" r
