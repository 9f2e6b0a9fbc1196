#!/usr/bin/env python3
"""The workload table of docs/validation.md, "Part 3", from validation_device_run.sh's results.

    python3 validation_compare.py VRAMTRACE IMPORT_TORCH_TRACE RESULTS_DIR

For each workload of validation_workloads.py it replays
  - the `vramtrace record --requests` trace (W.async.vramtrace) with `pytorch`,
    `pytorch-expandable` and `cuda-async`;
  - PyTorch's own request stream of the native run (W.native.requests.csv.gz, converted by
    analyzer/examples/import_torch_trace.rs) with `pytorch`, and of the expandable run with
    `pytorch-expandable`;
and compares each with max_memory_reserved of the real run (W.CONFIG.truth.json): the native and
expandable processes for the PyTorch policies, the recorded process itself (cudaMallocAsync) for
`cuda-async`, and the CUDA_LAUNCH_BLOCKING=1 process for `cuda-async` on its own trace.
Prints one Markdown table.
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile

W = ["generate_kv", "side_stream", "amp_vit", "multires_cnn", "varbatch_infer", "lstm_varlen", "transformer"]


def replay(vt, trace, policies):
    out = subprocess.run([vt, "replay", "--json", trace, "--policy", ",".join(policies)],
                         check=True, capture_output=True, text=True).stdout
    return {p["name"]: p for p in json.loads(out)["policies"]}


def main():
    vt, imp, d = sys.argv[1], sys.argv[2], sys.argv[3]
    tmp = tempfile.mkdtemp()
    truth = lambda w, c: json.load(open(os.path.join(d, f"{w}.{c}.truth.json")))  # noqa: E731
    mib = lambda b: f"{b / 2**20:,.1f}"  # noqa: E731
    print("| workload | policy | from | predicted (MiB) | real (MiB) | error | device allocs predicted / real |")
    print("|---|---|---|---:|---:|---:|---:|")
    for w in W:
        rows = []
        rec = os.path.join(d, f"{w}.async.vramtrace")
        got = replay(vt, rec, ["pytorch", "pytorch-expandable", "cuda-async"])
        for policy, conf in [("pytorch", "native"), ("pytorch-expandable", "expandable"), ("cuda-async", "async")]:
            t = truth(w, conf)
            real_allocs = t["memory_stats"].get("num_device_alloc") if conf != "async" else None
            rows.append((policy, "`record --requests` trace", got[policy], t["max_memory_reserved"], real_allocs))
        blk = os.path.join(d, f"{w}.async_blocking.vramtrace")
        t = truth(w, "async_blocking")
        rows.append(("cuda-async", "`record --requests` trace, CUDA_LAUNCH_BLOCKING=1 run",
                     replay(vt, blk, ["cuda-async"])["cuda-async"], t["max_memory_reserved"], None))
        for policy, conf in [("pytorch", "native"), ("pytorch-expandable", "expandable")]:
            csv = os.path.join(tmp, f"{w}.{conf}.csv")
            with gzip.open(os.path.join(d, f"{w}.{conf}.requests.csv.gz"), "rt") as f, open(csv, "w") as g:
                g.write(f.read())
            tr = os.path.join(tmp, f"{w}.{conf}.vramtrace")
            subprocess.run([imp, csv, tr, os.path.join(d, f"{w}.{conf}.truth.json")], check=True,
                           capture_output=True)
            t = truth(w, conf)
            rows.append((policy, "PyTorch's memory history of the same run", replay(vt, tr, [policy])[policy],
                         t["max_memory_reserved"], t["memory_stats"].get("num_device_alloc")))
        for policy, src, p, real, real_allocs in rows:
            err = (p["peak_reserved"] - real) / real * 100
            allocs = f"{p['device_allocs']} / {real_allocs}" if real_allocs is not None else ""
            print(f"| {w} | `{policy}` | {src} | {mib(p['peak_reserved'])} | {mib(real)} | {err:+.2f}% | {allocs} |")


if __name__ == "__main__":
    main()
