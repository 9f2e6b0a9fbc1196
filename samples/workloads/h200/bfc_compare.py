#!/usr/bin/env python3
"""The BFC table of docs/validation.md, "Part 3", from validation_device_run.sh's JAX results.

    python3 bfc_compare.py VRAMTRACE RESULTS_DIR

For each JAX workload (jax_validate.py): BFC's own request stream (the XLA log of the
PREALLOCATE=false run, converted by bfc_log_to_rmm_csv.py and imported) replayed with
`bfc:allow_growth=true` and `bfc`, and the `record --requests` trace (platform allocator) replayed
with both, against memory_stats() of the PREALLOCATE=false run and of the default run:
peak_pool_bytes (reserved) and peak_bytes_in_use. Capacity: the H200's 150,109,880,320 bytes.
"""
import json
import os
import subprocess
import sys
import tempfile

H200 = 150109880320
HERE = os.path.dirname(os.path.abspath(__file__))


def replay(vt, trace, policies):
    out = subprocess.run([vt, "replay", "--json", trace, "--capacity", f"{H200}B", "--policy", ",".join(policies)],
                         check=True, capture_output=True, text=True).stdout
    d = json.loads(out)
    return {p["name"]: p for p in d["policies"]}, d["lower_bound_bytes"]


def main():
    vt, d = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp()
    print("| workload | request stream | policy | real run | reserved predicted / real | error | peak in use predicted / real | regions predicted / real |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    for w in ["mlp", "varshape"]:
        csv = os.path.join(tmp, w + ".csv")
        regions = subprocess.run([sys.executable, os.path.join(HERE, "bfc_log_to_rmm_csv.py"),
                                  os.path.join(d, f"jax_{w}.bfclog.err.gz"), csv],
                                 check=True, capture_output=True, text=True).stdout
        n_regions = len(regions.split("regions: ")[1].split(","))
        bfc_trace = os.path.join(tmp, w + ".vramtrace")
        subprocess.run([vt, "import", csv, "-o", bfc_trace], check=True, capture_output=True)
        streams = [("BFC's own (XLA log)", bfc_trace), ("platform trace (`record --requests`)",
                                                        os.path.join(d, f"jax_{w}.platform.vramtrace"))]
        for src, trace in streams:
            got, lb = replay(vt, trace, ["bfc:allow_growth=true", "bfc"])
            for policy, run in [("bfc:allow_growth=true", "growth"), ("bfc", "default")]:
                s = json.load(open(os.path.join(d, f"jax_{w}.{run}.json")))["memory_stats"]
                p = got[policy]
                err = (p["peak_reserved"] - s["peak_pool_bytes"]) / s["peak_pool_bytes"] * 100
                reg = f"{p['device_allocs']} / {n_regions}" if run == "growth" else f"{p['device_allocs']} / 1"
                print(f"| {w} | {src} | `{policy}` | PREALLOCATE={'false' if run == 'growth' else 'default'} "
                      f"| {p['peak_reserved']:,} / {s['peak_pool_bytes']:,} | {err:+.2f}% "
                      f"| {p['peak_allocated']:,} / {s['peak_bytes_in_use']:,} | {reg} |")
            print(f"| {w} | {src} | (peak of live requested bytes) | | {lb:,} | | | |")


if __name__ == "__main__":
    main()
