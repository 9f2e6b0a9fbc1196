"""Where a training step's recording time goes: pyframes_train.py's MLP and GPT-2 loops under a
bench build of the recorder (`cargo build --release -p vramtrace-recorder --features bench`,
recorder/src/bench.rs), whose variants each take one part of the hook path out, alternated in
blocks of steps in one process (recorder/BENCHMARKS.md, "Where a tensor's recording time goes").

    LD_PRELOAD=.../libvramtrace_preload.so python recorder_parts.py OUT.json \
        [--models mlp,gpt2] [--rounds N] [--only VARIANT] [--variants paused,full,...]

A round runs one block of every variant, the order rotated by one from round to round; each
block's median step is compared with the `paused` block of its round (the recorder paused:
PyTorch still calls the tracker, which returns at once), and the variant's figure is the median
of its rounds' differences. `--only VARIANT` runs that variant in every block (for `perf stat`
of whole processes). The allocations a step makes (`allocation.all.allocated` of
torch.cuda.memory_stats) turn the differences into time per allocation.

`--variants` picks the variants run (all by default; `paused` always runs). The `stamped`
variant records in full and times the tracker path's parts (recorder/src/stamps.rs), the
`whole` variant only the whole callback (two stamps an entry): each block's per-part sums
(`vramtrace_bench_parts`, every thread, read between two steps) are turned into ns per allocation with the
time-stamp counter's frequency measured against CLOCK_MONOTONIC over the run, and what the
block's steps cost beyond the paused block's and beyond those parts is `indirect`: time the
program pays outside the callback (recorder/BENCHMARKS.md "Where the time goes, by the
counters").

`--pin MODE` places the program's main thread and the recorder's writer thread
(`vramtrace-writer`, recorder/src/writer.rs) before the timed rounds: `none` leaves them to the
scheduler, `same` puts both on the main thread's CPU, `sibling` the writer on that CPU's other
hyperthread (where the machine shows one), `apart` the writer on another core. What moves
between the modes is the part of the indirect cost that the writer's work causes
(recorder/BENCHMARKS.md "Where the indirect cost goes").
"""

import argparse
import ctypes
import json
import os
import statistics
import threading
import time

import torch

from pyframes_train import build_mlp, gpt2_step, mlp_step

# recorder/src/bench.rs's switches.
CLOCK, TSC, STACK, WALK, INTERN, NODE, PUSH, RECORD, STAMPS, WHOLE = (1 << i for i in range(10))
# recorder/src/stamps.rs's parts, in its order.
PARTS = ["decode", "held", "clock", "ids", "stack", "walk", "node", "intern", "record", "push",
         "exit", "whole", "empty"]
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
    "stamped": STAMPS,
    "whole": STAMPS | WHOLE,
}
WORDS = 2 + 2 * len(PARTS)


def sums(lib):
    """vramtrace_bench_parts: [counter, CLOCK_MONOTONIC ns, ticks per part, runs per part]."""
    out = (ctypes.c_uint64 * WORDS)()
    if lib.vramtrace_bench_parts(out, WORDS) != WORDS:
        raise SystemExit("recorder_parts.py: this recorder's parts differ from PARTS")
    return list(out)


def cpu_list(text):
    """A /sys CPU list ("0-3,8") as a sorted list."""
    cpus = []
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def writer_tid():
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            # The kernel keeps 15 bytes of a thread's name.
            if f.read().strip() == "vramtrace-writer"[:15]:
                return int(tid)
    raise SystemExit("recorder_parts.py --pin: no vramtrace-writer thread (is the recorder loaded?)")


# The CPUs the process may use, before any thread is pinned (a pinned thread's own set is
# its one CPU).
ALLOWED = sorted(os.sched_getaffinity(0))


def pin(mode):
    """Pins the main thread and the writer for `mode`; returns (main's CPU, writer's CPU or
    None). Called once per model: the same CPUs each time."""
    if mode == "none":
        return None, None
    here = ALLOWED[0]
    with open(f"/sys/devices/system/cpu/cpu{here}/topology/thread_siblings_list") as f:
        siblings = cpu_list(f.read())
    if mode == "same":
        there = here
    elif mode == "sibling":
        others = [c for c in siblings if c != here and c in ALLOWED]
        if not others:
            raise SystemExit(f"recorder_parts.py --pin sibling: CPU {here} shows no sibling")
        there = others[0]
    else:
        others = [c for c in ALLOWED if c not in siblings]
        if not others:
            raise SystemExit("recorder_parts.py --pin apart: one core only")
        there = others[0]
    os.sched_setaffinity(threading.get_native_id(), {here})
    os.sched_setaffinity(writer_tid(), {there})
    return here, there


def allocated():
    return torch.cuda.memory_stats()["allocation.all.allocated"]


