"""The tables of samples/workloads/h200/cost_h200.sh's results (recorder/BENCHMARKS.md "Where a
tensor's recording time goes").

    python3 samples/workloads/h200/cost_compare.py RESULTS

RESULTS is the unpacked `cost/` folder (json/, logs/). Prints: per model, each bench variant's
cost over paused (median of the processes, then each process) in % of the step and in µs per
allocation, and what each part costs (full minus the variant without it); the `perf stat`
counts per allocation where they exist; the per-part counters of `stamps` (recorder/BENCHMARKS.md
"Where the time goes, by the counters"); the A/B in-process medians; the between-process MLP
medians against the unrecorded run.
"""

import csv
import glob
import json
import os
import statistics
import sys


def load(pattern):
    return {os.path.basename(f)[:-5]: json.load(open(f)) for f in sorted(glob.glob(pattern))}


def spread(v, fmt):
    return f"{fmt.format(statistics.median(v))} ({', '.join(fmt.format(x) for x in v)})"


def parts(r):
    runs = load(os.path.join(r, "json", "parts-*.json"))
    if not runs:
        return
    models = sorted({m for d in runs.values() for m in d})
    for m in models:
        ds = [d[m] for d in runs.values() if m in d]
        print(f"## {m}: {len(ds)} processes, allocations a step "
              f"{statistics.median(d['allocations_per_step'] for d in ds):.0f}, paused step "
              f"{spread([d['paused_ms'] for d in ds], '{:.3f}')} ms")
        print(f"{'variant':12} {'over paused, % of step':40} {'µs per allocation':40}")
        variants = [k for k in ds[0] if isinstance(ds[0][k], dict)]
        for v in variants:
            pct = [d[v]["over_paused_pct"] for d in ds]
            us = [d[v]["over_paused_us_per_alloc"] for d in ds]
            print(f"{v:12} {spread(pct, '{:+.2f}'):40} {spread(us, '{:+.3f}'):40}")
        print("what a part costs: full minus the variant without it, per process, then the median")
        for v in variants:
            if v in ("paused", "full"):
                continue
            pct = [d["full"]["over_paused_pct"] - d[v]["over_paused_pct"] for d in ds]
            us = [d["full"]["over_paused_us_per_alloc"] - d[v]["over_paused_us_per_alloc"]
                  for d in ds]
            print(f"  {v:12} {spread(pct, '{:+.2f}'):40} {spread(us, '{:+.3f}'):40}")
        print()


def perf(r):
    files = sorted(glob.glob(os.path.join(r, "logs", "perf-*.csv")))
    if not files:
        probe = os.path.join(r, "logs", "perf-probe.txt")
        if os.path.exists(probe):
            print("perf stat: refused:", open(probe).read().strip().splitlines()[-1:])
        return
    print("## perf stat, whole MLP processes (one variant in every block)")
    rows = {}
    for f in files:
        v = os.path.basename(f)[len("perf-"):-4]
        j = os.path.join(r, "json", f"perf-{v}.json")
        steps_allocs = None
        if os.path.exists(j):
            d = json.load(open(j))["mlp"]
            steps_allocs = d["allocations_per_step"]
        counts = {}
        for row in csv.reader(line for line in open(f) if line.strip() and line[0] != "#"):
            if len(row) > 2 and row[0].replace(".", "").isdigit():
                counts[row[2]] = float(row[0])
        rows[v] = (counts, steps_allocs)
        print(f"  {v:12} " + "  ".join(f"{k} {c:,.0f}" for k, c in counts.items()))
    if "paused" in rows and "full" in rows:
        (p, _), (f, a) = rows["paused"], rows["full"]
        # recorder_parts.py: 20 warm-up steps, rounds x variants x 10 steps, 5 counted steps.
        print("  full minus paused:", "  ".join(f"{k} {f[k] - p.get(k, 0):+,.0f}" for k in f))
    print()


