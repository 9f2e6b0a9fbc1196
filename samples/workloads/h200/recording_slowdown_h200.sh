#!/usr/bin/env bash
# Where the per-process slowdown under the recorder comes from (recorder/BENCHMARKS.md,
# "Recording overhead on the H200", item 3: a cached `torch.empty` + `del` took 2.0-2.2 us
# unrecorded and 2.8-6.7 us under the recorder, also with its PyTorch tracker off). Runs
# torch_alloc_cost.py (unpinned) REPS times under each of these settings, rotated so that none
# always runs first:
#   plain      no recorder
#   disabled   LD_PRELOAD of the library with VRAMTRACE_DISABLE=1 (every hook forwards; no
#              journal, no writer thread)
#   preload    LD_PRELOAD with VRAMTRACE_OUTPUT set, tracker off, no launcher (the library
#              records the driver calls; its writer thread runs)
#   notracker  `vramtrace record` with VRAMTRACE_TORCH_TRACKER=0 (the launcher too)
#   vt         `vramtrace record` with its defaults (tracker, Python stacks)
# Each run reports warm/cold median ns per tensor, the main thread's context switches during the
# loops and the process's thread count. About 8 s a run: 25 runs in 3-4 minutes.
#
#   BIN=DIR [REPS=5] samples/workloads/h200/recording_slowdown_h200.sh
#
# DIR holds the release vramtrace and libvramtrace_preload.so. Results: $OUT/slowdown.txt and
# $OUT/slowdown.tar.gz.
set -u
BIN=$(cd "${BIN:-.dev-lead}" && pwd)
REPS=${REPS:-5}
OUT=${OUT:-/tmp/recording-slowdown}
HERE=$(cd "$(dirname "$0")" && pwd)
R=/tmp/rsd
mkdir -p "$R/tb" "$OUT"
export PYTHONUNBUFFERED=1
P=$BIN/libvramtrace_preload.so
VT="$BIN/vramtrace record --preload $P"
date -u >"$R/machine.txt"
nproc >>"$R/machine.txt"
run() { # SETTING REP
    local json=$R/$1-$2.json cmd=(timeout 60 python3 "$HERE/../probes/torch_alloc_cost.py")
    case $1 in
    plain) "${cmd[@]}" "$json" ;;
    disabled) LD_PRELOAD=$P VRAMTRACE_DISABLE=1 "${cmd[@]}" "$json" ;;
    preload) LD_PRELOAD=$P VRAMTRACE_OUTPUT=$R/tb/ VRAMTRACE_TORCH_TRACKER=0 "${cmd[@]}" "$json" ;;
    notracker) VRAMTRACE_TORCH_TRACKER=0 $VT -o /tmp/rsd.vramtrace -- "${cmd[@]}" "$json" ;;
    vt) $VT -o /tmp/rsd.vramtrace -- "${cmd[@]}" "$json" ;;
    esac
    echo "$1 $2 rc=$?" >>"$R/rc.txt"
    rm -f /tmp/rsd.vramtrace "$R"/tb/*
}
settings=(plain disabled preload notracker vt)
for i in $(seq "$REPS"); do
    for k in 0 1 2 3 4; do
        run "${settings[$(( (k + i - 1) % 5 ))]}" "$i" >>"$R/log.txt" 2>&1
    done
done
python3 - "$R" <<'PY' >"$OUT/slowdown.txt" 2>&1
import glob, json, os, statistics, sys
r = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(r, "*-*.json"))):
    s = os.path.basename(f)[:-5].rsplit("-", 1)[0]
    rows.setdefault(s, []).append(json.load(open(f)))
for s in ("plain", "disabled", "preload", "notracker", "vt"):
    ds = rows.get(s, [])
    for loop in ("warm", "cold"):
        v = [d[loop]["median_ns"] for d in ds]
        sw = [(d[loop]["voluntary_switches"], d[loop]["involuntary_switches"]) for d in ds]
        if v:
            print(f"{s:10} {loop}: median {statistics.median(v):8.0f} ns (runs {', '.join(f'{x:.0f}' for x in v)})"
                  f"  switches vol/invol {sw}  threads {[d['threads'] for d in ds]}")
PY
cat "$R/rc.txt" >>"$OUT/slowdown.txt"
tar -C /tmp -czf "$OUT/slowdown.tar.gz" rsd
cat "$OUT/slowdown.txt"
