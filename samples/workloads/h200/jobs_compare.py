"""Per-rank checks of jobs_x2_h200.sh's results (issue 26, item 1): for each job and rank, the
trace's recorded peak (`summary`'s peak reserved) and the replay of the recorded setting
(`replay --policy pytorch`: PyTorch's caching allocator as the program ran it) against the
rank's own `max_memory_reserved()`, and the driver's count against what the trace names.

    python3 jobs_compare.py DIR

DIR/<job>/ holds <job>_rank<R>.json (torch_jobs.py), summary/<trace>.json (`summary --json`)
and replay/<trace>.json (`replay --policy pytorch --json`, its stream of the rank's device) of
every trace. Prints a Markdown
table; a rank whose replay is off by more than 0.5% is marked.
"""

import glob
import json
import os
import sys

MIB = 1 << 20


def main():
    root = sys.argv[1]
    print("| job | rank | pid | max_memory_reserved (MiB) | recorded peak reserved (MiB) | "
          "replay pytorch (MiB) | replay error | driver's count (MiB) | named |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for job_dir in sorted(glob.glob(f"{root}/*/")):
        job = os.path.basename(job_dir.rstrip("/"))
        ranks = {}
        for p in glob.glob(f"{job_dir}/*_rank*.json"):
            t = json.load(open(p))
            ranks[t["pid"]] = t
        for path in sorted(glob.glob(f"{job_dir}/summary/*.json")):
            name = os.path.basename(path)
            s = json.load(open(path))
            for g in s["groups"]:
                if g["device"] < 0:
                    continue
                t = ranks.get(g["pid"])
                if t is None:
                    continue
                truth = t["max_memory_reserved"]
                replay = json.load(open(f"{job_dir}/replay/{name}"))
                # The rank's device stream alone: the policies' sums also hold its host
                # memory (NCCL's pinned buffers), which max_memory_reserved does not count.
                stream = next(
                    x for x in replay["streams"] if (x["pid"], x["device"]) == (g["pid"], g["device"])
                )
                pt = next(p for p in stream["policies"] if p["name"] == "pytorch")
                err = (pt["peak_reserved"] - truth) / truth if truth else 0.0
                mark = "" if abs(err) <= 0.005 else " **off**"
                c = g.get("driver_count") or {}
                driver = c.get("driver_bytes")
                named = "" if driver is None else f"{100 * c['named_fraction']:.2f}%"
                driver = "" if driver is None else f"{driver / MIB:.1f}"
                print(
                    f"| {job} | {t['rank']} | {g['pid']} | {truth / MIB:.1f} | "
                    f"{g['peak_reserved'] / MIB:.1f} | {pt['peak_reserved'] / MIB:.1f} | "
                    f"{100 * err:+.2f}%{mark} | "
                    f"{driver} | {named} |"
                )


if __name__ == "__main__":
    main()
