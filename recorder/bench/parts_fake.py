"""samples/workloads/programs/recorder_parts.py without a GPU: its alternation and summary run
with a stand-in `torch` whose training step makes 135 tensors through the fake libc10_cuda.so of
the tests (`tests/c/fake_c10_cuda.c`: `alloc`, then `free_requested` and `free_completed`, from
Python frames), so the recorder's tracker path, its parts' stamps and `vramtrace_bench_parts`
really run. A check of the driver and of `cost_compare.py`'s tables on the development machine
(recorder/BENCHMARKS.md "Where the time goes, by the counters"); its figures are a tight loop's,
not a training step's.

    LD_LIBRARY_PATH=C LD_PRELOAD=BENCH.so VRAMTRACE_OUTPUT=/tmp/tb/ \
        python3 recorder/bench/parts_fake.py LIBC10_CUDA OUT.json [VARIANTS [PIN]]
"""

import ctypes
import os
import runpy
import sys
import types

c10 = ctypes.CDLL(sys.argv[1])
c10.fake_torch_init()
c10.fake_torch_malloc.restype = ctypes.c_ulonglong
c10.fake_torch_malloc(ctypes.c_ulong(1000), 0, 0, 0)
allocated = [0]
# Between two tensors the step writes a line of 4 MiB of other memory.
other = bytearray(4 << 20)


def step():
    for i in range(135):
        address, size = ctypes.c_ulong(0x7F1000000000 + 4096 * i), ctypes.c_ulong(4096)
        c10.fake_torch_entry(0, address, size)
        allocated[0] += 1
        other[(i * 4096) % len(other)] = 1
        c10.fake_torch_entry(1, address, size)
        c10.fake_torch_entry(2, address, size)


torch = types.ModuleType("torch")
torch.manual_seed = lambda seed: None
torch.cuda = types.SimpleNamespace(
    synchronize=lambda: None,
    memory_stats=lambda: {"allocation.all.allocated": allocated[0]},
    empty_cache=lambda: None,
)
torch.optim = types.SimpleNamespace(AdamW=lambda params, lr: None)
sys.modules["torch"] = torch
train = types.ModuleType("pyframes_train")
train.build_mlp = lambda: types.SimpleNamespace(parameters=lambda: [])
train.mlp_step = lambda model, opt: step()
train.gpt2_step = None
sys.modules["pyframes_train"] = train

here = os.path.dirname(os.path.abspath(__file__))
driver = os.path.join(here, "..", "..", "samples", "workloads", "programs", "recorder_parts.py")
variants = sys.argv[3] if len(sys.argv) > 3 else "full,stamped,whole"
pin = sys.argv[4] if len(sys.argv) > 4 else "none"
sys.argv = [driver, sys.argv[2], "--models", "mlp", "--variants", variants, "--rounds", "10",
            "--pin", pin]
runpy.run_path(driver, run_name="__main__")
