"""Record a PyTorch memory snapshot of a small real training run, for `vramtrace import`.

    python3 interop_snapshot.py --mode fp32|amp|expandable|ring --out DIR

Writes DIR/MODE.pickle (torch.cuda.memory._dump_snapshot) and DIR/MODE.stats.json with the
allocator's own counters (torch.cuda.memory_stats) as ground truth for `vramtrace summary`:
peak allocated/requested/reserved bytes and the number of cudaMalloc segments.

Modes: fp32 trains in float32 and ends with a deliberate out-of-memory request; amp trains
under bf16 autocast (for `vramtrace diff`); expandable sets
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segment_map/segment_unmap actions); ring
keeps only the last 300 history entries (max_entries), so the history starts mid-run.
"""

import argparse
import json
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=["fp32", "amp", "expandable", "ring"], required=True)
parser.add_argument("--out", required=True)
parser.add_argument("--steps", type=int, default=4)
args = parser.parse_args()

# The allocator reads its configuration once, when CUDA is first used.
if args.mode == "expandable":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch  # noqa: E402

max_entries = 300 if args.mode == "ring" else 100_000
torch.cuda.memory._record_memory_history(
    enabled="all", context="all", stacks="python", max_entries=max_entries
)

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 4096),
    torch.nn.GELU(),
    torch.nn.Linear(4096, 4096),
    torch.nn.GELU(),
    torch.nn.Linear(4096, 1024),
).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)


def step(batch):
    x = torch.randn(batch, 1024, device="cuda")
    y = torch.randn(batch, 1024, device="cuda")
    if args.mode == "amp":
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
    else:
        loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


for i in range(args.steps):
    # Varying batch sizes make the allocator split, reuse and grow segments.
    step(256 * (1 + i % 3))
torch.cuda.synchronize()

ooms = 0
if args.mode == "fp32":
    try:
        torch.empty(1 << 45, dtype=torch.uint8, device="cuda")  # 32 TiB: cannot succeed
    except torch.OutOfMemoryError:
        ooms += 1
if args.mode == "expandable":
    torch.cuda.empty_cache()  # unmaps pages: segment_unmap

stats = torch.cuda.memory_stats()
keys = [
    "allocated_bytes.all.peak",
    "requested_bytes.all.peak",
    "reserved_bytes.all.peak",
    "allocated_bytes.all.current",
    "reserved_bytes.all.current",
    "segment.all.allocated",
    "segment.all.freed",
    "allocation.all.allocated",
    "num_ooms",
]
os.makedirs(args.out, exist_ok=True)
torch.cuda.memory._dump_snapshot(os.path.join(args.out, f"{args.mode}.pickle"))
torch.cuda.memory._record_memory_history(enabled=None)
truth = {k: stats.get(k) for k in keys}
truth.update(
    mode=args.mode,
    torch=torch.__version__,
    device=torch.cuda.get_device_name(),
    max_entries=max_entries,
    caught_ooms=ooms,
)
with open(os.path.join(args.out, f"{args.mode}.stats.json"), "w") as f:
    json.dump(truth, f, indent=1)
print(json.dumps(truth), file=sys.stderr)
