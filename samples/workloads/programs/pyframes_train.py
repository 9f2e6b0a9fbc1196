"""Median step times of a PyTorch MLP and of HF GPT-2 small training, for the Python-stacks
overhead figures (samples/workloads/h200/pyframes_h200.sh runs it under each recorder setting).

    python pyframes_train.py OUT.json [--history SNAPSHOT.pickle] [--models mlp,gpt2] [--alternate]

mlp: 16 x (Linear(1024, 1024) + ReLU), AdamW, batch 64.
gpt2: GPT2LMHeadModel built from GPT2Config() (124 M parameters, no download), batch 8 of 256
tokens, bf16 autocast, AdamW.
--history: PyTorch's own recorder, _record_memory_history(context="all", stacks="python"),
on for the whole run; its snapshot is dumped at the end (not for "-").
--models: which of the two loops to run (both by default).
--alternate: under `vramtrace record` only: blocks of steps alternately recorded and with the
recorder paused (`vramtrace_set_paused`, recorder/src/pause.rs), in the same process, so that the
process-to-process spread of the machine cancels out; the medians of both kinds of block.

Each step ends with torch.cuda.synchronize(); warm-up steps are left out of the medians.
"""

import argparse
import ctypes
import json
import statistics
import time

import torch
import torch.nn as nn

import models
from stacks_overhead import timed


def build_mlp():
    return models.mlp(1024, 16, nn.ReLU, "cuda")


def mlp_step(model, opt):
    x = torch.randn(64, 1024, device="cuda")
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def alternated(step, warmup, blocks, per_block):
    """Step times of blocks alternately recorded and paused: {"recorded": [...], "paused": [...]}."""
    switch = ctypes.CDLL(None).vramtrace_set_paused
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = {"recorded": [], "paused": []}
    for b in range(blocks):
        state = "paused" if b % 2 else "recorded"
        switch(1 if state == "paused" else 0)
        for _ in range(per_block):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times[state].append(time.perf_counter() - t0)
    switch(0)
    return times


def mlp(alternate=False):
    model = build_mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if alternate:
        return alternated(lambda: mlp_step(model, opt), 20, 24, 20)
    return timed(lambda: mlp_step(model, opt), 20, 200)


def gpt2_step(model, opt, ids):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def gpt2(alternate=False):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 50257, (8, 256), device="cuda")
    if alternate:
        return alternated(lambda: gpt2_step(model, opt, ids), 5, 16, 5)
    return timed(lambda: gpt2_step(model, opt, ids), 5, 30)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--history")
    parser.add_argument("--models", default="mlp,gpt2")
    parser.add_argument("--alternate", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.history:
        torch.cuda.memory._record_memory_history(context="all", stacks="python")
    result = {"allocator_backend": torch.cuda.get_allocator_backend()}
    loops = {"mlp": mlp, "gpt2": gpt2}
    for name in args.models.split(","):
        times = loops[name](args.alternate)
        if args.alternate:
            result[name] = {
                state: {"median_ms": statistics.median(v) * 1e3, "steps": len(v)}
                for state, v in times.items()
            }
        else:
            result[name] = {"median_ms": statistics.median(times) * 1e3, "steps": len(times)}
    result["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    if args.history and args.history != "-":
        torch.cuda.memory._dump_snapshot(args.history)
    if args.history:
        torch.cuda.memory._record_memory_history(enabled=None)
    with open(args.out, "w") as f:
        json.dump(result, f)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
