"""Distributed jobs for the job view (issue 26, item 1): one job per run, every rank on its own
GPU, under `vramtrace record`.

    torchrun --nproc-per-node N torch_jobs.py JOB OUTDIR

JOB is `ddp` (DistributedDataParallel), `fsdp` (fully sharded, FSDP2's `fully_shard`), `fsdp-offload`
(the same with its parameters and optimizer state on the CPU: `CPUOffloadPolicy`) or `tp` (a
tensor-parallel MLP, `torch.distributed.tensor.parallel`: the first layer column-wise, the
second row-wise). Each rank trains 10 steps of AdamW and writes OUTDIR/JOB_rank<R>.json with its
pid, device and PyTorch's memory counters (as torch_ddp.py does), which the traces' per-rank
peaks and replays are checked against.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

WIDTH = 2048


def mlp():
    layers = []
    for _ in range(4):
        layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
    return nn.Sequential(*layers)


def build(job, local):
    if job == "ddp":
        return nn.parallel.DistributedDataParallel(mlp().cuda(), device_ids=[local]), "cuda"
    if job in ("fsdp", "fsdp-offload"):
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

        model = mlp()
        policy = {"offload_policy": CPUOffloadPolicy()} if job == "fsdp-offload" else {}
        if job == "fsdp":
            model = model.cuda()
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, **policy)
        fully_shard(model, **policy)
        return model, "cuda"
    if job == "tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )

        mesh = init_device_mesh("cuda", (dist.get_world_size(),))
        model = nn.Sequential(
            nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH)
        ).cuda()
        plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}
        return parallelize_module(model, mesh, plan), "cuda"
    raise SystemExit(f"unknown job {job!r}: ddp, fsdp, fsdp-offload or tp")


def main():
    job, out = sys.argv[1], sys.argv[2]
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model, device = build(job, local)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(10):
        # The same input on every rank: tensor parallelism needs it, the others do not mind.
        x = torch.randn(128, WIDTH, device=device)
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    truth = {
        "job": job,
        "rank": rank,
        "world_size": dist.get_world_size(),
        "pid": os.getpid(),
        "device": local,
        "num_device_alloc": stats.get("num_device_alloc"),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
    }
    with open(os.path.join(out, f"{job}_rank{rank}.json"), "w") as f:
        json.dump(truth, f)
    print(json.dumps(truth), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
