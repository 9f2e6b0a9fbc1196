#!/usr/bin/env python3
"""Ground truth for the `cuda-async` policy: a workload of replay_validate.py under
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, with the pool's real figures.

Under that back-end PyTorch calls cudaMallocAsync/cudaFreeAsync per tensor with the raw size
(c10/cuda/CUDAMallocAsyncAllocator.cpp) and torch.cuda.max_memory_reserved() reports the default
pool's ReservedMemHigh. PyTorch's memory history is not available under this back-end, so the
request stream comes from the same deterministic workload recorded under the native back-end
(samples/traces/h200-torch/NAME.native.vramtrace); the peak of allocated bytes (UsedMemHigh) is
written too, to check that both runs made the same requests.

Usage: PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 policies_async_validate.py WORKLOAD OUT
Writes OUT/WORKLOAD.async.stats.json.
"""
import json
import os
import sys
import time

import torch

# replay_validate turns memory history on at import; the async back-end refuses it.
torch.cuda.memory._record_memory_history = lambda *a, **k: None
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay_validate as rv  # noqa: E402


def main():
    workload, out = sys.argv[1], sys.argv[2]
    assert "cudaMallocAsync" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "run under backend:cudaMallocAsync"
    os.makedirs(out, exist_ok=True)
    start = time.time()
    rv.WORKLOADS[workload]()
    torch.cuda.synchronize()
    stats = {
        "workload": workload,
        "name": workload + ".async",
        "alloc_conf": os.environ["PYTORCH_CUDA_ALLOC_CONF"],
        "backend": torch.cuda.get_allocator_backend(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(),
        "seconds": time.time() - start,
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "memory_stats": dict(torch.cuda.memory_stats()),
    }
    with open(os.path.join(out, workload + ".async.stats.json"), "w") as f:
        json.dump(stats, f, indent=1, sort_keys=True)
    print(
        f"{workload}.async: {stats['seconds']:.1f}s reserved_high={stats['max_memory_reserved']}"
        f" used_high={stats['max_memory_allocated']} backend={stats['backend']}",
        flush=True,
    )


if __name__ == "__main__":
    main()
