#!/usr/bin/env python3
"""Compares vramtrace's RMM models with real RMM (rmm_replay.py's JSON from the H200).

    python3 rmm_compare.py VRAMTRACE RMM_REPLAY.json LOG.csv[.gz] ...

Each LOG is imported (`vramtrace import`, RMM's CSV) and replayed with `rmm-pool`,
`rmm-pool:maximum_pool_size=` (the cap rmm_replay.py used), `rmm-binning`; for `rmm-arena`
the smallest `arena_size` that serves the log is bisected with the model the same way
rmm_replay.py bisected it with real RMM. Prints one Markdown table (docs/validation.md).
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile


def replay(vt, trace, policies):
    out = subprocess.run([vt, "replay", "--json", trace, "--policy", ",".join(policies)],
                         check=True, capture_output=True, text=True).stdout
    return {p["name"]: p for p in json.loads(out)["policies"]}


def align(n):
    return (n + 255) // 256 * 256


def main():
    vt, real_path, logs = sys.argv[1], sys.argv[2], sys.argv[3:]
    real = json.load(open(real_path))["logs"]
    tmp = tempfile.mkdtemp()
    print("| log | requests | resource | RMM (real) | model | error | upstream allocations real / model |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for log in logs:
        name = os.path.basename(log).split(".")[0]
        r = real[name]
        csv = os.path.join(tmp, name + ".csv")
        op = gzip.open if log.endswith(".gz") else open
        with op(log, "rt") as f, open(csv, "w") as g:
            g.write(f.read())
        trace = os.path.join(tmp, name + ".vramtrace")
        subprocess.run([vt, "import", csv, "-o", trace], check=True, capture_output=True)
        cap = r["pool_cap"]["maximum_pool_size"]
        specs = {"pool": "rmm-pool", "pool_cap": f"rmm-pool:maximum_pool_size={cap}", "binning": "rmm-binning"}
        got = replay(vt, trace, list(specs.values()))
        for k, spec in specs.items():
            m, x = got[spec], r[k]
            oom = m["oom"]
            note = ""
            if x["refused"] or oom:
                note = f" (RMM refused {x['refused']}, first at request {x['first_refused']}; model OOM at {oom and oom.get('request')})"
            err = (m["peak_reserved"] - x["reserved_peak"]) / x["reserved_peak"] * 100
            print(f"| {name} | {r['requests']:,} | `{spec}` | {x['reserved_peak']:,} | {m['peak_reserved']:,} | {err:+.2f}%{note} | {x['upstream_allocations']} / {m['device_allocs']} |")
        lo, hi = align(r["peak_live"]), align(r["peak_live"] * 3)
        for _ in range(10):
            mid = align((lo + hi) // 2)
            if mid in (lo, hi):
                break
            spec = f"rmm-arena:arena_size={mid}"
            ok = replay(vt, trace, [spec])[spec]["oom"] is None
            lo, hi = (lo, mid) if ok else (mid, hi)
        x = r["arena"]["smallest_arena_that_served"]
        err = (hi - x) / x * 100
        print(f"| {name} | {r['requests']:,} | `rmm-arena` smallest arena that serves the log | {x:,} | {hi:,} | {err:+.2f}% | 1 / 1 |")


if __name__ == "__main__":
    main()
