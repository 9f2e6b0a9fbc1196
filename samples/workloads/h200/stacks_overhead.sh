#!/usr/bin/env bash
# The recorder's cost on a GPU, stacks on, side by side with plain runs of the same programs
# (recorder/BENCHMARKS.md, "On the H200"), in about two minutes:
#   1. a cudaMallocAsync/cudaFreeAsync loop (malloc_async_loop.cu): median ns per call;
#   2. median step times of a 16-layer MLP and of a small transformer (stacks_overhead.py), at
#      request level (PyTorch's cudaMallocAsync back-end: one event per tensor) and once with
#      PyTorch's default caching allocator;
#   3. bytes per event and stack counts of the recorded traces (vramtrace info --json);
#   4. the most frequent allocation stacks of the MLP trace, symbolized with addr2line.
# Plain and recorded runs alternate, three times each, so that drift hits both alike.
#
#   BIN=DIR samples/workloads/h200/stacks_overhead.sh
#
# DIR holds vramtrace, libvramtrace_preload.so and top_stacks (built on the development machine:
# cargo build --release -p vramtrace -p vramtrace-recorder; cargo build --release -p
# vramtrace-tests --example top_stacks) and workloads/ (a copy of samples/workloads). Results go to $OUT/ (or
# /tmp/stacks-overhead): summary.txt, results.tar.gz, and the first recorded MLP trace.
set -u
BIN=${BIN:-.dev-stacks}
OUT=${OUT:-/tmp/stacks-overhead}
R=$OUT/stacks
mkdir -p "$R/traces"
export PYTHONUNBUFFERED=1
W=$BIN/workloads
VT="$BIN/vramtrace record --preload $BIN/libvramtrace_preload.so --stacks native"
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    ldd --version | head -1
} >"$R/machine.txt" 2>&1

nvcc -O2 -o /tmp/malloc_async_loop "$W/programs/malloc_async_loop.cu" 2>"$R/nvcc.err"
for i in 1 2 3; do
    /tmp/malloc_async_loop 200 | sed "s/^/plain /" >>"$R/malloc_async.txt"
    $VT -o "$R/traces/malloc-$i.vramtrace" -- /tmp/malloc_async_loop 200 2>>"$R/record.err" |
        sed "s/^/recorded /" >>"$R/malloc_async.txt"
done

for i in 1 2 3; do
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 120 \
        python3 "$W/programs/stacks_overhead.py" "$R/plain-requests-$i.json" >/dev/null 2>>"$R/python.err"
    timeout 120 $VT --requests -o "$R/traces/torch-requests-$i.vramtrace" -- \
        python3 "$W/programs/stacks_overhead.py" "$R/recorded-requests-$i.json" >/dev/null 2>>"$R/record.err"
    echo "torch-requests-$i rc=$?" >>"$R/record.err"
done
# Should a recorded run have failed, tell stack capture from the rest of the recorder.
if [ ! -s "$R/recorded-requests-1.json" ]; then
    timeout 120 $BIN/vramtrace record --preload $BIN/libvramtrace_preload.so --stacks none \
        --requests -o "$R/traces/torch-nostacks.vramtrace" -- \
        python3 "$W/programs/stacks_overhead.py" "$R/nostacks-requests-1.json" >/dev/null 2>>"$R/record.err"
    echo "torch-nostacks rc=$?" >>"$R/record.err"
fi
timeout 120 python3 "$W/programs/stacks_overhead.py" "$R/plain-native-1.json" >/dev/null 2>>"$R/python.err"
timeout 120 $VT -o "$R/traces/torch-native-1.vramtrace" -- \
    python3 "$W/programs/stacks_overhead.py" "$R/recorded-native-1.json" >/dev/null 2>>"$R/record.err"

