#!/usr/bin/env python3
"""Probes of CUDA's stream-ordered pool under PyTorch's backend:cudaMallocAsync, with kernels
running: what the on-device replay of issue 6 (no kernels, every free complete at once) could not
show. Run with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync.

    python3 async_probes.py OUT.json

Each probe starts from an empty pool (synchronize + empty_cache, which PyTorch implements as
cudaDeviceSynchronize + cudaMemPoolTrimTo(pool, 0)) and records the pool's reserved memory
(torch.cuda.memory_reserved = ReservedMemCurrent) after each step and whether a request got the
address of a block freed before it. "busy" means the stream is kept running by
torch.cuda._sleep, so a free issued on it is not yet complete on the GPU when the next request
comes. It also reads the default pool's attributes through cuda.bindings (the driver API).
"""
import json
import sys

import torch

MiB = 1 << 20
SPIN = 400_000_000  # cycles of torch.cuda._sleep: about 0.2 s at 1.98 GHz
out = {}


def reset():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def res():
    return torch.cuda.memory_reserved() // MiB


def t(mib, stream=None):
    if stream is None:
        x = torch.empty(mib * MiB, dtype=torch.uint8, device="cuda")
    else:
        with torch.cuda.stream(stream):
            x = torch.empty(mib * MiB, dtype=torch.uint8, device="cuda")
    return x


def probe(name):
    def wrap(f):
        reset()
        try:
            out[name] = f()
        except Exception as e:  # a probe that fails must not hide the others
            out[name] = {"error": repr(e)}
        print(name, json.dumps(out[name]), flush=True)
        return f

    return wrap


s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()


@probe("rounding")
def _():
    # UsedMemCurrent after single requests: the pool's own rounding of a request.
    r = {}
    for n in [1, 512, 513, 4096, 4097, 65537, MiB + 1, 2 * MiB + 1, 20 * MiB + 1]:
        before = torch.cuda.memory_allocated()
        x = torch.empty(n, dtype=torch.uint8, device="cuda")
        r[str(n)] = torch.cuda.memory_allocated() - before
        del x
    return r


for busy in (False, True):
    @probe(f"same_stream_{'busy' if busy else 'idle'}")
    def _():
        if busy:
            torch.cuda._sleep(SPIN)
        a = t(64)
        a.zero_()
        pa = a.data_ptr()
        del a
        b = t(64)
        same = b.data_ptr() == pa
        r1 = res()
        c = t(32)
        d = t(32)
        return {"reused": same, "reserved_after_b": r1, "reserved_after_c_d": res(),
                "c_in_old_block": pa <= c.data_ptr() < pa + 64 * MiB}

    @probe(f"many_frees_same_stream_{'busy' if busy else 'idle'}")
    def _():
        if busy:
            torch.cuda._sleep(SPIN)
        ptrs = set()
        for _ in range(20):
            x = t(64)
            x.zero_()
            ptrs.add(x.data_ptr())
            del x
        return {"distinct_addresses": len(ptrs), "reserved": res()}


for mode in ("idle", "busy", "busy_wait_stream", "busy_then_sync"):
    @probe(f"cross_stream_{mode}")
    def _():
        if mode != "idle":
            with torch.cuda.stream(s1):
                torch.cuda._sleep(SPIN)
        a = t(64, s1)
        with torch.cuda.stream(s1):
            a.zero_()
        if mode == "idle":
            s1.synchronize()
        pa = a.data_ptr()
        del a  # cudaFreeAsync on s1
        if mode == "busy_wait_stream":
            s2.wait_stream(s1)
        if mode == "busy_then_sync":
            s1.synchronize()
        b = t(64, s2)
        return {"reused": b.data_ptr() == pa, "reserved": res()}


@probe("record_stream")
def _():
    # A block used on a second stream: PyTorch frees it through its unifying stream.
    with torch.cuda.stream(s1):
        torch.cuda._sleep(SPIN)
    a = t(64)
    a.zero_()
    a.record_stream(s1)
    pa = a.data_ptr()
    del a
    b = t(64)
    r = {"reused_at_once": b.data_ptr() == pa, "reserved": res()}
    torch.cuda.synchronize()
    c = t(64)
    r.update(reused_after_sync=c.data_ptr() == pa, reserved_after_sync=res())
    return r


