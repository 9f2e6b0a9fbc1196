"""Median step times of two allocation-heavy PyTorch training loops, for the recorder's overhead
figures (samples/workloads/h200/stacks_overhead.sh runs it with and without the recorder).

    python stacks_overhead.py OUT.json

mlp: 16 x (Linear(1024, 1024) + ReLU), AdamW, batch 64: about 3.5 ms a step on an H200, and
dozens of tensor allocations a step (`docs/h200-measurements.md`).
transformer: 6-layer TransformerEncoder, d_model 512, 8 heads, batch 16, AdamW, sequence lengths
cycling through a fixed list.

Each step ends with torch.cuda.synchronize(), so a step's wall time includes its GPU work; the
first steps (allocator pool growth, kernel selection) are left out of the medians.
"""

import json
import statistics
import sys
import time

import torch
import torch.nn as nn

import models


def timed(step, warmup, steps):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return times


def mlp():
    model = models.mlp(1024, 16, nn.ReLU, "cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        x = torch.randn(64, 1024, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return timed(step, 30, 300)


def transformer():
    model = models.encoder(6, "cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    lengths = [64, 128, 96, 256, 32, 192, 160, 224, 80, 112]
    state = {"i": 0}

    def step():
        n = lengths[state["i"] % len(lengths)]
        state["i"] += 1
        x = torch.randn(16, n, 512, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return timed(step, 10, 60)


def main():
    torch.manual_seed(0)
    result = {"allocator_backend": torch.cuda.get_allocator_backend()}
    for name, run in [("mlp", mlp), ("transformer", transformer)]:
        times = run()
        result[name] = {
            "median_ms": statistics.median(times) * 1e3,
            "steps": len(times),
        }
    with open(sys.argv[1], "w") as f:
        json.dump(result, f)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
