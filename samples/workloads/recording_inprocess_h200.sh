#!/usr/bin/env bash
# What recording costs inside one process (recorder/BENCHMARKS.md, "In one process"): the MLP and
# GPT-2 loops of pyframes_train.py under `vramtrace record`, their steps in blocks alternately
# recorded and with the recorder paused (`--alternate`, recorder/src/pause.rs), so that the
# spread between processes of this machine (±10-20%, larger than the cost) cancels out. Three
# processes with the recorder's defaults (tracker, Python stacks) and two with --stacks none,
# interleaved. About 2 minutes.
#
#   BIN=DIR samples/workloads/recording_inprocess_h200.sh
#
# DIR holds vramtrace and libvramtrace_preload.so (release builds, stripped) and workloads/ (this
# folder). Results: $OUT/inprocess.tar.gz and $OUT/inprocess.txt.
set -u
BIN=$(cd "${BIN:-.dev-lead}" && pwd)
OUT=${OUT:-/tmp/recording-inprocess}
R=/tmp/rip
mkdir -p "$R" "$OUT"
export PYTHONUNBUFFERED=1
W=$BIN/workloads
VT="$BIN/vramtrace record --preload $BIN/libvramtrace_preload.so"
date -u >"$R/machine.txt"
for i in 1 2 3; do
    for s in python none; do
        [ $s = none ] && [ $i = 3 ] && continue
        timeout 120 $VT --stacks $s -o /tmp/rip.vramtrace -- python3 "$W/pyframes_train.py" \
            "$R/$s-$i.json" --alternate >>"$R/log.txt" 2>&1
        echo "$s $i rc=$?" >>"$R/rc.txt"
        rm -f /tmp/rip.vramtrace
    done
done
python3 - "$R" <<'PY' >"$OUT/inprocess.txt" 2>&1
import glob, json, os, statistics, sys
r = sys.argv[1]
for f in sorted(glob.glob(os.path.join(r, "*-*.json"))):
    d = json.load(open(f))
    for m in ("mlp", "gpt2"):
        rec, pau = d[m]["recorded"]["median_ms"], d[m]["paused"]["median_ms"]
        print(f"{os.path.basename(f)[:-5]:9} {m:5} recorded {rec:8.3f} ms  paused {pau:8.3f} ms  "
              f"({100 * (rec / pau - 1):+6.2f}%)  steps {d[m]['recorded']['steps']}+{d[m]['paused']['steps']}")
PY
cat "$R/rc.txt" >>"$OUT/inprocess.txt"
tar -C /tmp -czf "$OUT/inprocess.tar.gz" rip
cat "$OUT/inprocess.txt"
