#!/usr/bin/env python3
"""The workloads of the stream-ordered pool validation (issue 24; docs/validation.md, "The
stream-ordered pool from its synchronizations"), each run under whatever PYTORCH_CUDA_ALLOC_CONF
selects: recorded under the native allocator (the trace a user has) and under
backend:cudaMallocAsync (whose own max_memory_reserved() is the figure to predict).

    python3 pool_workloads.py WORKLOAD OUT.json

Workloads: the six of ../validation_workloads.py named below (its memory history is turned off:
the recorder's trace is the request stream here) and gpt2_varlen, GPT-2 small (random weights)
trained at a sequence length that changes every step. OUT.json: the back-end, the peaks of
reserved and allocated bytes, memory_stats(), and the seconds the workload took.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch  # noqa: E402

import validation_workloads as vw  # noqa: E402

if vw.HISTORY:
    torch.cuda.memory._record_memory_history(enabled=None)


def gpt2_varlen():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_positions=512)).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(12):
        n = [128, 320, 192, 512, 256, 96][step % 6]
        ids = torch.randint(0, 50257, (8, n), device="cuda")
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


WORKLOADS = {
    "gpt2_varlen": gpt2_varlen,
    "generate_kv": vw.generate_kv,
    "amp_vit": vw.amp_vit,
    "multires_cnn": vw.multires_cnn,
    "side_stream": vw.side_stream,
    "transformer": vw.transformer,
    "varbatch_infer": vw.varbatch_infer,
}


def main():
    name, out = sys.argv[1], sys.argv[2]
    start = time.time()
    WORKLOADS[name]()
    torch.cuda.synchronize()
    r = {
        "workload": name,
        "backend": torch.cuda.get_allocator_backend(),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "seconds": time.time() - start,
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "memory_stats": dict(torch.cuda.memory_stats()),
    }
    with open(out, "w") as f:
        json.dump(r, f, indent=1, sort_keys=True)
    print(f"{name} {r['backend']} {r['seconds']:.1f}s reserved={r['max_memory_reserved']}", flush=True)


if __name__ == "__main__":
    main()
