#!/usr/bin/env python3
"""Ground truth for `vramtrace tune`: the workloads of replay_validate.py plus two of tune's own,
recorded the same way (PyTorch's memory history of its own requests, and the caching
allocator's real figures of the same process).

  python3 tune_validate.py WORKLOAD OUTDIR NAME     one run, as replay_validate.py does
  python3 tune_validate.py context OUTDIR           the CUDA context's share of the device

Workloads added here:
  multires_cnn  ResNet-18 (random weights), SGD, images of a different resolution every step
                (96 to 320 px, batch scaled to keep pixels per batch about even): activation
                sizes change every step.
  generate      a GPT-style decoder generating 192 tokens for 8 prompts without a KV cache
                (the whole sequence again each step, no_grad, bf16): every step's tensors are
                one token longer than the last.
Besides replay_validate.py's NAME.stats.json, each run writes NAME.device.json: the device's
used memory (torch.cuda.mem_get_info) and PyTorch's reserved memory at the end, whose
difference is the CUDA context plus the libraries' own allocations outside PyTorch.
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay_validate as rv  # noqa: E402  (starts the memory history before any allocation)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

dev = rv.dev


def multires_cnn(steps=30):
    import torchvision

    torch.manual_seed(0)
    rng = random.Random(3)
    model = torchvision.models.resnet18(weights=None).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(steps):
        res = rng.choice([96, 128, 160, 192, 224, 256, 320])
        batch = max(8, int(96 * (224 / res) ** 2))
        x = torch.randn(batch, 3, res, res, device=dev)
        y = torch.randint(0, 1000, (batch,), device=dev)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def generate(new_tokens=192):
    torch.manual_seed(0)
    d, vocab, n = 1024, 32000, 12
    emb = nn.Embedding(vocab, d).to(dev)
    blocks = nn.ModuleList(rv.Block(d, 16) for _ in range(n)).to(dev)
    head = nn.Linear(d, vocab).to(dev)
    tokens = torch.randint(0, vocab, (8, 64), device=dev)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(new_tokens):
            x = emb(tokens)
            for blk in blocks:
                x = blk(x)
            nxt = head(x[:, -1]).float().softmax(-1).argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)


def context(out):
    torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    result = {
        "total": total,
        "used": total - free,
        "reserved": torch.cuda.memory_reserved(),
        "context": total - free - torch.cuda.memory_reserved(),
    }
    with open(os.path.join(out, "context.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("context:", result, flush=True)


def main():
    if sys.argv[1] == "context":
        os.makedirs(sys.argv[2], exist_ok=True)
        return context(sys.argv[2])
    rv.WORKLOADS.update({f.__name__: f for f in (multires_cnn, generate)})
    rv.main()
    free, total = torch.cuda.mem_get_info()
    with open(os.path.join(sys.argv[2], sys.argv[3] + ".device.json"), "w") as f:
        json.dump(
            {
                "used_end": total - free,
                "reserved_end": torch.cuda.memory_reserved(),
                "total": total,
            },
            f,
        )


if __name__ == "__main__":
    main()
