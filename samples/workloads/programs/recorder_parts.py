"""Where a training step's recording time goes: pyframes_train.py's MLP and GPT-2 loops under a
bench build of the recorder (`cargo build --release -p vramtrace-recorder --features bench`,
recorder/src/bench.rs), whose variants each take one part of the hook path out, alternated in
blocks of steps in one process (recorder/BENCHMARKS.md, "Where a tensor's recording time goes").

    LD_PRELOAD=.../libvramtrace_preload.so python recorder_parts.py OUT.json \
        [--models mlp,gpt2] [--rounds N] [--only VARIANT]

A round runs one block of every variant, the order rotated by one from round to round; each
block's median step is compared with the `paused` block of its round (the recorder paused:
PyTorch still calls the tracker, which returns at once), and the variant's figure is the median
of its rounds' differences. `--only VARIANT` runs that variant in every block (for `perf stat`
of whole processes). The allocations a step makes (`allocation.all.allocated` of
torch.cuda.memory_stats) turn the differences into time per allocation.
"""

import argparse
import ctypes
import json
import statistics
import time

import torch

from pyframes_train import build_mlp, gpt2_step, mlp_step

# recorder/src/bench.rs's switches.
CLOCK, TSC, STACK, WALK, INTERN, NODE, PUSH, RECORD = (1 << i for i in range(8))
VARIANTS = {
    "paused": None,
    "full": 0,
    "tsc_clock": TSC,
    "no_clock": CLOCK,
    "no_stack": STACK,
    "no_walk": WALK,
    "no_intern": INTERN,
    "no_node": NODE,
    "no_push": PUSH,
    "decode_only": RECORD,
}


def alternated(step, warmup, rounds, per_block, only):
    lib = ctypes.CDLL(None)
    pause, skip = lib.vramtrace_set_paused, lib.vramtrace_bench_skip
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    names = list(VARIANTS)
    blocks = {n: [] for n in names}  # per round, the block's median step (s)
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            mask = VARIANTS[only or name]
            pause(1 if mask is None else 0)
            skip(mask or 0)
            times = []
            for _ in range(per_block):
                t0 = time.perf_counter()
                step()
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            blocks[name].append(statistics.median(times))
    pause(0)
    skip(0)
    return blocks


def allocations_per_step(step, steps=5):
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (torch.cuda.memory_stats()["allocation.all.allocated"] - before) / steps


def summarize(blocks, allocs):
    paused = blocks["paused"]
    out = {"allocations_per_step": allocs, "paused_ms": statistics.median(paused) * 1e3}
    for name, v in blocks.items():
        diffs = [b - p for b, p in zip(v, paused)]
        out[name] = {
            "median_ms": statistics.median(v) * 1e3,
            "over_paused_pct": 100 * statistics.median(d / p for d, p in zip(diffs, paused)),
            "over_paused_us_per_alloc": statistics.median(diffs) * 1e6 / allocs,
            "rounds": len(v),
        }
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--models", default="mlp,gpt2")
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--only", choices=list(VARIANTS))
    args = parser.parse_args()
    torch.manual_seed(0)
    result = {}
    for name in args.models.split(","):
        if name == "mlp":
            model = build_mlp()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            step = lambda: mlp_step(model, opt)  # noqa: E731
            warmup, rounds, per_block = 20, args.rounds or 12, 10
        else:
            from transformers import GPT2Config, GPT2LMHeadModel

            model = GPT2LMHeadModel(GPT2Config()).cuda()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            ids = torch.randint(0, 50257, (8, 256), device="cuda")
            step = lambda: gpt2_step(model, opt, ids)  # noqa: E731
            warmup, rounds, per_block = 5, args.rounds or 6, 3
        blocks = alternated(step, warmup, rounds, per_block, args.only)
        result[name] = summarize(blocks, allocations_per_step(step))
        del model, opt
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(result, f)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
