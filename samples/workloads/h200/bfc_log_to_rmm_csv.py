#!/usr/bin/env python3
"""Turns XLA's BFC allocator log into an RMM memory-event log that `vramtrace import` reads.

    python3 bfc_log_to_rmm_csv.py XLA_STDERR[.gz] OUT.csv [ALLOCATOR]

XLA's `bfc_allocator.cc` logs every request of a BFC allocator when run with
TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=bfc_allocator=4 (lines
`[mem-debug] AllocateRaw,NAME,BYTES,ADDRESS,...` and `[mem-debug] DeallocateRaw,NAME,BYTES,ADDRESS,...`,
in the order they happened): the request stream BFC itself served, with the program's byte counts.
ALLOCATOR is the BFC instance (default GPU_0_bfc, the device memory of GPU 0). Each line's
thread id and time of day (`I1201 09:09:58.582568 1347 ...`) go into the CSV; the stream is 0
(XLA runs one compute stream per device). It also prints the allocator's own region growth
(`Extending allocation by ...`) for comparison with a replay.
"""
import gzip
import re
import sys

LINE = re.compile(
    r"^[IWE]\d{4} (\d\d:\d\d:\d\d\.\d{6})\s+(\d+) bfc_allocator\.cc:\d+\] (.*)$"
)


def main():
    src, out = sys.argv[1], sys.argv[2]
    name = sys.argv[3] if len(sys.argv) > 3 else "GPU_0_bfc"
    op = gzip.open if src.endswith(".gz") else open
    n = {"allocate": 0, "free": 0}
    regions = []
    with op(src, "rt", errors="replace") as f, open(out, "w") as g:
        g.write("Thread,Time,Action,Pointer,Size,Stream\n")
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            time, thread, msg = m.groups()
            if msg.startswith("[mem-debug] "):
                fields = msg[len("[mem-debug] "):].split(",")
                if len(fields) < 4 or fields[1] != name:
                    continue
                action = {"AllocateRaw": "allocate", "DeallocateRaw": "free"}.get(fields[0])
                if action:
                    n[action] += 1
                    g.write(f"{thread},{time},{action},{fields[3]},{fields[2]},0x0\n")
            elif msg.startswith("Extending allocation by") and msg.endswith(f"for {name}."):
                regions.append(msg.split(" by ")[1].split(" bytes")[0])
    print(f"{out}: {n['allocate']} allocations, {n['free']} frees of {name}; regions: {', '.join(regions)}")


if __name__ == "__main__":
    main()
