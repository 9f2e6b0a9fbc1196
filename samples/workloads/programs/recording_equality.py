"""Workloads for the proof that recording changes nothing (recording_equality_h200.sh runs each
one unrecorded and recorded and compares what PyTorch's allocator says; docs/validation.md,
"Recording changes nothing", has the table).

    python3 recording_equality.py WORKLOAD OUT.json

The eager MLP, CUDA-graph, reduce-overhead and varlen workloads are torch_tracker_workloads.py's;
this file adds torch.compile's default mode, AMP, gradient checkpointing, a data loader with
pinned memory and GPT-2 small training. OUT.json gets the allocator's own figures as the
workload ends: peak reserved and allocated bytes, device allocations and frees, retries, and the
pinned host allocator's figures where this PyTorch has them.
"""

import json
import sys

import torch
import torch.nn as nn
import torch.utils.checkpoint

import models
import torch_tracker_workloads as tw


def compile_default():
    model = tw.mlp_model()
    opt = torch.optim.AdamW(model.parameters())
    compiled = torch.compile(model)
    for step in range(8):
        x = torch.randn(64 + 16 * (step % 2), 1024, device="cuda")
        compiled(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def encoder(layers=6):
    return models.encoder(layers, "cuda")


def amp():
    model = encoder()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(20):
        x = torch.randn(16, 64 + 32 * (step % 4), 512, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def checkpointing():
    blocks = nn.ModuleList(encoder().layers)
    opt = torch.optim.AdamW(blocks.parameters(), lr=1e-4)
    for step in range(20):
        h = torch.randn(16, 128 + 64 * (step % 3), 512, device="cuda", requires_grad=True)
        for block in blocks:
            h = torch.utils.checkpoint.checkpoint(block, h, use_reentrant=False)
        h.pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


class Images(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 64, 64, generator=g), i % 10


def pinned_loader():
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(32 * 64 * 64, 10)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(
        Images(), batch_size=32, num_workers=2, pin_memory=True, shuffle=False
    )
    for _ in range(2):
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)


def gpt2_train():
    model = tw.gpt2(256).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(6):
        ids = torch.randint(0, 50257, (8, 256), device="cuda")
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


WORKLOADS = {
    "mlp": tw.complete_native,
    "cuda-graph": tw.complete_graph,
    "compile-default": compile_default,
    "compile-reduce-overhead": tw.complete_compile,
    "varlen": tw.varlen,
    "amp": amp,
    "checkpointing": checkpointing,
    "pinned-loader": pinned_loader,
    "gpt2-train": gpt2_train,
}


def main():
    name, out = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    WORKLOADS[name]()
    torch.cuda.synchronize()
    s = torch.cuda.memory_stats()
    result = {
        "workload": name,
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "num_device_alloc": s.get("num_device_alloc"),
        "num_device_free": s.get("num_device_free"),
        "num_alloc_retries": s.get("num_alloc_retries"),
        "allocation_count": s.get("allocation.all.allocated"),
    }
    host = getattr(torch.cuda, "host_memory_stats", None)
    if host is not None:
        result["host"] = {k: v for k, v in host().items() if isinstance(v, int)}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
