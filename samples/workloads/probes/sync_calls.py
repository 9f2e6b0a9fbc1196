"""Which driver calls PyTorch's synchronizations reach under the CUDA runtime in use (issue 24:
the recorder's ordering events, formats/SPEC.md §4.4). Each PyTorch call below is made a known
number of times; `vramtrace info` of the recorded trace lists the driver calls they became.

    LD_PRELOAD=libvramtrace_preload.so VRAMTRACE_OUTPUT=sync.vramtrace python3 sync_calls.py

Prints the counts it made, one `what count` line each.
"""
import torch

x = torch.empty(1 << 20, device="cuda")
made = {}


def count(what, n, f):
    for _ in range(n):
        f()
    made[what] = n


s = torch.cuda.current_stream()
side = torch.cuda.Stream()
e = torch.cuda.Event()
count("torch.cuda.synchronize", 5, torch.cuda.synchronize)
count("Stream.synchronize", 7, s.synchronize)
count("Stream.query", 3, s.query)
count("Event.record", 11, e.record)
count("Event.synchronize", 13, e.synchronize)
count("Event.query", 17, e.query)
count("Stream.wait_event", 19, lambda: side.wait_event(e))
count("tensor.item", 23, lambda: x.sum().item())
for what, n in made.items():
    print(what, n)
