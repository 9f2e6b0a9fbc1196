#!/usr/bin/env python3
"""One rule of CUDA's stream-ordered pool per process, under PyTorch's backend:cudaMallocAsync, for
the cuda-async model of issue 24 (docs/validation.md, "The stream-ordered pool from its
synchronizations"). Each probe runs in a fresh process, so the default pool starts empty and the
recorded trace (`vramtrace record`) holds that probe alone.

    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 pool_rules.py PROBE OUT.json

OUT.json: the pool's reserved bytes at the end and at its peak (torch.cuda.memory_reserved /
max_memory_reserved: ReservedMemCurrent / ReservedMemHigh), and which earlier block each probed
request landed in ("where": block name, or "new"). "busy" means a stream kept running by
torch.cuda._sleep, so that a free on it is not complete on the GPU when the next request comes.

Probes (the expectation the model encodes, checked by analyzer tests on the recorded traces):
  same_stream_busy     free then request on one busy stream: reused at once (stream order)
  cross_busy           free on busy s1, request on s2: not reused, the pool grows
  cross_wait_stream    the same with s2.wait_stream(s1) (event record + stream wait): reused
  cross_stream_sync    the same with s1.synchronize() before the request: reused
  cross_device_sync    the same with torch.cuda.synchronize(): reused
  cross_event_sync     the same with an event recorded on s1 after the free, synchronized: reused
  cross_query          the same, polling s1.query() until it is done: reused
  cross_idle           free on s1 whose work is done, no synchronization, request on s2: GPU
                       progress decides (opportunistic reuse): the model predicts a range
  pending_first        completed 16 MiB frees, then pending 32 + 16 MiB frees: where three 16 MiB
                       requests land (frees since the last synchronization first?)
  ties                 six 16 MiB blocks, free the 4th then the 2nd, ask 16 MiB: which one
  threshold_zero       release threshold set to 0: reserved after free + synchronize
  empty_cache          reserved after free, synchronize, then torch.cuda.empty_cache()
"""
import json
import sys
import time

import torch

MiB = 1 << 20
SPIN = 400_000_000  # cycles of torch.cuda._sleep: about 0.2 s on an H200
s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()


def t(mib, stream=None):
    with torch.cuda.stream(stream or torch.cuda.current_stream()):
        x = torch.empty(mib * MiB, dtype=torch.uint8, device="cuda")
        x.zero_()
    return x


def busy(stream):
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SPIN)


def where(x, blocks):
    p = x.data_ptr()
    for name, (a, n) in blocks.items():
        if a <= p < a + n:
            return name
    return "new"


def same_stream_busy():
    s = torch.cuda.current_stream()
    busy(s)
    a = t(64)
    blocks = {"a": (a.data_ptr(), 64 * MiB)}
    del a
    b = t(64)
    return {"b": where(b, blocks)}


def cross(order):
    def run():
        a = t(64, s1)
        blocks = {"a": (a.data_ptr(), 64 * MiB)}
        if order == "idle":
            s1.synchronize()
            torch.cuda._sleep(1000)  # work on the default stream only
        else:
            busy(s1)
        with torch.cuda.stream(s1):
            del a  # cudaFreeAsync on s1 (the block was made on s1)
        ev = None
        if order == "wait_stream":
            s2.wait_stream(s1)
        elif order == "stream_sync":
            s1.synchronize()
        elif order == "device_sync":
            torch.cuda.synchronize()
        elif order == "event_sync":
            ev = s1.record_event()
            ev.synchronize()
        elif order == "query":
            while not s1.query():
                time.sleep(0.001)
        elif order == "idle":
            time.sleep(0.05)
        b = t(64, s2)
        return {"b": where(b, blocks)}

    return run


def pending_first():
    c, g1, a, g2 = t(16), t(8), t(32), t(8)
    e, g3, f = t(16), t(8), t(16)
    blocks = {n: (x.data_ptr(), x.numel()) for n, x in
              [("c16", c), ("a32", a), ("e16", e), ("f16", f)]}
    del c, e
    torch.cuda.synchronize()  # the frees of c and e are complete
    busy(torch.cuda.current_stream())
    del a, f  # pending
    x, y, z = t(16), t(16), t(16)
    return {"x": where(x, blocks), "y": where(y, blocks), "z": where(z, blocks)}


def ties():
    xs = [t(16) for _ in range(6)]
    blocks = {f"b{i}": (x.data_ptr(), 16 * MiB) for i, x in enumerate(xs)}
    xs[3] = None
    xs[1] = None
    a = t(16)
    return {"a": where(a, blocks)}


def threshold_zero():
    from cuda.bindings import driver as cu

    x = t(1)
    dev = cu.cuDeviceGet(0)[1]
    pool = cu.cuDeviceGetDefaultMemPool(dev)[1]
    attr = cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
    r = cu.cuMemPoolSetAttribute(pool, attr, cu.cuuint64_t(0))
    xs = [t(100) for _ in range(3)]
    peak = torch.cuda.memory_reserved()
    del xs, x
    after_free = torch.cuda.memory_reserved()
    torch.cuda.synchronize()
    return {"set": str(r[0]), "peak": peak, "after_free": after_free,
            "after_sync": torch.cuda.memory_reserved()}


def empty_cache():
    xs = [t(100) for _ in range(3)]
    del xs
    torch.cuda.synchronize()
    after_sync = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    return {"after_sync": after_sync, "after_empty_cache": torch.cuda.memory_reserved()}


PROBES = {
    "same_stream_busy": same_stream_busy,
    **{f"cross_{o}": cross(o) for o in
       ["busy", "wait_stream", "stream_sync", "device_sync", "event_sync", "query", "idle"]},
    "pending_first": pending_first,
    "ties": ties,
    "threshold_zero": threshold_zero,
    "empty_cache": empty_cache,
}


def main():
    name, out = sys.argv[1], sys.argv[2]
    r = PROBES[name]()
    torch.cuda.synchronize()
    r.update(probe=name, backend=torch.cuda.get_allocator_backend(),
             reserved=torch.cuda.memory_reserved(),
             max_memory_reserved=torch.cuda.max_memory_reserved())
    with open(out, "w") as f:
        json.dump(r, f, indent=1, sort_keys=True)
    print(name, json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
