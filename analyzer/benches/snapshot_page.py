#!/usr/bin/env python3
"""Snapshot to page: `vramtrace report SNAPSHOT` against PyTorch's `_memory_viz trace_plot`, and
the unpickler against CPython's `pickle.load`, alternately, REPS times each.

    python3 analyzer/benches/snapshot_page.py SNAPSHOT.pickle MEMORY_VIZ.py [--reps 5]

MEMORY_VIZ.py is `torch/cuda/_memory_viz.py` (from a PyTorch install or its source; its
`trace_plot` needs no torch import), run as `python3 MEMORY_VIZ.py trace_plot SNAPSHOT -o
OUT.html`. vramtrace is `target/release/vramtrace` (build it first: `cargo build --release -p
vramtrace`), run with `--policy all` as a user would. The unpickler is timed by `cargo bench -p
vramtrace-format --bench unpickle -- SNAPSHOT 1` (file read included, as `pickle.load` of an
open file includes it). Each figure is wall time; the script prints every run, then the
medians, the spread (min–max) and the ratios, and the page sizes.
"""
import argparse
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

parser = argparse.ArgumentParser()
parser.add_argument("snapshot")
parser.add_argument("memory_viz")
parser.add_argument("--reps", type=int, default=5)
args = parser.parse_args()

vramtrace = os.path.join(ROOT, "target", "release", "vramtrace")
if not os.path.exists(vramtrace):
    sys.exit("build vramtrace first: cargo build --release -p vramtrace")


def timed(cmd):
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    return time.perf_counter() - t, out.stdout


def pickle_load():
    t = time.perf_counter()
    with open(args.snapshot, "rb") as f:
        pickle.load(f)
    return time.perf_counter() - t


def unpickle():
    _, out = timed(["cargo", "bench", "-q", "-p", "vramtrace-format", "--bench", "unpickle", "--", args.snapshot, "1"])
    return float(out.split()[1])


results = {"trace_plot": [], "vramtrace report": [], "pickle.load": [], "unpickler": []}
sizes = {}
with tempfile.TemporaryDirectory() as tmp:
    viz_out = os.path.join(tmp, "trace_plot.html")
    page_dir = os.path.join(tmp, "report")
    for rep in range(args.reps):
        dt, _ = timed([sys.executable, args.memory_viz, "trace_plot", args.snapshot, "-o", viz_out])
        results["trace_plot"].append(dt)
        dt, _ = timed([vramtrace, "report", args.snapshot, "-o", page_dir])
        results["vramtrace report"].append(dt)
        results["pickle.load"].append(pickle_load())
        results["unpickler"].append(unpickle())
        print(f"rep {rep + 1}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in results.items()), flush=True)
    sizes["trace_plot"] = os.path.getsize(viz_out)
    sizes["vramtrace report"] = os.path.getsize(os.path.join(page_dir, "index.html"))

med = {k: statistics.median(v) for k, v in results.items()}
for k, v in results.items():
    print(f"{k:18} median {med[k]:7.3f} s  (min {min(v):.3f}, max {max(v):.3f}, {len(v)} runs)")
print(f"snapshot to page: vramtrace {med['trace_plot'] / med['vramtrace report']:.1f}x faster than trace_plot")
print(f"unpickler: {med['pickle.load'] / med['unpickler']:.1f}x faster than pickle.load")
print(
    f"page: {sizes['vramtrace report']:,} bytes against trace_plot's {sizes['trace_plot']:,} "
    f"({sizes['trace_plot'] / sizes['vramtrace report']:.1f}x smaller)"
)
