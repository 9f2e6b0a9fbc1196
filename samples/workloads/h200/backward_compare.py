"""The tables of backward_h200.sh, from its results folder.

    python3 backward_compare.py RESULTS [VRAMTRACE]

RESULTS holds equality.txt, json/ and traces/ as the script leaves them. With VRAMTRACE (the
`vramtrace` binary, not on the GPU machine), each recorded trace's bytes at the requested peak
are split, from `vramtrace summary --json`: held by allocations named "backward of <line>", by
engine-thread allocations whose backward() call the trace does not show ("backward (...)"),
and by allocations without a stack; before the naming, the first two were without a stack too.
"""

import glob
import json
import os
import statistics
import subprocess
import sys


def inprocess(results):
    rows = {}
    for f in sorted(glob.glob(os.path.join(results, "json", "inprocess-*.json"))):
        build, rep = os.path.basename(f)[len("inprocess-"):-5].split("-")
        d = json.load(open(f))
        for model in ("mlp", "gpt2"):
            if model not in d:
                continue
            rec, pau = d[model]["recorded"]["median_ms"], d[model]["paused"]["median_ms"]
            rows.setdefault((model, build), []).append((rep, rec, pau, 100 * (rec / pau - 1)))
    print("In one process, recorded blocks against paused ones (median step time of each):")
    for (model, build), v in sorted(rows.items()):
        each = ", ".join(f"{p:+.2f}%" for _, _, _, p in v)
        times = "; ".join(f"{r:.3f}/{q:.3f} ms" for _, r, q, _ in v)
        print(f"  {model:5} build {build}: median {statistics.median(p for *_, p in v):+.2f}%"
              f"  (processes: {each}; recorded/paused {times})")


def between(results):
    runs = {}
    for f in sorted(glob.glob(os.path.join(results, "json", "process-*.json"))):
        setting = os.path.basename(f).split("-")[1]
        runs.setdefault(setting, []).append(json.load(open(f))["mlp"]["median_ms"])
    if "plain" not in runs:
        return
    base = statistics.median(runs["plain"])
    print("Between processes, MLP median step time (median of the processes; each process):")
    for s in ("plain", "vt", "history"):
        if s in runs:
            m = statistics.median(runs[s])
            each = ", ".join(f"{x:.3f}" for x in runs[s])
            print(f"  {s:8} {m:8.3f} ms  {100 * (m / base - 1):+6.2f}%  ({each})")


def shares(results, vramtrace):
    print("Bytes at the requested peak of each recorded trace (vramtrace summary --json):")
    for t in sorted(glob.glob(os.path.join(results, "traces", "*.vramtrace"))):
        out = subprocess.run([vramtrace, "summary", "--json", "--top", "100000", t], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"  {os.path.basename(t)}: {out.stderr.strip()}")
            continue
        d = json.loads(out.stdout)
        d = d.get("report", d)
        for g in d["groups"]:
            if g["device"] < 0 or not g["peak_requested"]:
                continue
            peak, tops = g["peak_requested"], g["top_stacks_at_peak"]
            first = [s["frames"][0] if s["frames"] else "" for s in tops]
            named = sum(s["bytes"] for s, f in zip(tops, first) if f.startswith("backward of "))
            unseen = sum(s["bytes"] for s, f in zip(tops, first) if f.startswith("backward ("))
            none = sum(s["bytes"] for s, f in zip(tops, first) if not f)
            pct = lambda b: f"{100 * b / peak:.1f}%"
            print(f"  {os.path.basename(t):28} peak {peak / 2**20:9.1f} MiB: backward of a line "
                  f"{pct(named)}, backward without its call {pct(unseen)}, no stack {pct(none)}"
                  f" (before the naming: no stack {pct(named + unseen + none)}; the top "
                  f"{len(tops)} stacks hold {pct(sum(s['bytes'] for s in tops))})")


def main():
    results = sys.argv[1]
    eq = os.path.join(results, "equality.txt")
    if os.path.exists(eq):
        print(open(eq).read().rstrip())
    inprocess(results)
    between(results)
    if len(sys.argv) > 2:
        shares(results, sys.argv[2])


main()
