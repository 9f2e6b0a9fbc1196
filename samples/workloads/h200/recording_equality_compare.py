"""The table of recording_equality_h200.sh: each workload's unrecorded and recorded figures, as
PyTorch's allocator reported them, compared to the byte.

    python3 recording_equality_compare.py JSON_DIR

Compared: peak reserved and allocated bytes, device allocations and frees, retries, the number
of tensor allocations, and the pinned host allocator's counters. The host allocator's
`*_time.*` entries are durations in microseconds, which no two runs share, and are left out.
"""

import json
import os
import sys

KEYS = ["max_memory_reserved", "max_memory_allocated", "num_device_alloc", "num_device_free",
        "num_alloc_retries", "allocation_count"]


def host(result):
    return {k: v for k, v in result.get("host", {}).items() if "_time." not in k}


def differences(a, b):
    diff = [k for k in KEYS if a.get(k) != b.get(k)]
    ha, hb = host(a), host(b)
    diff += [f"host {k} {ha.get(k)}/{hb.get(k)}" for k in sorted(set(ha) | set(hb))
             if ha.get(k) != hb.get(k)]
    return diff


def main():
    d = sys.argv[1]
    rows = sorted({f.rsplit(".", 2)[0] for f in os.listdir(d) if f.endswith(".json")})
    device_same = True
    print("| workload, compile cache | peak reserved (B) | peak allocated (B) | device allocs "
          "| other differences |")
    print("|---|---|---|---|---|")
    for r in rows:
        if r.endswith(".warmup"):
            continue
        try:
            a = json.load(open(f"{d}/{r}.plain.json"))
            b = json.load(open(f"{d}/{r}.recorded.json"))
        except OSError as e:
            print(f"| {r} | missing: {e} | | | |")
            device_same = False
            continue
        for k in KEYS[:3]:
            device_same &= a.get(k) == b.get(k)

        def fig(k):
            return f"{a.get(k):,}" if a.get(k) == b.get(k) else f"{a.get(k)} / {b.get(k)} (DIFFER)"

        other = [x for x in differences(a, b) if x not in KEYS[:3]]
        print(f"| {r} | {fig('max_memory_reserved')} | {fig('max_memory_allocated')} | "
              f"{fig('num_device_alloc')} | {', '.join(other) or 'none'} |")
    print()
    print("peak reserved, peak allocated and device allocations identical in every pair:",
          device_same)


if __name__ == "__main__":
    main()
