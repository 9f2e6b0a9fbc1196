#!/usr/bin/env python3
"""Replays RMM memory-event logs (`vramtrace export --to rmm-csv`, or RMM's own
LoggingResourceAdaptor output) through real RMM memory resources and reports RMM's own
statistics (docs/validation.md, "Part 3", RMM).

    python3 rmm_replay.py OUT.json LOG.csv[.gz] ...

For each log and each resource:

  pool     PoolMemoryResource(upstream, initial_pool_size=0)          (vramtrace `rmm-pool`)
  pool_cap the same with maximum_pool_size = 1.25 x the log's peak of live bytes, rounded up to
           256 B                                                       (`rmm-pool:maximum_pool_size=`)
  binning  BinningMemoryResource(pool, 18, 22) over that pool          (`rmm-binning`)
  arena    ArenaMemoryResource(upstream, arena_size=A) for the smallest A that serves the whole
           log, bisected (10 steps) between its peak of live bytes and three times that
                                                                       (`rmm-arena:arena_size=A`)

the stack is StatisticsResourceAdaptor(CudaMemoryResource()) -> resource ->
StatisticsResourceAdaptor(): the lower adaptor's peak_bytes is what the resource took from the
device (its reserved peak), the upper one's what the program held. A refused allocation is
recorded with its line and the replay goes on without it (its free is skipped). Each log's
streams get one rmm Stream each (the legacy default stream for 0).
It also writes OUT.json's directory/rmm_logged.csv: the first 600 requests of the first log
replayed through LoggingResourceAdaptor(pool), a real RMM log for `vramtrace import`'s tests.
"""
import gzip
import json
import os
import sys
import time

import rmm
from rmm.pylibrmm.stream import DEFAULT_STREAM, Stream

MR = rmm.mr


def read(path):
    op = gzip.open if path.endswith(".gz") else open
    rows = []
    with op(path, "rt") as f:
        next(f)
        for line in f:
            th, tm, action, ptr, size, stream = line.rstrip("\n").split(",")
            rows.append((action, int(ptr, 16) if ptr.startswith("0x") else 0, int(size), int(stream, 16)))
    return rows


def peak_live(rows):
    live = peak = 0
    for a, _, s, _ in rows:
        if a == "allocate":
            live += s
            peak = max(peak, live)
        elif a == "free":
            live -= s
    return peak


def replay(rows, make, streams, limit=None):
    """Replays rows through make(upstream); returns RMM's figures."""
    up = MR.StatisticsResourceAdaptor(MR.CudaMemoryResource())
    res = make(up)
    top = MR.StatisticsResourceAdaptor(res)
    live, refused, first_refused = {}, 0, None
    t0 = time.time()
    for i, (a, p, s, st) in enumerate(rows[:limit]):
        if a == "allocate":
            try:
                live[p] = (top.allocate(s, streams[st]), s, st)
            except MemoryError:
                refused += 1
                first_refused = first_refused if first_refused is not None else i
        elif a == "free":
            got = live.pop(p, None)
            if got is not None:
                top.deallocate(got[0], got[1], streams[got[2]])
    for q, s, st in live.values():
        top.deallocate(q, s, streams[st])
    for st in streams.values():
        st.synchronize()
    r = {
        "reserved_peak": up.allocation_counts.peak_bytes,
        "upstream_allocations": up.allocation_counts.total_count,
        "allocated_peak": top.allocation_counts.peak_bytes,
        "refused": refused,
        "first_refused": first_refused,
        "seconds": round(time.time() - t0, 3),
    }
    if hasattr(res, "flush"):
        res.flush()
    if hasattr(res, "pool_size"):
        r["pool_size_at_end"] = res.pool_size()
    del top, res, up
    return r


def align(n):
    return (n + 255) // 256 * 256


def main():
    out, logs = sys.argv[1], sys.argv[2:]
    results = {"rmm": rmm.__version__, "logs": {}}
    for path in logs:
        rows = read(path)
        streams = {st: (DEFAULT_STREAM if st == 0 else Stream()) for st in {r[3] for r in rows}}
        lb = peak_live(rows)
        name = os.path.basename(path).split(".")[0]
        r = {"requests": len(rows), "peak_live": lb}
        pool = lambda up: MR.PoolMemoryResource(up, initial_pool_size=0)  # noqa: E731
        cap = align(lb * 5 // 4)
        variants = {
            "pool": pool,
            "pool_cap": lambda up: MR.PoolMemoryResource(up, initial_pool_size=0, maximum_pool_size=cap),
            "binning": lambda up: MR.BinningMemoryResource(pool(up), 18, 22),
        }
        for v, make in variants.items():
            try:
                r[v] = replay(rows, make, streams)
            except Exception as e:
                r[v] = {"error": repr(e)}
            print(name, v, json.dumps(r[v]), flush=True)
        r["pool_cap"]["maximum_pool_size"] = cap if isinstance(r["pool_cap"], dict) else None

        def arena_ok(size):
            got = replay(rows, lambda up: MR.ArenaMemoryResource(up, arena_size=size), streams)
            return got["refused"] == 0, got

        try:
            lo, hi = align(lb), align(lb * 3)
            ok_hi, _ = arena_ok(hi)
            steps = []
            if ok_hi:
                for _ in range(10):
                    mid = align((lo + hi) // 2)
                    if mid in (lo, hi):
                        break
                    ok, got = arena_ok(mid)
                    steps.append((mid, ok, got["first_refused"]))
                    lo, hi = (lo, mid) if ok else (mid, hi)
            r["arena"] = {"smallest_arena_that_served": hi if ok_hi else None, "bisection": steps}
        except Exception as e:
            r["arena"] = {"error": repr(e)}
        print(name, "arena", json.dumps(r["arena"]), flush=True)
        results["logs"][name] = r
    try:
        rows = read(logs[0])[:600]
        logged = os.path.join(os.path.dirname(out), "rmm_logged.csv")
        streams = {st: (DEFAULT_STREAM if st == 0 else Stream()) for st in {r[3] for r in rows}}
        replay(rows, lambda up: MR.LoggingResourceAdaptor(MR.PoolMemoryResource(up, initial_pool_size=0), log_file_name=logged), streams)
        results["logged"] = logged
    except Exception as e:
        results["logged"] = repr(e)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
