"""What replay_validate.py and validation_workloads.py write about a PyTorch process: its own
request stream (PyTorch's memory history, flattened to CSV) and the allocator's figures."""
import gzip
import os

import torch


def write_history(path):
    """Writes every entry of the device's memory history as action,addr,size,stream,time_us
    (the format analyzer/examples/import_torch_trace.rs reads); returns how many."""
    snap = torch.cuda.memory._snapshot()
    entries = snap["device_traces"][torch.cuda.current_device()]
    with gzip.open(path, "wt") as f:
        f.write("action,addr,size,stream,time_us\n")
        for e in entries:
            f.write(
                f"{e['action']},{e.get('addr', 0)},{e.get('size', 0)},{e.get('stream', 0)},{e.get('time_us', 0)}\n"
            )
    return len(entries)


def figures():
    """The configuration, versions, device and the allocator's own peaks and statistics."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": props.name,
        "total_memory": props.total_memory,
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "memory_stats": dict(torch.cuda.memory_stats()),
    }