def stamps(r):
    """Per model: each part's ns per allocation in the stamped blocks (raw, and less one empty
    stamp's hot cost per run), their sum, and the blocks' cost over paused beyond them."""
    runs = load(os.path.join(r, "json", "stamps-*.json"))
    if not runs:
        return
    for m in sorted({m for d in runs.values() for m in d}):
        ds = [d[m] for d in runs.values() if m in d]
        st = [d["stamped"] for d in ds]
        empty = [d["empty_stamp_ns"] for d in ds]
        print(f"## {m}, counters: {len(ds)} processes, {ds[0]['stamped']['rounds']} rounds, "
              f"allocations a step {statistics.median(d['allocations_per_step'] for d in ds):.0f}, "
              f"paused step {spread([d['paused_ms'] for d in ds], '{:.3f}')} ms, "
              f"TSC {statistics.median(d['tsc_ghz'] for d in ds):.4f} GHz, "
              f"empty stamp {spread(empty, '{:.1f}')} ns")
        print(f"{'part':8} {'runs/alloc':>10} {'ns/alloc, raw: median (processes)':52} "
              f"{'less the stamps':>15}")
        corrected_sums = [0.0] * len(ds)
        for part in [p for p in st[0]["parts_ns_per_alloc"] if p != "whole"]:
            raw = [x["parts_ns_per_alloc"][part] for x in st]
            n = statistics.median(x["runs_per_alloc"][part] for x in st)
            net = [x["parts_ns_per_alloc"][part] - x["runs_per_alloc"][part] * e
                   for x, e in zip(st, empty)]
            corrected_sums = [c + v for c, v in zip(corrected_sums, net)]
            print(f"{part:8} {n:10.2f} {spread(raw, '{:.1f}'):52} {statistics.median(net):15.1f}")
        rows = [
            ("sum of the parts", [x["parts_sum_ns_per_alloc"] for x in st]),
            ("sum, less the stamps", corrected_sums),
            ("stamped over paused", [1000 * x["over_paused_us_per_alloc"] for x in st]),
            ("indirect, stamped: over paused less the parts, per round",
             [x["indirect_ns_per_alloc"] for x in st]),
            ("full over paused", [1000 * d["full"]["over_paused_us_per_alloc"] for d in ds]),
            ("indirect, full: over paused less the parts less the stamps",
             [1000 * d["full"]["over_paused_us_per_alloc"] - c
              for d, c in zip(ds, corrected_sums)]),
            ("the stamps' cost: stamped less full",
             [1000 * (x["over_paused_us_per_alloc"] - d["full"]["over_paused_us_per_alloc"])
              for x, d in zip(st, ds)]),
            ("full over paused, block means", [d["full"]["mean_over_paused_ns_per_alloc"]
                                               for d in ds]),
        ]
        if all("whole" in d for d in ds):
            wh = [d["whole"] for d in ds]
            net = [x["parts_ns_per_alloc"]["whole"] - x["runs_per_alloc"]["whole"] * e
                   for x, e in zip(wh, empty)]
            rows += [
                ("whole callback (2 stamps an entry)", [x["parts_ns_per_alloc"]["whole"]
                                                        for x in wh]),
                ("whole callback, less its stamps", net),
                ("whole over paused", [1000 * x["over_paused_us_per_alloc"] for x in wh]),
                ("indirect, whole: over paused less the callback, per round",
                 [x["indirect_ns_per_alloc"] for x in wh]),
                ("indirect, full: over paused less the whole callback less its stamps",
                 [1000 * d["full"]["over_paused_us_per_alloc"] - n for d, n in zip(ds, net)]),
            ]
        for name, v in rows:
            print(f"  {name:68} {spread(v, '{:.0f}')}")
        print(f"  {'full over paused, % of the step':68} "
              f"{spread([d['full']['over_paused_pct'] for d in ds], '{:+.2f}')}")
        print()


def pin(r):
    """Per model and pin mode: full over paused, the whole callback less its stamps, and the
    indirect rest, per allocation (median of the processes, each process in brackets)."""
    runs = load(os.path.join(r, "json", "pin-*.json"))
    if not runs:
        return
    by = {}
    for name, d in runs.items():
        mode = d["pin"]["mode"]
        for m, v in d.items():
            if m != "pin":
                by.setdefault((m, mode), []).append((v, d["pin"]))
    print("## where the writer thread runs: ns an allocation, median (processes)")
    for (m, mode), rows in sorted(by.items()):
        full = [1000 * v["full"]["over_paused_us_per_alloc"] for v, _ in rows]
        net = [v["whole"]["parts_ns_per_alloc"]["whole"]
               - v["whole"]["runs_per_alloc"]["whole"] * v["empty_stamp_ns"] for v, _ in rows]
        pct = [v["full"]["over_paused_pct"] for v, _ in rows]
        cpus = sorted({(p["main_cpu"], p["writer_cpu"]) for _, p in rows}, key=str)
        print(f"  {m:5} {mode:8} full over paused {spread(full, '{:.0f}')}  "
              f"({spread(pct, '{:+.2f}')}%)  callback {spread(net, '{:.0f}')}  "
              f"indirect {spread([f - n for f, n in zip(full, net)], '{:.0f}')}  cpus {cpus}")
    print()


def ab(r):
    runs = load(os.path.join(r, "json", "ab-*.json"))
    if not runs:
        return
    rows = {}
    for name, d in runs.items():
        _, build, _ = name.split("-")
        for m, v in d.items():
            if isinstance(v, dict) and "recorded" in v:
                rec, pau = v["recorded"]["median_ms"], v["paused"]["median_ms"]
                rows.setdefault((m, build), []).append(100 * (rec / pau - 1))
                print(f"{name:8} {m:5} recorded {rec:8.3f} ms  paused {pau:8.3f} ms  "
                      f"({100 * (rec / pau - 1):+6.2f}%)")
    print("## in one process, recorded against paused, median of the processes (each process)")
    for (m, build), v in sorted(rows.items()):
        print(f"  {m:5} {build}  {spread(v, '{:+.2f}')}%")
    print()


def proc(r):
    runs = load(os.path.join(r, "json", "proc-*.json"))
    if not runs:
        return
    by = {}
    for name, d in runs.items():
        _, setting, _ = name.split("-")
        by.setdefault(setting, []).append(d["mlp"]["median_ms"])
    print("## between processes, MLP: median step (ms) of the processes' medians")
    base = statistics.median(by["plain"]) if "plain" in by else None
    for s, v in by.items():
        rel = f"{100 * (statistics.median(v) / base - 1):+.1f}%" if base else ""
        print(f"  {s:8} {spread(v, '{:.3f}'):40} {rel}")


def main():
    r = sys.argv[1]
    parts(r)
    perf(r)
    stamps(r)
    pin(r)
    ab(r)
    proc(r)


if __name__ == "__main__":
    main()
