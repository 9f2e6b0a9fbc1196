#!/usr/bin/env python3
"""The real stream-ordered pool's placement, read off the addresses that traces recorded under
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync carry (issue 24; docs/validation.md, "The pool's
placement, read off its real addresses"). Offline: no GPU.

    python3 samples/workloads/h200/pool_placement.py VRAMTRACE [TRACES_DIR]

VRAMTRACE is the `vramtrace` binary (it exports each trace with `export --to parquet`);
TRACES_DIR defaults to samples/traces/h200-pool/ (the `*.async.vramtrace` and `*.native.vramtrace`
traces and truth.json). Needs pyarrow and sortedcontainers. Prints four tables:

1. Chunks: the share of requests that straddle a 2 MiB or a 32 MiB boundary of the pool (a pool
   made of separately mapped chunks would have none), and the reserved peak the address span
   predicts (the highest live byte, rounded up to 32 MiB) against truth.json.
2. Merging: the share of reused requests (those that did not grow the pool) that start at the
   start of one free range and fit in it, when free ranges merge: never, at once (one free
   list), at synchronizations only, or only among frees of one kind, incomplete (freed on a stream
   less than LAG ago, in the trace's host time, and not synchronized since) or complete.
3. Placement, with the incomplete/complete split at LAG = 3 ms: the share of requests whose real
   address (or growth) each rule predicts.
4. Peaks: a replay of the requests (sizes, frees, synchronizations) through the split model, for
   several LAG values, against truth.json; LAG = inf is the `cuda-async` model of
   analyzer/src/policy/ordered_pool.rs (one-stream rules: cross-stream events are not modelled
   here).
"""
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter, deque

import pyarrow.parquet as pq
from sortedcontainers import SortedDict

MiB = 1 << 20
CHUNK = 32 * MiB
INF = float("inf")
WORKLOADS = ["amp_vit", "generate_kv", "gpt2_varlen", "multires_cnn", "side_stream",
             "transformer", "varbatch_infer"]
# The requests of each capture: the pool's own calls, or PyTorch's tracker under the native
# allocator (formats/SPEC.md: memory kinds).
KINDS = {"async": {"pool", "ordering"}, "native": {"torch_block", "ordering", "limits"}}
ACTIONS = {"alloc", "free", "synchronize", "trim"}


