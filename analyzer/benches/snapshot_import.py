#!/usr/bin/env python3
"""`vramtrace import SNAPSHOT` and `vramtrace report SNAPSHOT` of two builds, against CPython's
`pickle.load` of the same file, alternately, REPS times each (issue 27, items 1 and 2).

    python3 analyzer/benches/snapshot_import.py SNAPSHOT.pickle OLD_BIN NEW_BIN [--reps 5]

OLD_BIN and NEW_BIN are two `vramtrace` binaries (keep a copy of the old release build aside).
Each repetition runs, one after the other: `OLD import`, `NEW import`, `OLD report`, `NEW
report` (`report SNAPSHOT -o DIR`, the default policies) and `python3 -c "import pickle;
pickle.load(open(SNAPSHOT, 'rb'))"`, each as a child process timed by wall clock and by CPU
(user + system of the child, from `RUSAGE_CHILDREN`): on a machine shared with other work the
CPU time is the figure that does not depend on the load. Python's start-up (about 20 ms) is in
its figures, as process start and exit are in vramtrace's. Prints every run, then medians,
spread (min-max) and the ratios against `pickle.load`.

`--unpickle OLD_UNPICKLE NEW_UNPICKLE` (the two builds' `unpickle` bench binaries, see
formats/benches/unpickle.rs) adds `OLD_UNPICKLE SNAPSHOT 1` and `NEW_UNPICKLE SNAPSHOT 1` to each
repetition: the unpickler alone, as analyzer/benches/snapshot_page.py times it.
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

parser = argparse.ArgumentParser()
parser.add_argument("snapshot")
parser.add_argument("old")
parser.add_argument("new")
parser.add_argument("--reps", type=int, default=5)
parser.add_argument("--unpickle", nargs=2, metavar=("OLD_UNPICKLE", "NEW_UNPICKLE"))
args = parser.parse_args()

tmp = tempfile.mkdtemp()
commands = {
    "old import": [args.old, "import", args.snapshot, "-o", os.path.join(tmp, "old.vramtrace")],
    "new import": [args.new, "import", args.snapshot, "-o", os.path.join(tmp, "new.vramtrace")],
    "old report": [args.old, "report", args.snapshot, "-o", os.path.join(tmp, "old-page")],
    "new report": [args.new, "report", args.snapshot, "-o", os.path.join(tmp, "new-page")],
    "pickle.load": [
        sys.executable,
        "-c",
        f"import pickle; pickle.load(open({args.snapshot!r}, 'rb'))",
    ],
}
if args.unpickle:
    commands["old unpickle"] = [args.unpickle[0], args.snapshot, "1"]
    commands["new unpickle"] = [args.unpickle[1], args.snapshot, "1"]


def timed(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


runs = {name: [] for name in commands}
for rep in range(args.reps):
    for name, cmd in commands.items():
        wall, cpu = timed(cmd)
        runs[name].append((wall, cpu))
        print(f"rep {rep + 1} {name:12} wall {wall:.3f} s cpu {cpu:.3f} s", flush=True)


def stat(values):
    return f"{statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})"


print()
print(f"{'':12} {'wall median (min-max)':28} {'CPU median (min-max)':28}")
for name, rs in runs.items():
    print(f"{name:12} {stat([w for w, _ in rs]):28} {stat([c for _, c in rs]):28}")
base_wall = statistics.median(w for w, _ in runs["pickle.load"])
base_cpu = statistics.median(c for _, c in runs["pickle.load"])
print()
for name in [n for n in runs if n != "pickle.load" and "report" not in n]:
    wall = statistics.median(w for w, _ in runs[name])
    cpu = statistics.median(c for _, c in runs[name])
    print(f"{name}: {base_wall / wall:.2f}x pickle.load by wall, {base_cpu / cpu:.2f}x by CPU")
