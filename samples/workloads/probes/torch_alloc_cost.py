"""What one tensor allocation costs in real PyTorch, with caches warm and cold: the recorder's
cost per tensor measured where it is paid (recording_cost_h200.sh runs it unrecorded and under
each recorder setting, recorder/BENCHMARKS.md "Recording overhead on the H200").

    python torch_alloc_cost.py OUT.json [DEPTH]

warm: batches of 100 `torch.empty` + `del` pairs (sizes 4 KiB to 68 KiB, the small pool, always
served from the cache), timed per batch, from DEPTH Python frames (default 20).
cold: one pair at a time with 4 MiB of other memory written before each (the program's own work
between two allocations evicts the recorder's data from the core's caches), timed per pair.
Each tensor is three allocator entries for the tracker (alloc, free_requested, free_completed).
Prints and writes the median and the 90th percentile, ns per pair, and for each loop the main
thread's context switches during it (voluntary, involuntary: whether another thread, such as a
recorder's writer, took its core) and the process's thread count.
"""

import json
import os
import resource
import statistics
import sys
import time

import torch

clock = time.perf_counter_ns


def warm(n):
    out = []
    for _ in range(n):
        t0 = clock()
        for i in range(100):
            t = torch.empty(1024 + (i % 16) * 1024, device="cuda")
            del t
        out.append((clock() - t0) / 100)
    return out


def cold(n):
    src = bytearray(4 << 20)
    dst = bytearray(4 << 20)
    out = []
    for i in range(n):
        dst[:] = src
        t0 = clock()
        t = torch.empty(1024 + (i % 16) * 1024, device="cuda")
        del t
        out.append(clock() - t0)
    return out


def at_depth(depth, f, n):
    if depth > 1:
        return at_depth(depth - 1, f, n)
    return f(n)


def main():
    depth = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    torch.empty(1, device="cuda")
    at_depth(depth, warm, 50)
    at_depth(depth, cold, 500)
    result = {}
    for name, f, n in (("warm", warm, 300), ("cold", cold, 5000)):
        before = resource.getrusage(resource.RUSAGE_THREAD)
        v = sorted(at_depth(depth, f, n))
        after = resource.getrusage(resource.RUSAGE_THREAD)
        result[name] = {
            "median_ns": statistics.median(v),
            "p90_ns": v[len(v) * 9 // 10],
            "voluntary_switches": after.ru_nvcsw - before.ru_nvcsw,
            "involuntary_switches": after.ru_nivcsw - before.ru_nivcsw,
        }
    result["threads"] = len(os.listdir("/proc/self/task"))
    with open(sys.argv[1], "w") as f:
        json.dump(result, f)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
