"""PyTorch workloads for the recorder's tracker figures (torch_tracker_validate.sh runs them with
and without `vramtrace record`; docs/validation.md and recorder/BENCHMARKS.md have the results).

    python3 torch_tracker_workloads.py WORKLOAD OUT.json

complete-native, complete-graph, complete-compile: an MLP training loop (eager, a CUDA-graph
    capture and replay, torch.compile(mode="reduce-overhead")); run them under the allocator
    configuration to test (PYTORCH_CUDA_ALLOC_CONF).
varlen: a 6-layer TransformerEncoder (d_model 512) trained on sequence lengths cycling 32..256.
multistream: a side stream makes tensors the main stream uses (record_stream), empty_cache()
    every fifth step.
generate: GPT-2 small (built from its transformers config, random weights) generating 48
    tokens greedily for prompts of 5 lengths: a KV cache that grows token by token.
overhead: median step times of the MLP (16 x Linear(1024, 1024), AdamW, batch 64) and of a
    GPT-2 small training loop (batch 8, 256 tokens).

OUT.json gets torch.cuda.memory_stats() and the peaks as the workload ends. Right after taking
them, the script allocates one marker tensor of MARKER bytes: a trace's events before the
marker's allocation are exactly those the statistics count.
"""

import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

import models

MARKER = 1234567


def mlp_model():
    return models.mlp(1024, 16, nn.ReLU, "cuda")


def train_step(model, opt, batch=64):
    x = torch.randn(batch, 1024, device="cuda")
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def complete_native():
    model = mlp_model()
    opt = torch.optim.AdamW(model.parameters())
    for step in range(20):
        train_step(model, opt, 64 + 16 * (step % 4))
    big = torch.empty(300 << 20, dtype=torch.uint8, device="cuda")
    del big
    torch.cuda.empty_cache()


def complete_graph():
    model = mlp_model()
    static_x = torch.randn(64, 1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad():
        with torch.cuda.stream(side):
            for _ in range(3):
                model(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = model(static_x)
        for _ in range(10):
            static_x.copy_(torch.randn(64, 1024, device="cuda"))
            graph.replay()
    torch.cuda.synchronize()
    return float(static_y.sum())


def complete_compile():
    model = mlp_model()
    opt = torch.optim.AdamW(model.parameters())
    compiled = torch.compile(model, mode="reduce-overhead")
    for _ in range(8):
        torch.compiler.cudagraph_mark_step_begin()
        x = torch.randn(64, 1024, device="cuda")
        loss = compiled(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


def varlen():
    layer = nn.TransformerEncoderLayer(
        d_model=512, nhead=8, dim_feedforward=2048, batch_first=True, dropout=0.0
    )
    model = nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    lengths = [64, 128, 96, 256, 32, 192, 160, 224, 80, 112]
    for step in range(30):
        x = torch.randn(16, lengths[step % len(lengths)], 512, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


def multistream():
    model = mlp_model()
    opt = torch.optim.AdamW(model.parameters())
    side = torch.cuda.Stream()
    for step in range(30):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            x = torch.randn(64 + 32 * (step % 3), 1024, device="cuda")
            extra = torch.randn(8 << 20, device="cuda")
        torch.cuda.current_stream().wait_stream(side)
        x.record_stream(torch.cuda.current_stream())
        extra.record_stream(torch.cuda.current_stream())
        loss = model(x).pow(2).mean() + extra.mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, extra
        if step % 5 == 4:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    torch.cuda.synchronize()


def gpt2(n_positions=1024):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_positions=n_positions)).cuda()


def generate():
    model = gpt2().eval()
    with torch.no_grad():
        for n in (16, 64, 32, 128, 48):
            ids = torch.randint(0, 50257, (4, n), device="cuda")
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=48,
                           min_new_tokens=48, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()


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


def overhead():
    result = {}
    model = mlp_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    result["mlp_ms"] = statistics.median(timed(lambda: train_step(model, opt), 30, 200)) * 1e3
    del model, opt
    model = gpt2(256).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        ids = torch.randint(0, 50257, (8, 256), device="cuda")
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    result["gpt2_ms"] = statistics.median(timed(step, 4, 16)) * 1e3
    return result


WORKLOADS = {
    "complete-native": complete_native,
    "complete-graph": complete_graph,
    "complete-compile": complete_compile,
    "varlen": varlen,
    "multistream": multistream,
    "generate": generate,
    "overhead": overhead,
}


def main():
    name, out = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    t0 = time.time()
    extra = WORKLOADS[name]()
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    result = {
        "workload": name,
        "seconds": round(time.time() - t0, 2),
        "torch": torch.__version__,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "memory_reserved": torch.cuda.memory_reserved(),
        "stats": stats,
    }
    if isinstance(extra, dict):
        result.update(extra)
    marker = torch.empty(MARKER, dtype=torch.uint8, device="cuda")
    del marker
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
