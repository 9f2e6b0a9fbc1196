#!/usr/bin/env python3
"""Compares `vramtrace replay` with the real allocator's figures from replay_validate.py.

  python3 samples/workloads/h200/replay_compare.py RESULTS_DIR [OUT_TRACES_DIR]

RESULTS_DIR holds NAME.requests.csv.gz and NAME.stats.json per run (the unpacked
replay-validation.tar.gz). Each run's own request stream is converted to a .vramtrace with
`cargo run --release --example import_torch_trace`, replayed with the policy that matches the
configuration it ran under, and compared with the same process's torch.cuda.memory_stats().
Prints a Markdown table for docs/validation.md.
"""
import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile

def policy(conf, fraction):
    """The vramtrace policy a run's PYTORCH_CUDA_ALLOC_CONF and memory fraction configure
    (the same mapping as vramtrace::policy::pytorch::spec_from_alloc_conf)."""
    name, options = "pytorch", []
    for item in filter(None, conf.split(",")):
        key, value = item.split(":", 1)
        if key == "expandable_segments":
            name = "pytorch-expandable" if value.lower() == "true" else name
        else:
            options.append(f"{key}={value}")
    if fraction:
        options.append(f"memory_fraction={fraction}")
    return name + (":" + ",".join(options) if options else "")


def mib(b):
    return f"{b / 2**20:,.1f}"


def main():
    results = sys.argv[1]
    keep = sys.argv[2] if len(sys.argv) > 2 else None
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "vramtrace", "--examples", "--bins"],
        cwd=root,
        check=True,
    )
    importer = os.path.join(root, "target/release/examples/import_torch_trace")
    vramtrace = os.path.join(root, "target/release/vramtrace")
    rows = []
    tmp = tempfile.mkdtemp()
    for stats_path in sorted(glob.glob(os.path.join(results, "*.stats.json"))):
        stats = json.load(open(stats_path))
        name = stats["name"]
        csv_path = os.path.join(tmp, name + ".csv")
        with gzip.open(os.path.join(results, name + ".requests.csv.gz"), "rt") as f, open(csv_path, "w") as o:
            o.write(f.read())
        out_dir = keep or tmp
        trace = os.path.join(out_dir, name + ".vramtrace")
        subprocess.run([importer, csv_path, trace, stats_path], check=True, capture_output=True)
        if not os.path.exists(stats_path.replace(".stats.json", ".requests.csv.gz")):
            continue
        pol = policy(stats["alloc_conf"], stats.get("memory_fraction", ""))
        rep = json.loads(
            subprocess.run(
                [vramtrace, "replay", trace, "--policy", pol, "--json"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        p = rep["policies"][0]
        s = stats["memory_stats"]
        real_r, real_a = stats["max_memory_reserved"], stats["max_memory_allocated"]
        rows.append(
            (
                stats["workload"],
                pol,
                p["peak_reserved"],
                real_r,
                100.0 * (p["peak_reserved"] - real_r) / real_r,
                p["peak_allocated"],
                real_a,
                p["device_allocs"],
                s.get("num_device_alloc"),
                rep["lower_bound_bytes"],
                p["device_frees"],
                s.get("num_device_free"),
            )
        )
    print("| workload | policy | predicted peak reserved (MiB) | real (MiB) | error | predicted peak allocated (MiB) | real (MiB) | device allocs predicted / real | device frees predicted / real | lower bound (MiB) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for w, pol, pr, rr, err, pa, ra, pd, rd, lb, pf, rf in rows:
        print(f"| {w} | `{pol}` | {mib(pr)} | {mib(rr)} | {err:+.2f}% | {mib(pa)} | {mib(ra)} | {pd} / {rd} | {pf} / {rf} | {mib(lb)} |")


if __name__ == "__main__":
    main()
