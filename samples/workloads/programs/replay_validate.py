#!/usr/bin/env python3
"""Ground truth for `vramtrace replay`: deterministic PyTorch training workloads that record their
own request stream and the caching allocator's real figures.

One process runs one workload under whatever PYTORCH_CUDA_ALLOC_CONF it was started with. It
turns on PyTorch's memory history before the first CUDA allocation, trains, then writes

  OUT/NAME.requests.csv.gz  every trace entry of the caching allocator, one per line:
                            action,addr,size,stream,time_us
                            (alloc / free_requested carry the program's raw request size;
                            segment_* entries are what the allocator did with the driver)
  OUT/NAME.stats.json       torch.cuda.memory_stats(), max_memory_reserved/allocated,
                            the configuration, versions and the device

`vramtrace` converts the request stream with `cargo run --example import_torch_trace` and replays
it; docs/validation.md compares its prediction with the stats of the same process.

Usage: python3 replay_validate.py WORKLOAD OUTDIR NAME
Workloads: mlp, transformer_varlen, resnet, gpt_ckpt_varlen.
With REPLAY_MEMORY_FRACTION=F in the environment the process first calls
torch.cuda.set_per_process_memory_fraction(F), which makes the allocator free its cache and retry
(or collect garbage, with garbage_collection_threshold) when the cap is reached; an
out-of-memory error is caught and recorded, and the trace is kept up to it.
"""
import json
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import torch_truth  # noqa: E402

torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
FRACTION = os.environ.get("REPLAY_MEMORY_FRACTION", "")
if FRACTION:
    torch.cuda.set_per_process_memory_fraction(float(FRACTION))
torch.backends.cudnn.benchmark = False
torch.backends.cuda.matmul.allow_tf32 = True
dev = torch.device("cuda")


def mlp(steps=30):
    # The MLP of `docs/h200-measurements.md`: 8 x Linear(2048, 2048) + GELU, AdamW, batch 256.
    torch.manual_seed(0)
    model = models.mlp(2048, 8, nn.GELU, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        x = torch.randn(256, 2048, device=dev)
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def transformer_varlen(steps=40):
    # An encoder-only transformer fed batches of varying sequence length (seeded), bf16 autocast:
    # tensor sizes change every step, the case that fragments a caching allocator.
    torch.manual_seed(0)
    rng = random.Random(1)
    d, vocab = 512, 8192
    emb, enc, head = models.encoder_lm(vocab, d, 2048, 0.1, 6, dev)
    params = list(emb.parameters()) + list(enc.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    for _ in range(steps):
        seq = rng.randrange(32, 1024)
        batch = max(1, 16384 // seq)
        tokens = torch.randint(0, vocab, (batch, seq), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = head(enc(emb(tokens)))
            loss = F.cross_entropy(logits.float().view(-1, vocab), tokens.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def resnet(steps=20):
    # torchvision ResNet-50 (random weights), SGD with momentum, batch 64 at 224 x 224.
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        x = torch.randn(64, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (64,), device=dev)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.h = h

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.h, d // self.h).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def gpt_ckpt_varlen(steps=30):
    # A GPT-style decoder with activation checkpointing, fp32, batches of varying length.
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    rng = random.Random(2)
    d, vocab, n = 768, 16384, 8
    emb = nn.Embedding(vocab, d).to(dev)
    blocks = nn.ModuleList(Block(d, 12) for _ in range(n)).to(dev)
    head = nn.Linear(d, vocab).to(dev)
    params = list(emb.parameters()) + list(blocks.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    for _ in range(steps):
        seq = rng.choice([128, 256, 384, 512, 768, 1024, 1536, 2048])
        batch = max(1, 8192 // seq)
        tokens = torch.randint(0, vocab, (batch, seq), device=dev)
        x = emb(tokens)
        for blk in blocks:
            x = checkpoint(blk, x, use_reentrant=False)
        loss = F.cross_entropy(head(x).view(-1, vocab), tokens.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


WORKLOADS = {f.__name__: f for f in (mlp, transformer_varlen, resnet, gpt_ckpt_varlen)}


def main():
    workload, out, name = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(out, exist_ok=True)
    start = time.time()
    oom = None
    try:
        WORKLOADS[workload]()
    except torch.OutOfMemoryError as e:
        oom = str(e).splitlines()[0]
    torch.cuda.synchronize()
    seconds = time.time() - start
    entries = torch_truth.write_history(os.path.join(out, name + ".requests.csv.gz"))
    stats = {
        "workload": workload,
        "name": name,
        "memory_fraction": FRACTION,
        "oom": oom,
        "seconds": seconds,
        "trace_entries": entries,
        **torch_truth.figures(),
    }
    with open(os.path.join(out, name + ".stats.json"), "w") as f:
        json.dump(stats, f, indent=1, sort_keys=True)
    s = stats["memory_stats"]
    print(
        f"{name}: {seconds:.1f}s entries={entries} reserved_peak={stats['max_memory_reserved']}"
        f" allocated_peak={stats['max_memory_allocated']}"
        f" device_alloc={s.get('num_device_alloc')}"
        f" retries={s.get('num_alloc_retries')} ooms={s.get('num_ooms')}"
        f" device_free={s.get('num_device_free')} oom={oom}",
        flush=True,
    )


if __name__ == "__main__":
    main()
