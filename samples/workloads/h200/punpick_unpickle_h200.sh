#!/usr/bin/env bash
# The unpickler read in parts (branch `punpick`, issue 27 items 1 and 2) against main's on the
# H200, on the real GPT-2 snapshot of analyzer/BENCHMARKS.md (215,000 entries, 18.9 MB).
#
#   D=.dev/punpick OUT=$OUT REPS=9 bash .dev/punpick/punpick_unpickle_h200.sh
#
# D holds base/ and new/ (each the stripped release `vramtrace` and `unpickle` bench binary)
# and gpt2-215k.pickle. Writes $OUT/punpick.tgz: machine.txt; import_ab.txt (REPS alternated
# repetitions of both builds' `import`, `report` and unpickler with CPython's `pickle.load`:
# analyzer/benches/snapshot_import.py --unpickle); threads.txt (the new unpickler with 4, 8
# and 16 rayon threads, 9 runs each, and base's); timings.txt (`report --timings` of both
# builds, alternated, and whether their pages are the same bytes).
set -u
D=${D:-.dev/punpick}
R="$OUT/punpick"
SNAP="$D/gpt2-215k.pickle"
mkdir -p "$R"
{
    nproc
    lscpu | grep -i 'model name'
    python3 --version
    cat /sys/kernel/mm/transparent_hugepage/enabled
    uptime
} >"$R/machine.txt" 2>&1
timeout 100 python3 analyzer/benches/snapshot_import.py "$SNAP" "$D/base/vramtrace" \
    "$D/new/vramtrace" --unpickle "$D/base/unpickle" "$D/new/unpickle" --reps "${REPS:-9}" \
    >"$R/import_ab.txt" 2>&1
for t in 4 8 16; do
    echo "new, RAYON_NUM_THREADS=$t"
    RAYON_NUM_THREADS=$t timeout 20 "$D/new/unpickle" "$SNAP" 9
    echo "base"
    timeout 20 "$D/base/unpickle" "$SNAP" 9
done >"$R/threads.txt" 2>&1
for i in 1 2 3 4 5; do
    for b in base new; do
        echo "== $b $i"
        timeout 20 "$D/$b/vramtrace" report --timings "$SNAP" -o "/tmp/punpick-$b" 2>&1 >/dev/null
    done
done >"$R/timings.txt" 2>&1
cmp "/tmp/punpick-base/index.html" "/tmp/punpick-new/index.html" >>"$R/timings.txt" 2>&1 &&
    echo "pages: the same bytes" >>"$R/timings.txt"
uptime >>"$R/machine.txt"
tar czf "$OUT/punpick.tgz" -C "$OUT" punpick
