"""The bytes each autograd node allocates in a backward pass, as PyTorch's profiler counts them:
the reference the recorder's node names are checked against (docs/validation.md, R3;
samples/workloads/h200/node_h200.sh).

    python backward_nodes.py MODEL OUT.json [--profile] [--steps N]

MODEL: `mlp` or `gpt2`, the training steps of pyframes_train.py (the allocation-heavy MLP; GPT-2
small, bf16 autocast), N steps (default 5). Run once under `vramtrace record` (the trace) and
once with --profile, in another process: the whole run under
`torch.profiler.profile(activities=[CPU], profile_memory=True)`. Each allocation event of its
event tree (`experimental_event_tree()`) on a CUDA device is credited to its nearest enclosing
`autograd::engine::evaluate_function: <node>` (engine.cpp's RECORD_FUNCTION around each node the
engine evaluates), or to "" when none encloses it; OUT.json gets, per node, the allocations'
count and bytes (the profiler's sizes are the caching allocator's block sizes, rounded, not the
requested bytes the tracker reports). Without --profile OUT.json gets the step count only.
"""

import argparse
import json

import torch

import pyframes_train as train

NODE = "autograd::engine::evaluate_function: "


def run(model, steps):
    torch.manual_seed(0)
    if model == "mlp":
        m = train.build_mlp()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        step = lambda: train.mlp_step(m, opt)  # noqa: E731
    else:
        from transformers import GPT2Config, GPT2LMHeadModel

        m = GPT2LMHeadModel(GPT2Config()).cuda()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        ids = torch.randint(0, 50257, (8, 256), device="cuda")
        step = lambda: train.gpt2_step(m, opt, ids)  # noqa: E731
    for _ in range(steps):
        step()
    torch.cuda.synchronize()


def node_of(event):
    e = event.parent
    while e is not None:
        if e.name.startswith(NODE):
            return e.name[len(NODE):]
        e = e.parent
    return ""


def allocations(prof):
    """(node, bytes) of each CUDA allocation of the profile's event tree."""
    from torch._C._profiler import _EventType

    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        stack.extend(e.children)
        if e.tag != _EventType.Allocation:
            continue
        fields = e.extra_fields
        if fields.alloc_size <= 0 or "cuda" not in str(fields.device):
            continue
        yield node_of(e), fields.alloc_size


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=["mlp", "gpt2"])
    parser.add_argument("out")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    result = {"model": args.model, "steps": args.steps}
    if not args.profile:
        run(args.model, args.steps)
    else:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            run(args.model, args.steps)
        nodes = {}
        try:
            for node, size in allocations(prof):
                n = nodes.setdefault(node, {"count": 0, "bytes": 0})
                n["count"] += 1
                n["bytes"] += size
        except Exception as e:  # an API of another torch version: the rows below instead
            result["error"] = repr(e)
            result["key_averages"] = {
                a.key: {"count": a.count, "cuda_memory_usage": a.cuda_memory_usage}
                for a in prof.key_averages()
                if a.key.startswith(NODE)
            }
        result["nodes"] = nodes
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    print(json.dumps({k: v for k, v in result.items() if k != "nodes"}))


if __name__ == "__main__":
    main()