@probe("holes")
def _():
    # Placement among free holes: six 16 MiB blocks, free the 2nd and the 4th (in that order),
    # then ask for 16 MiB, 16 MiB, 8 MiB; then free the 6th and the 5th and ask for 24 MiB.
    xs = [t(16) for _ in range(6)]
    base = xs[0].data_ptr()
    off = lambda x: (x.data_ptr() - base) // MiB  # noqa: E731
    layout = [off(x) for x in xs]
    h1, h3 = xs[1].data_ptr(), xs[3].data_ptr()
    xs[1] = None
    xs[3] = None
    a = t(16)
    b = t(16)
    c = t(8)
    xs[5] = None
    xs[4] = None
    d = t(24)
    return {"layout_mib": layout, "a": off(a), "b": off(b), "c": off(c), "d": off(d),
            "holes": [(h1 - base) // MiB, (h3 - base) // MiB], "reserved": res()}


@probe("holes_reverse")
def _():
    xs = [t(16) for _ in range(6)]
    base = xs[0].data_ptr()
    off = lambda x: (x.data_ptr() - base) // MiB  # noqa: E731
    xs[3] = None
    xs[1] = None
    a = t(16)
    e = t(4)
    return {"a": off(a), "small": (e.data_ptr() - base) / MiB, "reserved": res()}


@probe("best_vs_first")
def _():
    # A 48 MiB hole below a 16 MiB hole: a 16 MiB request shows first fit vs best fit.
    xs = [t(48), t(8), t(16), t(8)]
    base = xs[0].data_ptr()
    xs[0] = None
    xs[2] = None
    a = t(16)
    b = t(1)
    return {"a_mib": (a.data_ptr() - base) / MiB, "small_mib": (b.data_ptr() - base) / MiB,
            "reserved": res()}


@probe("small_after_large")
def _():
    # Where small requests go once a large block is freed: into it, or beside other small ones.
    big = t(64)
    small = [torch.empty(4096, dtype=torch.uint8, device="cuda") for _ in range(4)]
    base = big.data_ptr()
    del big
    more = [torch.empty(4096, dtype=torch.uint8, device="cuda") for _ in range(4)]
    return {"small_mib": [(x.data_ptr() - base) / MiB for x in small],
            "more_mib": [(x.data_ptr() - base) / MiB for x in more], "reserved": res()}


for busy in (False, True):
    @probe(f"pending_vs_completed_{'busy' if busy else 'idle'}")
    def _():
        # A completed free of exactly the request's size and a larger free still pending on the
        # stream: best fit takes the first, a preference for pending (stream-ordered) frees the
        # second. Then the same with two 16 MiB blocks, one completed, one pending.
        c, s1_, a, s2_ = t(16), t(8), t(32), t(8)
        e, s3_, f = t(16), t(8), t(16)
        base = c.data_ptr()
        off = lambda x: (x.data_ptr() - base) / MiB  # noqa: E731
        c = None
        e = None
        torch.cuda.synchronize()  # the frees of c and e are complete
        if busy:
            torch.cuda._sleep(SPIN)
        a.zero_()
        f.zero_()
        a = None  # pending while busy
        f = None
        x = t(16)
        y = t(16)
        z = t(16)
        return {"x": off(x), "y": off(y), "z": off(z), "completed_16mib_at": [0, 64],
                "pending_32mib_at": 24, "pending_16mib_at": 88, "reserved": res()}


@probe("trim_and_threshold")
def _():
    xs = [t(100) for _ in range(4)]
    peak = res()
    del xs
    torch.cuda.synchronize()
    after_sync = res()
    torch.cuda.empty_cache()
    return {"peak": peak, "after_free_and_sync": after_sync, "after_empty_cache": res()}


@probe("pool_attributes")
def _():
    from cuda.bindings import driver as cu

    def ok(r):
        if r[0] != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(str(r[0]))
        return r[1] if len(r) == 2 else r[1:]

    x = t(1)  # the context and PyTorch's pool settings exist now
    dev = ok(cu.cuDeviceGet(0))
    pool = ok(cu.cuDeviceGetDefaultMemPool(dev))
    A = cu.CUmemPool_attribute
    r = {}
    for name in ["CU_MEMPOOL_ATTR_RELEASE_THRESHOLD", "CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES",
                 "CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC", "CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES",
                 "CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT", "CU_MEMPOOL_ATTR_USED_MEM_CURRENT"]:
        v = ok(cu.cuMemPoolGetAttribute(pool, getattr(A, name)))
        r[name] = int(getattr(v, "value", v) if not isinstance(v, int) else v)
    del x
    return r


json.dump(out, open(sys.argv[1], "w"), indent=1)
