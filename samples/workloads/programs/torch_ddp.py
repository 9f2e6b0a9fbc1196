"""Two-rank DistributedDataParallel training (NCCL) for recorder validation: one trace per rank.

    torchrun --nproc-per-node 2 torch_ddp.py OUTDIR

Each rank trains the MLP of torch_train.py on its own GPU for 10 steps and writes
OUTDIR/ddp_rank<R>.json with its pid, device and PyTorch's memory counters.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    torch.manual_seed(rank)
    layers = []
    for _ in range(4):
        layers += [nn.Linear(2048, 2048), nn.GELU()]
    model = nn.parallel.DistributedDataParallel(nn.Sequential(*layers).cuda(), device_ids=[local])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(10):
        x = torch.randn(128, 2048, device="cuda")
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    truth = {
        "rank": rank,
        "pid": os.getpid(),
        "device": local,
        "num_device_alloc": stats.get("num_device_alloc"),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
    }
    with open(os.path.join(sys.argv[1], f"ddp_rank{rank}.json"), "w") as f:
        json.dump(truth, f)
    print(json.dumps(truth))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
