#!/usr/bin/env python3
"""`vramtrace tune` against the report, which runs the same search for its header (issue 27).

    python3 analyzer/benches/tune_vs_report.py TRACE [--reps 5] [--bin NAME=PATH ...]
    python3 analyzer/benches/tune_vs_report.py --command 'tune --json DIR' [--command ...] ...
        [--peer 'NAME=PROGRAM ARGS']

Each repetition runs, one after the other, for every binary given (default: the release build),
`tune TRACE --json`, `report TRACE --policy pytorch` (the header's search and one replay) and
`report TRACE` (the default policies), or instead the commands given with `--command` (the
arguments as written, split at spaces); it prints wall and CPU (user + system of the child)
medians with min-max, and the peak RSS. A `--peer` (another program doing the same job, e.g.
`trace_plot=python3 -m torch.cuda._memory_viz trace_plot snap.pickle -o tp.html`) runs as
written once per repetition, before the binaries, and gets its own row.
"""
import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time

parser = argparse.ArgumentParser()
parser.add_argument("trace", nargs="?")
parser.add_argument("--reps", type=int, default=5)
parser.add_argument("--bin", action="append", default=[], metavar="NAME=PATH")
parser.add_argument("--command", action="append", default=[], metavar="ARGS")
parser.add_argument("--peer", action="append", default=[], metavar="NAME=PROGRAM ARGS")
args = parser.parse_args()
if not args.command and args.trace is None:
    parser.error("give a TRACE or at least one --command")
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
bins = [b.split("=", 1) for b in args.bin] or [["release", os.path.join(root, "target/release/vramtrace")]]
out = tempfile.mkdtemp()
commands = [(c, c.split()) for c in args.command] or [
    ("tune --json", ["tune", args.trace, "--json"]),
    ("report --policy pytorch", ["report", args.trace, "--policy", "pytorch", "-o", out]),
    ("report", ["report", args.trace, "-o", out]),
]


def run(argv):
    """Wall seconds, CPU seconds and peak RSS (KiB) of one child."""
    start = time.perf_counter()
    with open(os.devnull, "w") as null:
        p = subprocess.Popen(argv, stdout=null, stderr=null)
        _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({status})")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


results = {}
peers = [p.split("=", 1) for p in args.peer]
for rep in range(args.reps):
    for name, line in peers:
        results.setdefault((name, line), []).append(run(line.split()))
    for name, path in bins:
        for label, argv in commands:
            results.setdefault((name, label), []).append(run([path] + argv))


def fmt(xs):
    return f"{statistics.median(xs):.3f} s ({min(xs):.3f}-{max(xs):.3f})"


print(f"{args.trace or 'commands as given'}, {args.reps} repetitions, load average {os.getloadavg()[0]:.1f} at the end")
print("| binary | command | wall median (min-max) | CPU median (min-max) | peak RSS |")
print("|---|---|---|---|---|")
for (name, label), rs in results.items():
    wall, cpu, rss = zip(*rs)
    print(f"| {name} | `{label}` | {fmt(wall)} | {fmt(cpu)} | {max(rss) / 1024:.0f} MiB |")