def rounded(size):
    return -(-size // 512) * 512


def load(vramtrace, trace, capture, tmp):
    """The trace's requests in order: (action, stream, address, size, host ns)."""
    out = os.path.join(tmp, os.path.basename(trace))
    subprocess.run([vramtrace, "export", trace, "--to", "parquet", "--policy", "none", "-o", out],
                   check=True, stdout=subprocess.DEVNULL)
    t = pq.read_table(os.path.join(out, "events")).to_pydict()
    rows = sorted(zip(t["seq"], t["action"], t["memory_kind"], t["stream"], t["address"],
                      t["size"], t["ts"], t["result"]))
    return [(a, s, addr, size, ts) for _, a, kind, s, addr, size, ts, result in rows
            if kind in KINDS[capture] and a in ACTIONS and result == 0
            and not (a == "alloc" and addr == 0)]


class Free:
    """Free ranges: start -> {end, id (latest free in it), ts, done, stream}, merged by `joins`."""

    def __init__(self, joins):
        self.r = SortedDict()
        self.joins = joins

    def at(self, x):
        """The start of the range holding offset x, or None."""
        i = self.r.bisect_right(x)
        if i == 0:
            return None
        k = self.r.keys()[i - 1]
        return k if self.r[k]["end"] > x else None

    def take(self, x, n):
        """Marks [x, x + n) used, splitting the ranges it overlaps."""
        ks = [k for k in [self.at(x)] if k is not None]
        ks += [k for k in self.r.irange(x + 1, x + n - 1)]
        for k in ks:
            v = self.r.pop(k)
            if k < x:
                self.r[k] = dict(v, end=x)
            if v["end"] > x + n:
                self.r[x + n] = dict(v)

    @staticmethod
    def union(lo, hi):
        return dict(lo, end=hi["end"], id=max(lo["id"], hi["id"]), ts=max(lo["ts"], hi["ts"]),
                    done=lo["done"] and hi["done"], synced=lo["synced"] and hi["synced"])

    def join(self, x):
        """Merges the range at x with its neighbours where `joins` allows."""
        v = self.r[x]
        if v["end"] in self.r and self.joins(v, self.r[v["end"]]):
            self.r[x] = v = self.union(v, self.r.pop(v["end"]))
        i = self.r.bisect_left(x)
        if i > 0:
            k = self.r.keys()[i - 1]
            if self.r[k]["end"] == x and self.joins(self.r[k], v):
                self.r[k] = self.union(self.r[k], self.r.pop(x))

    def add(self, x, n, fid, ts, stream, done=False):
        self.r[x] = {"end": x + n, "id": fid, "ts": ts, "done": done, "synced": done,
                     "stream": stream}
        self.join(x)

    def progress(self, pending, lag, now):
        """Completes the frees made `lag` ns or more before `now` (GPU progress, in host time):
        the incomplete ranges within them whose latest free is that old."""
        while pending and pending[0][0] + lag <= now:
            _, x, n = pending.popleft()
            ks = [k for k in [self.at(x)] if k is not None]
            for k in ks + list(self.r.irange(x + 1, x + n - 1)):
                v = self.r.get(k)
                if v is not None and not v["done"] and v["ts"] + lag <= now:
                    v["done"] = True
                    self.join(k)

    def complete(self):
        """Marks every incomplete range complete (a synchronization) and merges them."""
        for v in self.r.values():
            v["synced"] = True
        for k in [k for k, v in self.r.items() if not v["done"]]:
            if k in self.r:
                self.r[k]["done"] = True
                self.join(k)


def split_joins(a, b):
    """Incomplete frees of one stream merge among themselves, complete ones among themselves."""
    return a["done"] == b["done"] and (a["done"] or a["stream"] == b["stream"])


MERGES = {
    "never": lambda a, b: False,
    "at once": lambda a, b: True,
    "at synchronizations": lambda a, b: a["done"] and b["done"],
    "split": split_joins,
}


def walk(events, free, lag, on_alloc):
    """Replays the real addresses into `free`; frees complete `lag` ns after them (host time)
    or at the next synchronization. `on_alloc(x, n, stream, top)` sees each request first."""
    live, top, fid, base = {}, 0, 0, min(a for act, _, a, _, _ in events if act == "alloc")
    pending = deque()
    for act, stream, addr, size, ts in events:
        free.progress(pending, lag, ts)
        x = addr - base
        if act == "alloc":
            n = rounded(size)
            on_alloc(x, n, stream, top)
            free.take(x, n)
            live[x] = n
            top = max(top, x + n)
        elif act == "free" and x in live:
            fid += 1
            n = live.pop(x)
            free.add(x, n, fid, ts, stream)
            if lag < INF:
                pending.append((ts, x, n))
        elif act in ("synchronize", "trim"):
            pending.clear()
            free.complete()


def chunks(events, truth_mib):
    base = min(a for act, _, a, _, _ in events if act == "alloc")
    allocs = [(a - base, rounded(s)) for act, _, a, s, _ in events if act == "alloc"]
    straddle = {}
    for g in (2 * MiB, CHUNK):
        small = [(x, n) for x, n in allocs if n < g]
        straddle[g] = sum(x // g != (x + n - 1) // g for x, n in small) / max(1, len(small))
    live, span = {}, 0
    for act, _, a, s, _ in events:
        if act == "alloc":
            live[a] = rounded(s)
            span = max(span, a + live[a] - base)
        elif act == "free":
            live.pop(a, None)
    peak = -(-span // CHUNK) * 32
    return (f"{100 * straddle[2 * MiB]:.1f}% | {100 * straddle[CHUNK]:.1f}% | {peak:,} | "
            f"{truth_mib:,} | {'yes' if peak == truth_mib else 'no'}")


def merging(events, merge, lag):
    c = Counter()

    def look(x, n, stream, top):
        if x + n > top:
            return
        k = free.at(x)
        c["n"] += 1
        c["ok"] += k == x and free.r[k]["end"] >= x + n

    free = Free(MERGES[merge])
    walk(events, free, lag, look)
    return c["ok"] / max(1, c["n"])


def by_size(t):
    return (t[1]["end"] - t[0], t[1]["id"], t[0])


def by_size_high(t):
    return (t[1]["end"] - t[0], -t[0])


def first(items):
    return items[:1]


def best(items, key=by_size):
    return [min(items, key=key)] if items else []


def recent(items):
    return [max(items, key=lambda t: t[1]["id"])] if items else []


# Each rule: (own stream's incomplete frees, complete frees) -> the range it picks, or none.
RULES = {
    "incomplete best, then complete best (ordered_pool.rs)": lambda p, d: best(p) or best(d),
    "incomplete best, then complete first": lambda p, d: best(p) or first(d),
    "complete best, then incomplete best": lambda p, d: best(d) or best(p),
    "best fit over all": lambda p, d: best(p + d),
    "first fit over all": lambda p, d: first(sorted(p + d)),
    "most recently freed": lambda p, d: recent(p + d),
    "incomplete first, then complete first": lambda p, d: first(p) or first(d),
}


def placement(events, lag):
    c = Counter()

    def look(x, n, stream, top):
        fits = [(k, v) for k, v in free.r.items() if v["end"] - k >= n]
        own = [t for t in fits if not t[1]["done"] and t[1]["stream"] == stream]
        done = [t for t in fits if t[1]["done"]]
        c["n"] += 1
        for name, rule in RULES.items():
            pick = rule(own, done)
            c[name] += (not pick) if x + n > top else (bool(pick) and pick[0][0] == x)

    free = Free(split_joins)
    walk(events, free, lag, look)
    return [c[name] / c["n"] for name in RULES]


def peak(events, lag, tier="done", key=by_size):
    """Reserved peak (MiB) of the split model: a stream's own frees of the first tier first (best
    fit, `key` breaks ties), then the others' (best fit), else the arena grows in 32 MiB steps.
    Ranges merge as `split_joins` says (by GPU completion); the tier is completion (`done`) or
    the host's synchronizations (`synced`: frees since the stream's last synchronization first,
    as ordered_pool.rs)."""
    free = Free(split_joins)
    live, reserved, high, fid = {}, 0, 0, 0
    pending = deque()
    for act, stream, addr, size, ts in events:
        free.progress(pending, lag, ts)
        if act == "alloc":
            n = rounded(size)
            fits = [(k, v) for k, v in free.r.items() if v["end"] - k >= n]
            own = [t for t in fits if not t[1][tier] and t[1]["stream"] == stream]
            pick = best(own, key) or best([t for t in fits if t[1][tier]], key)
            if pick:
                x = pick[0][0]
                free.take(x, n)
            else:
                x = reserved
                if free.r:
                    k = free.r.keys()[-1]
                    v = free.r[k]
                    if v["end"] == reserved and (v[tier] or v["stream"] == stream):
                        x = k
                grown = -(-(x + n - reserved) // CHUNK) * CHUNK
                if x < reserved:
                    free.r.pop(x)
                if x + n < reserved + grown:
                    free.add(x + n, reserved + grown - x - n, fid, 0, stream, done=True)
                reserved += grown
                high = max(high, reserved)
            live[addr] = (x, n, stream)
        elif act == "free" and addr in live:
            x, n, s = live.pop(addr)
            fid += 1
            free.add(x, n, fid, ts, s)
            if lag < INF:
                pending.append((ts, x, n))
        elif act in ("synchronize", "trim"):
            pending.clear()
            free.complete()
            if act == "trim" and free.r:
                k = free.r.keys()[-1]
                to = -(-k // CHUNK) * CHUNK
                if free.r[k]["end"] == reserved and to < reserved:
                    v = free.r.pop(k)
                    if to > k:
                        free.r[k] = dict(v, end=to)
                    reserved = to
    return high // MiB


def main():
    vramtrace = sys.argv[1]
    d = sys.argv[2] if len(sys.argv) > 2 else "samples/traces/h200-pool"
    truth = json.load(open(os.path.join(d, "truth.json")))["workloads"]
    real = {w: truth[w + ".async"]["max_memory_reserved"] // MiB for w in WORKLOADS}
    with tempfile.TemporaryDirectory() as tmp:
        ev = {(w, c): load(vramtrace, os.path.join(d, f"{w}.{c}.vramtrace"), c, tmp)
              for w in WORKLOADS for c in KINDS}
    print("## 1. Chunks (the cudaMallocAsync traces)\n")
    print("| workload | straddle 2 MiB | straddle 32 MiB | span peak | real | equal |")
    print("|---|---:|---:|---:|---:|---|")
    for w in WORKLOADS:
        print(f"| {w} | {chunks(ev[w, 'async'], real[w])} |")
    merges = [("never", INF), ("at once", INF), ("at synchronizations", INF)]
    merges += [("split", lag) for lag in (0, 1e6, 3e6, 1e7, INF)]
    print("\n## 2. Merging: reused requests at the start of one free range that holds them\n")
    print("| workload | " + " | ".join(
        m if m != "split" else f"split, LAG {lag / 1e6:g} ms" for m, lag in merges) + " |")
    print("|---|" + "---:|" * len(merges))
    for w in WORKLOADS:
        print(f"| {w} | " + " | ".join(
            f"{100 * merging(ev[w, 'async'], m, lag):.1f}%" for m, lag in merges) + " |")
    print("\n## 3. Placement (split, LAG 3 ms): requests whose address or growth the rule names\n")
    print("| rule | " + " | ".join(WORKLOADS) + " |")
    print("|---|" + "---:|" * len(WORKLOADS))
    scores = {w: placement(ev[w, "async"], 3e6) for w in WORKLOADS}
    for i, name in enumerate(RULES):
        print(f"| {name} | " + " | ".join(f"{100 * scores[w][i]:.1f}%" for w in WORKLOADS) + " |")
    lags = (INF, 0, 1e6, 3e6, 1e7)
    print("\n## 4. Peaks (MiB) of the split model against the recorded run's real peak\n")
    print("| workload | from | real | " + " | ".join(
        "LAG inf (ordered_pool.rs)" if lag == INF else f"LAG {lag / 1e6:g} ms" for lag in lags)
        + " | range over LAG |")
    print("|---|---|---:|" + "---:|" * len(lags) + "---|")
    for w in WORKLOADS:
        for c in KINDS:
            p = [peak(ev[w, c], lag) for lag in lags]
            cells = " | ".join(f"{v:,} ({100 * (v - real[w]) / real[w]:+.1f}%)" for v in p)
            lo, hi = min(p), max(p)
            print(f"| {w} | {c} | {real[w]:,} | {cells} | {lo:,}–{hi:,} "
                  f"({100 * (hi - lo) / lo:.0f}% wide) |")
    variants = [("completion", "earliest", "done", by_size),
                ("completion", "highest address", "done", by_size_high),
                ("synchronization", "earliest", "synced", by_size)]
    lags = (1e6, 3e6, 1e7)
    print("\n## 5. Peaks (MiB, the cudaMallocAsync traces) of variants: the tier a request tries "
          "first, ties among equal sizes\n")
    print("| workload | real | " + " | ".join(
        f"{t}, {k}, LAG {lag / 1e6:g} ms" for t, k, _, _ in variants for lag in lags) + " |")
    print("|---|---:|" + "---:|" * (len(variants) * len(lags)))
    for w in WORKLOADS:
        cells = [peak(ev[w, "async"], lag, tier, key) for _, _, tier, key in variants
                 for lag in lags]
        print(f"| {w} | {real[w]:,} | " + " | ".join(
            f"{v:,} ({100 * (v - real[w]) / real[w]:+.1f}%)" for v in cells) + " |")


main()