def alternated(step, warmup, rounds, per_block, only, names, pin_mode):
    """Per variant, per round: the block's median and mean step (s), and for a stamped
    variant its allocations, its median step's ticks per part and in all, and its runs per
    part (the sums are read between two steps, outside the timed part); the threads pinned
    for `pin_mode` after the warm-up (the recorder's writer starts with the first allocation)."""
    lib = ctypes.CDLL(None)
    lib.vramtrace_bench_parts.restype = ctypes.c_size_t
    pause, skip = lib.vramtrace_set_paused, lib.vramtrace_bench_skip
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    main_cpu, writer_cpu = pin(pin_mode)
    blocks = {n: [] for n in names}
    start = sums(lib)
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            mask = VARIANTS[only or name]
            pause(1 if mask is None else 0)
            skip(mask or 0)
            stamped = (mask or 0) & STAMPS
            a0, p0 = allocated(), sums(lib)
            times, ticks, at = [], [], p0
            for _ in range(per_block):
                t0 = time.perf_counter()
                step()
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
                if stamped:
                    now = sums(lib)
                    ticks.append([b - a for a, b in zip(at[2:2 + len(PARTS)], now[2:])])
                    at = now
            skip(0)
            a1, p1 = allocated(), sums(lib)
            block = {"median": statistics.median(times), "mean": statistics.fmean(times)}
            if stamped:
                block["allocations"] = a1 - a0
                # Per part, the median step's ticks; and the median step's sum of the parts.
                block["ticks"] = [statistics.median(t[i] for t in ticks) for i in range(len(PARTS))]
                block["total_ticks"] = statistics.median(sum(t[:-1]) for t in ticks)
                block["runs"] = [b - a for a, b in zip(p0[2 + len(PARTS):], p1[2 + len(PARTS):])]
            blocks[name].append(block)
    pause(0)
    skip(0)
    end = sums(lib)
    ns_per_tick = (end[1] - start[1]) / (end[0] - start[0])
    # One empty stamp, hot: the median of 200 batches of 1,000 (robust to a preemption).
    e = PARTS.index("empty")
    empty = []
    for _ in range(200):
        before = sums(lib)
        lib.vramtrace_bench_stamp_cost(1000)
        after = sums(lib)
        runs = after[2 + len(PARTS) + e] - before[2 + len(PARTS) + e]
        empty.append((after[2 + e] - before[2 + e]) * ns_per_tick / max(1, runs))
    cpus = {"mode": pin_mode, "main_cpu": main_cpu, "writer_cpu": writer_cpu}
    return blocks, ns_per_tick, statistics.median(empty), cpus


def allocations_per_step(step, steps=5):
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (torch.cuda.memory_stats()["allocation.all.allocated"] - before) / steps


def summarize(blocks, allocs, ns_per_tick, empty_ns):
    paused = [b["median"] for b in blocks["paused"]]
    paused_mean = [b["mean"] for b in blocks["paused"]]
    out = {"allocations_per_step": allocs, "paused_ms": statistics.median(paused) * 1e3,
           "tsc_ghz": 1 / ns_per_tick, "empty_stamp_ns": empty_ns}
    for name, bs in blocks.items():
        v = [b["median"] for b in bs]
        diffs = [b - p for b, p in zip(v, paused)]
        mean_diffs = [b["mean"] - p for b, p in zip(bs, paused_mean)]
        row = {
            "median_ms": statistics.median(v) * 1e3,
            "over_paused_pct": 100 * statistics.median(d / p for d, p in zip(diffs, paused)),
            "over_paused_us_per_alloc": statistics.median(diffs) * 1e6 / allocs,
            "mean_over_paused_ns_per_alloc": statistics.median(mean_diffs) * 1e9 / allocs,
            "rounds": len(v),
        }
        if "ticks" in bs[0]:
            # ns per allocation of each part, per round (the block's median step).
            per = [[t * ns_per_tick / allocs for t in b["ticks"]] for b in bs]
            total = [b["total_ticks"] * ns_per_tick / allocs for b in bs]
            row["parts_ns_per_alloc"] = {
                n: statistics.median(p[i] for p in per) for i, n in enumerate(PARTS[:-1])}
            row["runs_per_alloc"] = {
                n: statistics.median(b["runs"][i] / max(1, b["allocations"]) for b in bs)
                for i, n in enumerate(PARTS[:-1])}
            row["parts_sum_ns_per_alloc"] = statistics.median(total)
            # What the block's median step costs beyond the paused block's and beyond the parts.
            row["indirect_ns_per_alloc"] = statistics.median(
                d * 1e9 / allocs - t for d, t in zip(diffs, total))
            row["per_round"] = [{"parts_ns_per_alloc": p, "over_paused_ns_per_alloc":
                                 d * 1e9 / allocs} for p, d in zip(per, diffs)]
        out[name] = row
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--models", default="mlp,gpt2")
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--only", choices=list(VARIANTS))
    parser.add_argument("--variants", default=",".join(v for v in VARIANTS if v != "paused"))
    parser.add_argument("--pin", choices=["none", "same", "sibling", "apart"], default="none")
    args = parser.parse_args()
    names = ["paused"] + [v for v in args.variants.split(",") if v != "paused"]
    unknown = set(names) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"recorder_parts.py: unknown variants {sorted(unknown)}")
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
        blocks, ns_per_tick, empty_ns, result["pin"] = alternated(
            step, warmup, rounds, per_block, args.only, names, args.pin)
        result[name] = summarize(blocks, allocations_per_step(step), ns_per_tick, empty_ns)
        del model, opt
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(result, f)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
