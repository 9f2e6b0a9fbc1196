"""Deterministic PyTorch training loops for recorder validation and allocator replay.

    python torch_train.py mlp|transformer TRUTH.json

Runs the loop under whatever allocator PYTORCH_CUDA_ALLOC_CONF selects and writes PyTorch's own
figures (torch.cuda.memory_stats and the max_memory_* counters) to TRUTH.json: the ground truth a
recorded trace and an allocator replay are checked against.

mlp: 8 x (Linear(2048, 2048) + GELU), AdamW, batch 256, 30 steps (as in
`docs/h200-measurements.md`). transformer: 6-layer TransformerEncoder, d_model 512,
8 heads, batch 16, AdamW, 20 steps whose sequence lengths cycle through a fixed list.
"""

import json
import os
import sys
import time

import torch
import torch.nn as nn

import models


def mlp_steps():
    model = models.mlp(2048, 8, nn.GELU, "cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(30):
        x = torch.randn(256, 2048, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield


def transformer_steps():
    model = models.encoder(6, "cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    lengths = [64, 128, 96, 256, 32, 192, 160, 224, 80, 112]
    for step in range(20):
        x = torch.randn(16, lengths[step % len(lengths)], 512, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield


def main():
    kind, out = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    t0 = time.time()
    steps = 0
    for _ in {"mlp": mlp_steps, "transformer": transformer_steps}[kind]():
        steps += 1
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    truth = {
        "workload": kind,
        "steps": steps,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "allocator_backend": torch.cuda.get_allocator_backend(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "num_device_alloc": stats.get("num_device_alloc"),
        "num_device_free": stats.get("num_device_free"),
        "memory_stats": {k: v for k, v in stats.items() if isinstance(v, (int, float))},
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(),
        "seconds": round(time.time() - t0, 3),
    }
    with open(out, "w") as f:
        json.dump(truth, f, indent=1, sort_keys=True)
    print(json.dumps({k: truth[k] for k in truth if k != "memory_stats"}))


if __name__ == "__main__":
    main()
