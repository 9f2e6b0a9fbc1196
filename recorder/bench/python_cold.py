"""Python-stack cost per allocation in cold caches (recorder/BENCHMARKS.md, "Python frames, cold"):
cuMemAlloc_v2 of the fake driver (nulldriver.c) through ctypes, each call timed alone, from DEPTH
distinct Python functions (each its own code object, as a framework's frames are), with COLD_KIB
KiB of other memory written between two calls, as a training step's work between two tensors
does (tracker_overhead.c's cold mode).

    python3 python_cold.py DEPTH CALLS COLD_KIB [ALTERNATE]

ALTERNATE 1 makes consecutive calls from two lines of the innermost function in turn, so that no
call has the stack of the call before it (two of the recorder's recent stacks, recorder/src/
stacks.rs `State::recent`, then take turns); 0, the default, calls from one line. Prints `alloc MEDIAN IQM` (ns per call, the
interquartile mean beside the median). 2,000 untimed calls come first; the frees are untimed.
"""
import ctypes
import statistics
import sys
import time

cuda = ctypes.CDLL("libcuda.so.1")
alloc, free = cuda.cuMemAlloc_v2, cuda.cuMemFree_v2
alloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
free.argtypes = [ctypes.c_uint64]
ptr = ctypes.c_uint64()
ref = ctypes.byref(ptr)
clock = time.perf_counter_ns
memset = ctypes.memset


def calls(n, cold_bytes, buf, out, alternate):
    size = len(buf)
    base = ctypes.addressof(buf)
    at = 0
    for i in range(n):
        if cold_bytes:
            if at + cold_bytes > size:
                at = 0
            memset(base + at, 1, cold_bytes)
            at += cold_bytes
        t0 = clock()
        if i & alternate:
            alloc(ref, 4096)
        else:
            alloc(ref, 4096)
        t1 = clock()
        free(ptr.value)
        if out is not None:
            out.append(t1 - t0)


def chain(depth):
    # f0 calls f1 ... calls the loop: DEPTH frames of distinct code objects.
    scope = {"calls": calls}
    for i in reversed(range(depth)):
        callee = f"f{i + 1}" if i + 1 < depth else "calls"
        src = f"def f{i}(n, c, b, o, a):\n    x = {i}\n    return {callee}(n, c, b, o, a)\n"
        exec(compile(src, f"/bench/layer{i}.py", "exec"), scope)
    return scope["f0"]


def main():
    depth, n, cold_kib = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    alternate = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    buf = (ctypes.c_char * (64 << 20))()
    top = chain(depth)
    top(2000, cold_kib << 10, buf, None, alternate)
    out = []
    top(n, cold_kib << 10, buf, out, alternate)
    out.sort()
    q = len(out) // 4
    iqm = statistics.mean(out[q : len(out) - q])
    print(f"alloc {statistics.median(out):.1f} {iqm:.1f}")


main()
