"""The table of docs/validation.md "Outside the pool, named" from outside_h200.sh's results:
per recorded process, the driver's own count (NVML, recorded) against what the trace names,
and the libraries outside PyTorch's pool.

    python3 outside_compare.py DIR

DIR holds summary/*.json (`vramtrace summary --json` of each trace) and truth.json (outside_pool.py's output). Prints a Markdown table.
"""

import glob
import json
import sys

MIB = 1 << 20


def main():
    d = sys.argv[1]
    truth = json.load(open(f"{d}/truth.json"))
    print("| pid | device | driver's count (MiB) | named (MiB) | named | CUDA context (MiB) | "
          "outside the pool, by library (most held at once, MiB; site) | PyTorch max reserved (MiB) |")
    print("|---|---|---:|---:|---:|---:|---|---:|")
    for path in sorted(glob.glob(f"{d}/summary/*.json")):
        s = json.load(open(path))
        for g in s["groups"]:
            if g["device"] < 0:
                continue
            c = g.get("driver_count")
            libs = "; ".join(
                f"{m['library']} {m['peak_bytes'] / MIB:.1f}"
                + (" (" + m["site"].rsplit("/", 1)[-1] + ")" if m.get("site") else "")
                for m in g.get("outside_by_library", [])
            )
            mine = truth if truth["pid"] == g["pid"] else {}
            reserved = mine.get("max_memory_reserved")
            if c is None:
                print(f"| {g['pid']} | {g['device']} | not recorded | | | | {libs} | |")
                continue
            ctx = "" if c["context_bytes"] is None else f"{c['context_bytes'] / MIB:.1f}"
            print(
                f"| {g['pid']} | {g['device']} | {c['driver_bytes'] / MIB:.1f} | "
                f"{c['named_bytes'] / MIB:.1f} | {100 * c['named_fraction']:.2f}% | "
                f"{ctx} | {libs} | "
                f"{'' if reserved is None else round(reserved / MIB, 1)} |"
            )


if __name__ == "__main__":
    main()
