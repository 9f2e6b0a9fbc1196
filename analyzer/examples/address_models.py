#!/usr/bin/env python3
"""Fits simple models of the CUDA driver's address choice to real segment address sequences
(docs/allocators.md, "Driver addresses").

Input: CSV files of `alloc,ADDRESS,BYTES` / `free,ADDRESS,BYTES` lines in call order
(`cargo run --release -p vramtrace --example segment_addresses -- TRACE`), or of
`ADDRESS,BYTES` lines (allocations only, e.g. samples/traces/h200-validation/
transformer.native.segments.csv).

For each model and sequence it prints how many pairs of equal-size segments the model places
in the real relative order (what decides PyTorch's ties, which go to the lower address) and
whether it reproduces the relative order of every segment ("exact").

    python3 analyzer/examples/address_models.py SEGMENTS.csv...
"""
import sys

MIB = 1 << 20
PAGE = 2 * MIB


def read(path):
    events = []
    for line in open(path):
        f = line.strip().split(",")
        if len(f) == 2:
            events.append(("alloc", int(f[0]), int(f[1])))
        elif len(f) == 3:
            events.append((f[0], int(f[1]), int(f[2])))
    return events


def rising(events):
    nxt, out = 0, []
    for op, _, size in events:
        if op == "alloc":
            out.append(nxt)
            nxt += -(-size // PAGE) * PAGE
    return out


def falling(events):
    nxt, out = 0, []
    for op, _, size in events:
        if op == "alloc":
            nxt -= -(-size // PAGE) * PAGE
            out.append(nxt)
    return out


def chunked(events, grain=32 * MIB):
    """VA reserved in chunks of `grain` (allocation rounded up), each new chunk below the
    lowest one; inside the chunks, first fit from the lowest free address; frees return their
    range."""
    low, free, live, out = 0, [], {}, []
    for op, address, size in events:
        if op == "alloc":
            size = -(-size // PAGE) * PAGE
            free.sort()
            at = next((i for i, (a, n) in enumerate(free) if n >= size), None)
            if at is None:
                span = -(-size // grain) * grain
                low -= span
                x = low
                if span > size:
                    free.append((x + size, span - size))
            else:
                x, n = free[at]
                free[at] = (x + size, n - size)
            free = [f for f in free if f[1] > 0]
            live[address] = (x, size)
            out.append(x)
        elif address in live:
            free.append(live.pop(address))
            free.sort()
            merged = []
            for a, n in free:
                if merged and merged[-1][0] + merged[-1][1] == a:
                    merged[-1] = (merged[-1][0], merged[-1][1] + n)
                else:
                    merged.append((a, n))
            free = merged
    return out


def agreement(real, sizes, predicted):
    ok = pairs = 0
    for i in range(len(real)):
        for j in range(i + 1, len(real)):
            if sizes[i] == sizes[j]:
                pairs += 1
                ok += (real[j] > real[i]) == (predicted[j] > predicted[i])
    exact = all(
        (real[j] > real[i]) == (predicted[j] > predicted[i])
        for i in range(len(real))
        for j in range(i + 1, len(real))
    )
    return ok, pairs, exact


def main():
    models = [("rising", rising), ("falling", falling), ("chunked", chunked)]
    totals = {name: [0, 0, 0] for name, _ in models}
    for path in sys.argv[1:]:
        events = read(path)
        allocs = [(a, s) for op, a, s in events if op == "alloc"]
        real = [a for a, _ in allocs]
        sizes = [s for _, s in allocs]
        cells = []
        for name, model in models:
            ok, pairs, exact = agreement(real, sizes, model(events))
            t = totals[name]
            t[0] += ok
            t[1] += pairs
            t[2] += exact
            cells.append(f"{name} {ok}/{pairs}{' exact' if exact else ''}")
        print(f"{path}: {len(allocs)} segments; " + "; ".join(cells))
    print(
        "all: "
        + "; ".join(f"{n} {t[0]}/{t[1]} pairs, {t[2]} exact" for n, t in totals.items())
    )


if __name__ == "__main__":
    main()
