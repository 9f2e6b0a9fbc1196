"""Memory outside PyTorch's pool, one GPU (issue 26, item 2; docs/validation.md "Outside the
pool, named"): a single-rank NCCL process group with an all_reduce, cuBLAS matmuls and a cuDNN
convolution (forward and backward), under `vramtrace record` with its defaults.

    torchrun --nproc-per-node 1 outside_pool.py OUT.json

Writes OUT.json with the pid, the device, PyTorch's counters, and the device's used bytes as
`cudaMemGetInfo` gives them at the end (total − free: this process and the driver's own
reservation, when the process is alone on the GPU). Holds its memory 1 s at the end, so that
the recorder's writer thread (which asks NVML at most every 250 ms) sees the process's high.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    t = torch.ones(64 << 20, device="cuda")
    dist.all_reduce(t)
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")
    c = a @ b
    h = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    d = h @ h
    conv = nn.Conv2d(64, 128, 3, padding=1).cuda()
    x = torch.randn(32, 64, 128, 128, device="cuda", requires_grad=True)
    conv(x).sum().backward()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    stats = torch.cuda.memory_stats()
    truth = {
        "pid": os.getpid(),
        "device": local,
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "memory_reserved": torch.cuda.memory_reserved(),
        "num_device_alloc": stats.get("num_device_alloc"),
        "device_used_at_end": total - free,
        "checksum": float(c[0, 0] + d[0, 0].float() + t[0]),
    }
    with open(sys.argv[1], "w") as f:
        json.dump(truth, f)
    print(json.dumps(truth), flush=True)
    time.sleep(1.0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
