"""CuPy allocations, first through its memory pool, then with the pool switched off.

    python cupy_alloc.py TRUTH.json

With the pool off, each array is exactly one cudaMalloc of its byte size: the trace must hold
those 40 cuMemAlloc_v2 calls with exactly these sizes. With the pool on, what the pool holds
(total_bytes) is what the driver was asked for.
"""

import json
import sys

import cupy as cp


def main():
    pool = cp.get_default_memory_pool()
    pooled = [cp.zeros((i + 1) * 100_000, dtype=cp.float32) for i in range(30)]
    cp.cuda.Device().synchronize()
    pool_total = pool.total_bytes()
    del pooled
    pool.free_all_blocks()

    cp.cuda.set_allocator(None)
    sizes = [(i + 1) * 4096 * 8 for i in range(40)]
    direct = [cp.empty(n // 8, dtype=cp.float64) for n in sizes]
    cp.cuda.Device().synchronize()
    del direct
    truth = {
        "pool_total_bytes_with_30_arrays": pool_total,
        "direct_alloc_sizes": sizes,
        "cupy": cp.__version__,
    }
    with open(sys.argv[1], "w") as f:
        json.dump(truth, f, indent=1)
    print(json.dumps(truth))


if __name__ == "__main__":
    main()
