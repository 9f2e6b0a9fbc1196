#!/usr/bin/env python3
"""Snapshot to page: `vramtrace report SNAPSHOT` against PyTorch's `_memory_viz trace_plot`, and
the unpickler against CPython's `pickle.load`, alternately, REPS times each.

    python3 analyzer/benches/snapshot_page.py SNAPSHOT.pickle MEMORY_VIZ [--reps 5]
        [--bin DIR] [--bin-b DIR_B] [--json OUT.json]

MEMORY_VIZ is either `torch` (run `python3 -m torch.cuda._memory_viz trace_plot SNAPSHOT -o
OUT.html`, what a PyTorch user types, `import torch` included) or the path of a copy of
`torch/cuda/_memory_viz.py` (run as `python3 MEMORY_VIZ.py trace_plot ...`; its `trace_plot`
needs no torch import, so this leaves torch's import time out). vramtrace is `DIR/vramtrace`
(default `target/release`: build it first with `cargo build --release -p vramtrace`), run as a
user runs it (`vramtrace report SNAPSHOT -o DIR`, its default policies). The unpickler is
`DIR/unpickle` or, without it, the newest `target/release/deps/unpickle-*` (`cargo build
--release -p vramtrace-format --bench unpickle` first), timed on one read of the file (reading
it included, as `pickle.load` of an open file includes it). Each figure is given as wall time
and as CPU time (user + system, of the child process or, for `pickle.load`, of this one): on a
machine shared with other work the CPU time is the one that does not depend on the load. The
script prints every run, then medians, spread (min-max), the ratios and the page sizes; `--json`
writes them too. With `--bin-b`, `DIR_B/vramtrace report` (another build's, main's say) runs
right after DIR's in each repetition, and the script says whether the two pages are the same
bytes.
"""
import argparse
import glob
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

parser = argparse.ArgumentParser()
parser.add_argument("snapshot")
parser.add_argument("memory_viz", help="`torch`, or the path of a copy of _memory_viz.py")
parser.add_argument("--reps", type=int, default=5)
parser.add_argument("--bin", default=os.path.join(ROOT, "target", "release"))
parser.add_argument("--bin-b", help="a second build's folder, its report alternated with --bin's")
parser.add_argument("--json", help="also write the runs, medians and sizes here")
args = parser.parse_args()
vramtrace_b = args.bin_b and os.path.join(args.bin_b, "vramtrace")

vramtrace = os.path.join(args.bin, "vramtrace")
if not os.path.exists(vramtrace):
    sys.exit(f"no {vramtrace}: build it first (cargo build --release -p vramtrace)")
unpickle_bin = os.path.join(args.bin, "unpickle")
if not os.path.exists(unpickle_bin):
    benches = [
        p
        for p in glob.glob(os.path.join(ROOT, "target", "release", "deps", "unpickle-*"))
        if os.access(p, os.X_OK) and not p.endswith(".d")
    ]
    if not benches:
        sys.exit("build the unpickle bench first: cargo build --release -p vramtrace-format --bench unpickle")
    unpickle_bin = max(benches, key=os.path.getmtime)
if args.memory_viz == "torch":
    viz = [sys.executable, "-m", "torch.cuda._memory_viz"]
else:
    viz = [sys.executable, args.memory_viz]


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd):
    c, t = children_cpu(), time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    return time.perf_counter() - t, children_cpu() - c


def pickle_load():
    c, t = time.process_time(), time.perf_counter()
    with open(args.snapshot, "rb") as f:
        data = pickle.load(f)
    out = (time.perf_counter() - t, time.process_time() - c)
    del data
    return out


results = {"trace_plot": [], "vramtrace report": [], "pickle.load": [], "unpickler": []}
if vramtrace_b:
    results["vramtrace report (B)"] = []
sizes = {}
with tempfile.TemporaryDirectory() as tmp:
    viz_out = os.path.join(tmp, "trace_plot.html")
    page_dir = os.path.join(tmp, "report")
    for rep in range(args.reps):
        results["trace_plot"].append(timed(viz + ["trace_plot", args.snapshot, "-o", viz_out]))
        results["vramtrace report"].append(timed([vramtrace, "report", args.snapshot, "-o", page_dir]))
        if vramtrace_b:
            results["vramtrace report (B)"].append(timed([vramtrace_b, "report", args.snapshot, "-o", page_dir + "-b"]))
        results["pickle.load"].append(pickle_load())
        results["unpickler"].append(timed([unpickle_bin, args.snapshot, "1"]))
        print(f"rep {rep + 1}: " + ", ".join(f"{k} {v[-1][0]:.3f} s wall / {v[-1][1]:.3f} s CPU" for k, v in results.items()), flush=True)
    sizes["trace_plot"] = os.path.getsize(viz_out)
    sizes["vramtrace report"] = os.path.getsize(os.path.join(page_dir, "index.html"))
    if vramtrace_b:
        with open(os.path.join(page_dir, "index.html"), "rb") as a, open(os.path.join(page_dir + "-b", "index.html"), "rb") as b:
            same = a.read() == b.read()
        print(f"pages of --bin and --bin-b: {'the same bytes' if same else 'DIFFER'}")

summary = {"snapshot": args.snapshot, "snapshot_bytes": os.path.getsize(args.snapshot), "runs": results, "page_bytes": sizes}
for which, name in ((0, "wall"), (1, "CPU")):
    med = {k: statistics.median(x[which] for x in v) for k, v in results.items()}
    for k, v in results.items():
        xs = [x[which] for x in v]
        print(f"{name:4} {k:18} median {med[k]:7.3f} s  (min {min(xs):.3f}, max {max(xs):.3f}, {len(xs)} runs)")
    print(f"{name:4} snapshot to page: vramtrace {med['trace_plot'] / med['vramtrace report']:.1f}x faster than trace_plot")
    if vramtrace_b:
        print(f"{name:4} snapshot to page, --bin-b: {med['trace_plot'] / med['vramtrace report (B)']:.1f}x")
    print(f"{name:4} unpickler: {med['pickle.load'] / med['unpickler']:.1f}x faster than pickle.load")
    summary[f"median_{name.lower()}"] = med
print(
    f"page: {sizes['vramtrace report']:,} bytes against trace_plot's {sizes['trace_plot']:,} "
    f"({sizes['trace_plot'] / sizes['vramtrace report']:.1f}x smaller)"
)
if args.json:
    with open(args.json, "w") as f:
        json.dump(summary, f, indent=1)