for t in "$R"/traces/*.vramtrace; do
    "$BIN/vramtrace" info --json "$t" >"${t%.vramtrace}.info.json" 2>>"$R/info.err"
done

# The stacks that allocated most often, innermost frame first, with function names.
"$BIN/top_stacks" "$R/traces/torch-requests-1.vramtrace" 8 >"$R/top_stacks.raw" 2>>"$R/info.err"
python3 - "$R/top_stacks.raw" >"$R/top_stacks.txt" 2>>"$R/info.err" <<'PY'
# One addr2line per module for all its frames (the first 20 of each stack).
import collections, shutil, subprocess, sys
lines = [l.split() for l in open(sys.argv[1])]
wanted, n = collections.defaultdict(set), 0
for w in lines:
    n = 0 if w[0] == "stack" else n + 1
    if w[0] == "frame" and w[2] != "-" and n <= 20:
        wanted[w[2]].add(w[3])
names = {}
if shutil.which("addr2line"):
    for module, offsets in wanted.items():
        offsets = sorted(offsets)
        try:
            out = subprocess.run(["addr2line", "-f", "-C", "-e", module, *offsets],
                                 capture_output=True, text=True, timeout=60).stdout.splitlines()
        except Exception:
            continue
        for off, name in zip(offsets, out[0::2]):
            names[(module, off)] = name
n = 0
for w in lines:
    if w[0] == "stack":
        n = 0
        print(" ".join(w))
        continue
    n += 1
    if n <= 20:
        print(f"  {w[1]} {w[2].rsplit('/', 1)[-1]}+{w[3]} {names.get((w[2], w[3]), '??')}")
PY

python3 - "$R" >"$OUT/summary.txt" <<'PY'
import glob, json, os, statistics, sys
r = sys.argv[1]
def med(xs):
    return statistics.median(xs) if xs else float("nan")
print(open(os.path.join(r, "machine.txt")).read().strip())
print()
rows = {}
for line in open(os.path.join(r, "malloc_async.txt")):
    who, call, _, m, *_ = line.split()
    rows.setdefault((who, call), []).append(float(m))
print("cudaMallocAsync loop (median ns per call; median of 3 runs)")
for call in ("alloc", "free"):
    p, q = med(rows.get(("plain", call), [])), med(rows.get(("recorded", call), []))
    print(f"  {call:6} plain {p:8.1f}  recorded {q:8.1f}  +{q - p:7.1f} ns ({(q / p - 1) * 100:+.1f}%)")
print()
print("training loops (median step ms; median of the runs)")
for level in ("requests", "native"):
    for work in ("mlp", "transformer"):
        get = lambda who: [json.load(open(f))[work]["median_ms"]
                           for f in sorted(glob.glob(os.path.join(r, f"{who}-{level}-*.json")))]
        p, q = get("plain"), get("recorded")
        if p and q:
            print(f"  {level:8} {work:12} plain {med(p):7.3f}  recorded {med(q):7.3f}  "
                  f"{(med(q) / med(p) - 1) * 100:+.2f}%   runs {[round(x, 3) for x in p]} {[round(x, 3) for x in q]}")
print()
print("traces (vramtrace info --json)")
for f in sorted(glob.glob(os.path.join(r, "traces", "*.info.json"))):
    try:
        i = json.load(open(f))
    except Exception as e:
        print(f"  {os.path.basename(f)}: {e}")
        continue
    print(f"  {os.path.basename(f)[:-10]:22} events {i.get('events')}  stacks {i.get('stacks')}  "
          f"bytes/event {i.get('bytes_per_event')}  file {i.get('file_bytes')}")
print()
print(open(os.path.join(r, "top_stacks.txt")).read())
print("record.err (last lines)")
print("".join(open(os.path.join(r, "record.err")).readlines()[-12:]))
PY
cat "$OUT/summary.txt"
cp "$R/traces/torch-requests-1.vramtrace" "$OUT/torch-requests-stacks.vramtrace" 2>/dev/null
tar czf "$OUT/results.tar.gz" -C "$OUT" --exclude='*.vramtrace' stacks
