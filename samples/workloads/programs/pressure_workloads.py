#!/usr/bin/env python3
"""Programs that run at their memory limit, for docs/validation.md ("Under pressure").

Usage: python3 pressure_workloads.py WORKLOAD OUT.json

Before its first tensor the process caps PyTorch at PRESSURE_CAP_BYTES (if set) with
torch.cuda.set_per_process_memory_fraction(cap / total_memory), the division rounded up to the
next double where needed so that PyTorch's cap, int(fraction * total_memory), is the cap asked
for and not one byte less. At its end it writes OUT.json:
its own torch.cuda.memory_stats() (the figures the replay is checked against), the fraction, the
device's total, what it did (steps, the step that ran out of memory) and PYTORCH_CUDA_ALLOC_CONF.

Workloads (all seeded, deterministic request streams):
  grow         an MLP trained on a batch that grows by 25% a step until OutOfMemoryError; the
               program catches it, halves the batch and trains three more steps
  empty_cache  a varying-length MLP loop that calls torch.cuda.empty_cache() every third step
  capped       a varying-length transformer under a cap below its uncapped peak: the allocator
               frees its cache and retries, and the run completes
  mlp, varlen, conv, gpt, lstm, attn
               six small training loops for the `fit` validation (about a second of GPU work)
An exit status of 3 means the run ran out of memory (a workload that does not catch it).
"""
import json
import math
import os
import random
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import models

dev = torch.device("cuda")
total = torch.cuda.get_device_properties(0).total_memory
cap = os.environ.get("PRESSURE_CAP_BYTES", "")
fraction = None
if cap:
    fraction = min(1.0, int(cap) / total)
    while fraction < 1.0 and int(fraction * total) < int(cap):
        fraction = math.nextafter(fraction, 1.0)
    torch.cuda.set_per_process_memory_fraction(fraction)
torch.backends.cudnn.benchmark = False
facts = {}


def adam(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-4)


def train_step(model, opt, x):
    loss = model(x).float().square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def mlp_model(width, depth):
    return models.mlp(width, depth, nn.GELU, dev)


def grow():
    torch.manual_seed(0)
    model = mlp_model(4096, 6)
    opt = adam(model)
    batch, step, oom_step = 256, 0, None
    while step < 60:
        try:
            train_step(model, opt, torch.randn(batch, 4096, device=dev))
        except torch.OutOfMemoryError:
            oom_step = step
            break
        step += 1
        batch = int(batch * 1.25)
    facts["oom_step"] = oom_step
    facts["oom_batch"] = batch
    # What the program does after catching it: half the batch, three more steps.
    opt.zero_grad(set_to_none=True)
    batch //= 2
    for _ in range(3):
        train_step(model, opt, torch.randn(batch, 4096, device=dev))
    facts["steps"] = step + 3


def empty_cache():
    torch.manual_seed(0)
    rng = random.Random(2)
    model = mlp_model(2048, 6)
    opt = adam(model)
    for step in range(24):
        train_step(model, opt, torch.randn(rng.randrange(64, 2048), 2048, device=dev))
        if step % 3 == 2:
            torch.cuda.empty_cache()
    facts["steps"] = 24


def transformer(d, layers, steps, tokens, seed):
    torch.manual_seed(0)
    rng = random.Random(seed)
    vocab = 8192
    emb, enc, head = models.encoder_lm(vocab, d, 4 * d, 0.0, layers, dev)
    params = list(emb.parameters()) + list(enc.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    for _ in range(steps):
        seq = rng.randrange(32, 512)
        x = torch.randint(0, vocab, (max(1, tokens // seq), seq), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = head(enc(emb(x)))
            loss = F.cross_entropy(logits.float().view(-1, vocab), x.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    facts["steps"] = steps


def capped():
    transformer(512, 6, 30, 16384, 1)


def mlp():
    torch.manual_seed(0)
    model = mlp_model(2048, 8)
    opt = adam(model)
    for _ in range(12):
        train_step(model, opt, torch.randn(512, 2048, device=dev))


def varlen():
    transformer(256, 4, 16, 8192, 3)


def conv():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(256, 1000),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rng = random.Random(4)
    for _ in range(10):
        side = rng.choice([96, 128, 160])
        x = torch.randn(64, 3, side, side, device=dev)
        loss = F.cross_entropy(model(x), torch.randint(0, 1000, (64,), device=dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def gpt():
    torch.manual_seed(0)
    rng = random.Random(5)
    d, vocab = 384, 4096
    emb = nn.Embedding(vocab, d).to(dev)
    blocks = nn.TransformerDecoderLayer(d, 6, 4 * d, dropout=0.0, batch_first=True).to(dev)
    head = nn.Linear(d, vocab).to(dev)
    params = list(emb.parameters()) + list(blocks.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    for _ in range(12):
        seq = rng.randrange(64, 768)
        x = torch.randint(0, vocab, (max(1, 6144 // seq), seq), device=dev)
        h = emb(x)
        mask = nn.Transformer.generate_square_subsequent_mask(seq, device=dev)
        out = head(blocks(h, h, tgt_mask=mask, tgt_is_causal=True))
        loss = F.cross_entropy(out.view(-1, vocab), x.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def lstm():
    torch.manual_seed(0)
    rng = random.Random(6)
    model = nn.LSTM(512, 1024, num_layers=2, batch_first=True).to(dev)
    opt = adam(model)
    for _ in range(10):
        x = torch.randn(32, rng.randrange(32, 256), 512, device=dev)
        out, _ = model(x)
        loss = out.square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def attn():
    torch.manual_seed(0)
    rng = random.Random(7)
    q_proj = nn.Linear(1024, 3 * 1024).to(dev)
    opt = adam(q_proj)
    for _ in range(14):
        b, t = rng.choice([(8, 1024), (16, 512), (4, 2048)])
        x = torch.randn(b, t, 1024, device=dev, dtype=torch.float32)
        q, k, v = q_proj(x).view(b, t, 3, 16, 64).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        loss = a.square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


WORKLOADS = dict(grow=grow, empty_cache=empty_cache, capped=capped, mlp=mlp, varlen=varlen,
                 conv=conv, gpt=gpt, lstm=lstm, attn=attn)


def main():
    name, out = sys.argv[1], sys.argv[2]
    status = 0
    try:
        WORKLOADS[name]()
        torch.cuda.synchronize()
    except torch.OutOfMemoryError as e:
        facts["uncaught_oom"] = str(e).splitlines()[0]
        status = 3
    stats = torch.cuda.memory_stats()
    json.dump(dict(workload=name, conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                   fraction=fraction, cap_bytes=int(cap) if cap else None, total_memory=total,
                   torch=torch.__version__, facts=facts,
                   max_memory_reserved=torch.cuda.max_memory_reserved(),
                   memory_stats={k: v for k, v in stats.items()}),
              open(out, "w"), indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
