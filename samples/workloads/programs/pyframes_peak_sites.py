"""What PyTorch's own snapshot says holds memory at the peak, by the user's line: the ground truth
that `vramtrace summary` of the same program is checked against (pyframes_h200.sh).

    python pyframes_peak_sites.py SNAPSHOT.pickle OUT.json

Replays the snapshot's device trace (`alloc`, `free_completed`) to the moment the most bytes
were allocated, then groups the allocations live then by their innermost frame outside
PyTorch's own code (a file not in the `torch/` package), as vramtrace's namer does, and writes the ten
largest with their bytes and counts.
"""

import collections
import json
import pickle
import sys


def in_torch(name):
    # By the path inside the package directory: a virtual environment may live in /opt/torch/.
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in name:
            return name.rsplit(marker, 1)[1].startswith("torch/")
    return False


def site(frames):
    for f in frames:
        name = f.get("filename", "")
        if not in_torch(name) and not name.startswith("??") and name.endswith(".py"):
            return f"{name}:{f.get('line')} {f.get('name')}"
    return frames[0]["filename"] + ":" + str(frames[0].get("line")) if frames else "<no stack>"


def main():
    snap = pickle.load(open(sys.argv[1], "rb"))
    trace = snap["device_traces"][0]
    live, total, peak, at_peak = {}, 0, -1, {}
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e
            total += e["size"]
            if total > peak:
                peak, at_peak = total, dict(live)
        elif e["action"] == "free_completed" and e["addr"] in live:
            total -= live.pop(e["addr"])["size"]
    by = collections.defaultdict(lambda: [0, 0])
    for e in at_peak.values():
        s = by[site(e.get("frames", []))]
        s[0] += e["size"]
        s[1] += 1
    top = sorted(by.items(), key=lambda kv: -kv[1][0])[:10]
    out = {
        "peak_allocated": peak,
        "entries": len(trace),
        "sites": [{"site": k, "bytes": v[0], "count": v[1]} for k, v in top],
    }
    json.dump(out, open(sys.argv[2], "w"), indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
