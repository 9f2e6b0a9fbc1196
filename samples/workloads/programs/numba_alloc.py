"""numba-cuda device arrays: each is one cuMemAlloc of its byte size (through cuda.bindings,
which opens the driver as "libcuda.so").

    python numba_alloc.py TRUTH.json
"""

import json
import sys

import numpy as np
from numba import cuda


def main():
    sizes = [(i + 1) * 10_000 for i in range(25)]
    arrays = [cuda.device_array(n, dtype=np.float64) for n in sizes]
    cuda.synchronize()
    del arrays
    cuda.current_context().deallocations.clear()
    truth = {"alloc_bytes": [n * 8 for n in sizes], "frees": len(sizes)}
    with open(sys.argv[1], "w") as f:
        json.dump(truth, f, indent=1)
    print(json.dumps(truth))


if __name__ == "__main__":
    main()
