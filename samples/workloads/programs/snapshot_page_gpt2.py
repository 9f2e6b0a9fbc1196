"""A real PyTorch memory snapshot for the snapshot-to-page benchmark (analyzer/BENCHMARKS.md,
"Snapshot to page"): GPT-2 small (transformers' GPT2LMHeadModel from GPT2Config(), 124 M
parameters, no download) trained under bf16 autocast with AdamW, batch 8 of 256 tokens,
recorded by PyTorch's own history recorder and written by `_dump_snapshot`.

    python3 snapshot_page_gpt2.py OUT.pickle [--entries 215000] [--steps 60]

`max_entries` makes the history a ring of the last ENTRIES trace entries; enough steps run to
fill it (a step makes a few thousand), so the snapshot holds exactly ENTRIES entries, the size
of the snapshot issue 15 measured. Prints the entry count and the file size.
"""
import argparse
import os
import pickle

import torch
from transformers import GPT2Config, GPT2LMHeadModel

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--entries", type=int, default=215_000)
parser.add_argument("--steps", type=int, default=60)
args = parser.parse_args()

torch.cuda.memory._record_memory_history(
    enabled="all", context="all", stacks="python", max_entries=args.entries
)
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config()).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, 50257, (8, 256), device="cuda")
for _ in range(args.steps):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(args.out)
torch.cuda.memory._record_memory_history(enabled=None)
with open(args.out, "rb") as f:
    snap = pickle.load(f)
entries = sum(len(t) for t in snap["device_traces"])
print(f"{args.out}: {entries} trace entries, {os.path.getsize(args.out)} bytes, {args.steps} steps")
