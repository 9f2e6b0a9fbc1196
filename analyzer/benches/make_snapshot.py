#!/usr/bin/env python3
"""Write a large PyTorch memory snapshot pickle shaped like a real one, for the benchmarks.

    python3 make_snapshot.py OUT.pickle [--entries 630000] [--seed 1]

The shape follows the snapshots `torch.cuda.memory._dump_snapshot` writes (see
samples/snapshots/, recorded on the H200 by samples/workloads/programs/interop_snapshot.py): a dict with
`segments` (each with its `blocks`), `device_traces` (one list per device of trace entries:
`action`, `addr`, `size`, `stream`, `time_us`, `compile_context`, `user_metadata`, `frames`),
`allocator_settings` and `external_annotations`, pickled with protocol 4 as `pickle.dump` does.
As in the real files, frame dicts are shared between entries (the allocator keeps one Python
object per captured traceback frame, so the pickle memoizes them) and each entry has its own
list of them.

The program modelled is a generate loop: weights allocated once, then per token a key/value
cache block that grows, activations allocated and freed per layer, now and then a segment
allocation when the cache needs more room. About 630,000 entries make a file of about 90 MB,
the size of the snapshot the issue measured.
"""
import argparse
import pickle
import random

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--entries", type=int, default=630_000)
parser.add_argument("--seed", type=int, default=1)
args = parser.parse_args()
rng = random.Random(args.seed)

SITE = "/opt/venv/lib/python3.12/site-packages/"
files = [SITE + "torch/nn/modules/" + m for m in ("module.py", "linear.py", "activation.py", "normalization.py", "sparse.py")]
files += [SITE + "transformers/models/gpt2/modeling_gpt2.py", SITE + "transformers/generation/utils.py", "/work/generate.py"]
names = ["forward", "_call_impl", "_wrapped_call_impl", "generate", "_sample", "attn", "mlp", "__call__", "<module>", "main", "prepare_inputs", "_update_cache"]
# Frame dicts shared between entries, as in real snapshots.
frames = [{"name": rng.choice(names), "filename": rng.choice(files), "line": rng.randrange(1, 2400)} for _ in range(2500)]
outer = [{"name": "<module>", "filename": "/work/generate.py", "line": 88}, {"name": "main", "filename": "/work/generate.py", "line": 71}]
stacks = [outer + rng.sample(frames, rng.randrange(6, 22)) for _ in range(900)]

MB = 1 << 20
entries = []
t = 1_795_980_000_000_000
live = {}
next_addr = 0x7F00_0000_0000


def entry(action, addr, size, stack):
    return {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": 0,
        "time_us": t,
        "compile_context": "N/A",
        "user_metadata": "",
        "frames": list(stacks[stack]),
    }


def alloc(size, stack):
    global next_addr
    addr = next_addr
    next_addr += (size + 511) // 512 * 512
    live[addr] = (size, stack)
    entries.append(entry("alloc", addr, size, stack))
    return addr


def free(addr):
    size, stack = live.pop(addr)
    entries.append(entry("free_requested", addr, size, stack))
    entries.append(entry("free_completed", addr, size, stack))


for layer in range(48):
    entries.append(entry("segment_alloc", next_addr, 80 * MB, 0))
    alloc(rng.choice((9, 18, 36)) * MB, rng.randrange(900))
cache = []
while len(entries) < args.entries:
    t += rng.randrange(200, 4000)
    for layer in range(12):
        acts = [alloc(rng.choice((64, 128, 256)) * 1024 * rng.randrange(1, 9), rng.randrange(900)) for _ in range(rng.randrange(2, 6))]
        if rng.random() < 0.3:
            cache.append(alloc(2 * MB, rng.randrange(900)))
        if rng.random() < 0.02:
            entries.append(entry("segment_alloc", next_addr, 20 * MB, 0))
        for a in acts:
            t += rng.randrange(5, 80)
            free(a)
    if len(cache) > 4000:
        for a in cache[:2000]:
            free(a)
        del cache[:2000]
del entries[args.entries:]

segments = [
    {
        "device": 0,
        "address": 0x7F00_0000_0000,
        "total_size": 2 << 30,
        "allocated_size": 1 << 30,
        "active_size": 1 << 30,
        "requested_size": 1 << 30,
        "stream": 0,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": [],
        "blocks": [
            {"address": 0x7F00_0000_0000, "size": 1 << 30, "requested_size": 1 << 30, "state": "active_allocated", "frames": list(stacks[0])},
            {"address": 0x7F00_4000_0000, "size": 1 << 30, "requested_size": 0, "state": "inactive", "frames": []},
        ],
    }
]
snapshot = {
    "segments": segments,
    "device_traces": [entries],
    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0},
    "external_annotations": [],
}
with open(args.out, "wb") as f:
    pickle.dump(snapshot, f, protocol=4)
print(f"{args.out}: {len(entries)} entries")
