#!/usr/bin/env python3
"""Small request streams that expose the stream-ordered pool's growth and reuse rules (its
internals are not published, docs/allocators.md §6), written as the CSV that
analyzer/examples/import_torch_trace.rs converts to .vramtrace. Replayed with
`vramtrace replay --on-device --json`, each gives the pool's reserved memory after every
allocation (`reserved_steps`).

Usage: python3 policies_probes.py OUTDIR   (writes OUTDIR/probe_*.csv)
"""
import os
import sys

MiB = 1 << 20


class Stream:
    def __init__(self):
        self.rows, self.next, self.t = [], 1 << 40, 0

    def alloc(self, size, stream=0):
        addr = self.next
        self.next += (size + (2 * MiB)) // (2 * MiB) * (2 * MiB) + 2 * MiB
        self.t += 1
        self.rows.append(f"alloc,{addr},{size},{stream},{self.t}")
        return (addr, size)

    def free(self, a, stream=0):
        self.t += 1
        self.rows.append(f"free_requested,{a[0]},{a[1]},{stream},{self.t}")


def sizes():
    # Growth granularity: no frees, sizes across the interesting edges.
    s = Stream()
    for size in [512, 4096, 65536, MiB, MiB + 1, 2 * MiB, 2 * MiB + 1, 3 * MiB, 10 * MiB,
                 20 * MiB + 1, 33 * MiB, 64 * MiB + 1, 100 * MiB, 256 * MiB + 1, 1024 * MiB]:
        s.alloc(size)
    for _ in range(64):
        s.alloc(300 * 1024)
    return s


def reuse():
    # The devlogs case (8 x 16 MiB, free, 4 x 32 MiB), then a hole that only fits smaller blocks.
    s = Stream()
    a = [s.alloc(16 * MiB) for _ in range(8)]
    for x in a:
        s.free(x)
    b = [s.alloc(32 * MiB) for _ in range(4)]
    c = [s.alloc(64 * MiB) for _ in range(3)]
    s.free(c[0])
    s.free(c[2])
    s.alloc(96 * MiB)
    s.alloc(48 * MiB)
    for x in b:
        s.free(x)
    s.alloc(100 * MiB)
    return s


def small():
    s = Stream()
    a = [s.alloc(10 * 1024) for _ in range(2000)]
    for x in a[::2]:
        s.free(x)
    [s.alloc(20 * 1024) for _ in range(2000)]
    return s


def streams():
    # Reuse across streams without any event dependency: opportunistic only.
    s = Stream()
    a = s.alloc(64 * MiB, 0)
    s.free(a, 0)
    b = s.alloc(64 * MiB, 7)
    s.free(b, 7)
    s.alloc(64 * MiB, 0)
    s.alloc(64 * MiB, 7)
    return s


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for f in (sizes, reuse, small, streams):
        with open(os.path.join(out, f"probe_{f.__name__}.csv"), "w") as fh:
            fh.write("action,addr,size,stream,time_us\n")
            fh.write("\n".join(f().rows) + "\n")


if __name__ == "__main__":
    main()
