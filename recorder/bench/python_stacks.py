"""Python-stack cost per allocation (recorder/BENCHMARKS.md, "Python frames"): cuMemAlloc_v2 and
cuMemFree_v2 of the fake driver (nulldriver.c) called through ctypes from DEPTH Python frames.

    python3 python_stacks.py DEPTH ROUNDS

Each round makes 1000 alloc/free pairs timed in batches of 100 calls of one kind, then sleeps
2 ms (the recorder's writer drains outside the timed part). 80 untimed rounds come first: more
events than the crash journal holds, so the timed part sees the steady state. Prints
`alloc MEDIAN P90` and `free MEDIAN P90`, ns per call, as hook_overhead.c does.
"""
import ctypes
import statistics
import sys
import time

cuda = ctypes.CDLL("libcuda.so.1")
alloc, free = cuda.cuMemAlloc_v2, cuda.cuMemFree_v2
alloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
free.argtypes = [ctypes.c_uint64]
ptrs = (ctypes.c_uint64 * 100)()
ref = [ctypes.byref(ptrs, 8 * i) for i in range(100)]
clock = time.perf_counter_ns


def rounds(n, out):
    for _ in range(n):
        for _ in range(10):
            t0 = clock()
            for r in ref:
                alloc(r, 4096)
            t1 = clock()
            for p in ptrs:
                free(p)
            t2 = clock()
            if out is not None:
                out[0].append((t1 - t0) / 100)
                out[1].append((t2 - t1) / 100)
        time.sleep(0.002)


def at_depth(depth, n, out):
    # The allocation's Python stack: this frame, depth - 2 recursive frames, and <module>.
    if depth > 2:
        return at_depth(depth - 1, n, out)
    rounds(n, out)


def main():
    depth, n = int(sys.argv[1]), int(sys.argv[2])
    at_depth(depth, 80, None)
    out = ([], [])
    at_depth(depth, n, out)
    for name, v in zip(("alloc", "free"), out):
        v.sort()
        print(f"{name} {statistics.median(v):.1f} {v[len(v) * 9 // 10]:.1f}")


main()
