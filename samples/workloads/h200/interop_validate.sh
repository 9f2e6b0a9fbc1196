#!/usr/bin/env bash
# GPU validation of `vramtrace import`/`export`/`summary`/`diff` against PyTorch itself.
# Run from the repository root on the GPU machine, with a release `vramtrace`, the interop_*
# scripts and synthetic.vramtrace (a non-PyTorch trace) copied into DIR:
#
#   bash DIR/interop_validate.sh DIR OUT
#
# 1. records four real PyTorch snapshots (fp32, amp, expandable segments, ring buffer) with the
#    allocator's own counters as ground truth;
# 2. imports each, prints `summary` and compares its peaks with the counters, and exports it
#    back as a PyTorch snapshot and as Perfetto JSON;
# 3. loads original and exported snapshots with `python -m torch.cuda._memory_viz`
#    (stats, trace, trace_plot, segment_plot);
# 4. diffs fp32 against amp.
set -u
D=${1:-.dev-interop}
OUT=${2:-/tmp/interop-out}
W=/tmp/interop-work
mkdir -p "$W" "$OUT"
export PYTHONUNBUFFERED=1
V="$D/vramtrace"
for m in fp32 amp expandable ring; do
  python3 "$D/interop_snapshot.py" --mode "$m" --out "$W" || echo "RECORD FAILED $m"
done
for m in fp32 amp expandable ring; do
  S="$W/$m.pickle"
  echo "=== $m: import"; "$V" import "$S" -o "$W/$m.vramtrace" || echo "IMPORT FAILED $m"
  echo "=== $m: summary"; "$V" summary "$W/$m.vramtrace" | head -24
  "$V" summary --json "$W/$m.vramtrace" > "$W/$m.summary.json"
  python3 - "$W/$m.summary.json" "$W/$m.stats.json" "$S" <<'PY'
import json, pickle, sys
s, t = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
snap = pickle.load(open(sys.argv[3], "rb"))
g = [g for g in s["groups"] if g["device"] == 0][0]
segs = [e for e in snap["device_traces"][0] if e["action"] == "segment_alloc"]
print("COMPARE peak_requested", g["peak_requested"], "| torch allocated.peak", t["allocated_bytes.all.peak"],
      "requested.peak", t["requested_bytes.all.peak"])
print("COMPARE peak_reserved", g["peak_reserved"], "| torch reserved.peak", t["reserved_bytes.all.peak"])
print("COMPARE segment_alloc entries", len(segs), "| torch segment.all.allocated", t["segment.all.allocated"],
      "sizes", sorted(e["size"] for e in segs))
print("COMPARE failed", g["failed"], "| torch num_ooms", t["num_ooms"])
PY
  "$V" export "$W/$m.vramtrace" --to pytorch-snapshot -o "$W/$m.export.pickle" || echo "EXPORT FAILED $m"
  "$V" export "$W/$m.vramtrace" --to perfetto -o "$W/$m.json" || echo "PERFETTO FAILED $m"
done
echo "=== diff fp32 amp"; "$V" diff "$W/fp32.vramtrace" "$W/amp.vramtrace" | head -30
"$V" export "$D/synthetic.vramtrace" --to pytorch-snapshot -o "$W/synthetic.export.pickle"
echo "=== python -m torch.cuda._memory_viz stats (literal command line)"
python3 -m torch.cuda._memory_viz stats "$W/synthetic.export.pickle" | grep -E "^(segments|total_)"
echo "=== _memory_viz on originals and exports"
python3 "$D/interop_viz_check.py" "$W" "$W"/*.pickle
for m in fp32 amp expandable ring; do cp "$W/$m.pickle" "$OUT/" 2>/dev/null; done
cat "$W"/*.stats.json > "$OUT/stats.json" 2>/dev/null
ls -la "$W"
