"""Run `python -m torch.cuda._memory_viz SUBCOMMAND FILE ...` for many files in one process.

    python3 interop_viz_check.py OUTDIR FILE.pickle...

Each call goes through runpy exactly as `python -m` does, so PyTorch's own command line reads
the file; sharing one interpreter saves importing torch once per call. For every file it runs
`stats`, `trace`, `trace_plot` and `segment_plot` and prints OK or the exception.
"""

import contextlib
import io
import os
import runpy
import sys

outdir, files = sys.argv[1], sys.argv[2:]
failures = 0
for path in files:
    base = os.path.splitext(os.path.basename(path))[0]
    for cmd, extra in [
        ("stats", []),
        ("trace", []),
        ("trace_plot", ["-o", os.path.join(outdir, base + ".html")]),
        ("segment_plot", ["-o", os.path.join(outdir, base + ".seg.html")]),
    ]:
        sys.argv = ["_memory_viz", cmd, path] + extra
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                runpy.run_module("torch.cuda._memory_viz", run_name="__main__")
            out = buf.getvalue()
            keep = [l for l in out.splitlines() if l.startswith(("segments", "total_"))]
            tail = " | ".join(keep) if cmd == "stats" else out[-120:].replace("\n", " / ")
            print(f"OK   {cmd:<12} {base}: {tail}")
        except BaseException as e:  # noqa: BLE001 - report every failure, keep going
            failures += 1
            print(f"FAIL {cmd:<12} {base}: {type(e).__name__}: {e}")
print(f"viz failures: {failures}")
