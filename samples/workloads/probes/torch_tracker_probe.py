"""Checks that a trace tracker attached to PyTorch's caching allocator sees every allocation that
torch.cuda.memory_stats() counts (torch_tracker_probe.sh runs it; docs/torch-tracker.md has the
findings).

    python3 torch_tracker_probe.py MODE LAYOUT.json RESULT.json

MODE: native | expandable (set PYTORCH_CUDA_ALLOC_CONF yourself) | graph | compile.
RAW_SO and CXX_SO name the two trackers (torch_tracker_raw.c, torch_tracker_cxx.cpp).
"""

import ctypes
import json
import os
import sys
import time

import torch

ACTIONS = ["ALLOC", "FREE_REQUESTED", "FREE_COMPLETED", "SEGMENT_ALLOC", "SEGMENT_FREE",
           "SEGMENT_MAP", "SEGMENT_UNMAP", "SNAPSHOT", "OOM"]
STATS = ["allocation.all.allocated", "allocation.all.freed", "segment.all.allocated",
         "segment.all.freed", "allocated_bytes.all.allocated", "allocated_bytes.all.freed",
         "reserved_bytes.all.allocated", "reserved_bytes.all.freed", "requested_bytes.all.allocated",
         "num_device_alloc", "num_device_free"]


def mlp():
    layers = []
    for _ in range(16):
        layers += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).cuda()


def eager(model):
    opt = torch.optim.Adam(model.parameters())
    side = torch.cuda.Stream()
    for step in range(12):
        x = torch.randn(64 + 16 * (step % 4), 1024, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        with torch.cuda.stream(side):
            y = torch.randn(256, 1024, device="cuda")
        y.record_stream(torch.cuda.current_stream())
        del y
    big = torch.empty(300 << 20, dtype=torch.uint8, device="cuda")
    del big
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def graph(model):
    static_x = torch.randn(64, 1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad():
        with torch.cuda.stream(s):
            for _ in range(3):
                model(static_x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = model(static_x)
        for _ in range(5):
            static_x.copy_(torch.randn(64, 1024, device="cuda"))
            g.replay()
    torch.cuda.synchronize()
    return static_y.sum().item()


def compiled(model):
    opt = torch.optim.Adam(model.parameters())
    cm = torch.compile(model, mode="reduce-overhead")
    for _ in range(6):
        torch.compiler.cudagraph_mark_step_begin()
        x = torch.randn(64, 1024, device="cuda")
        loss = cm(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()


def counts(lib, fn):
    out = (ctypes.c_ulong * 36)()
    getattr(lib, fn)(out)
    return list(out)


def main():
    mode, layout_path, result_path = sys.argv[1:4]
    layout = json.load(open(layout_path))
    torch.cuda.init()
    raw = ctypes.CDLL(os.environ["RAW_SO"])
    cxx = ctypes.CDLL(os.environ["CXX_SO"])
    offs = (ctypes.c_long * 6)(*[layout[k] for k in
                                ("off_action_", "off_device_", "off_addr_", "off_stream_",
                                 "off_size_", "off_mempool_")])
    name = ctypes.create_string_buffer(256)
    rc = raw.vt_attach(ctypes.c_long(layout["slot_attachAllocatorTraceTracker"]),
                       ctypes.c_long(layout["slot_initialized"]), offs, name, 256)
    result = {"mode": mode, "torch": torch.__version__,
              "cxx11_abi": torch.compiled_with_cxx11_abi(),
              "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
              "attach_rc": rc, "allocator_type": name.value.decode()}
    if rc != 0:
        # The allocator was not ready: allocate once and try again, to learn the rest.
        torch.empty(1, device="cuda")
        result["attach_rc_after_alloc"] = raw.vt_attach(
            ctypes.c_long(layout["slot_attachAllocatorTraceTracker"]),
            ctypes.c_long(layout["slot_initialized"]), offs, name, 256)
    cxx.vtx_attach()
    s0 = torch.cuda.memory_stats()
    t0 = time.time()
    model = mlp()
    {"native": eager, "expandable": eager, "graph": graph, "compile": compiled}[mode](model)
    result["workload_s"] = round(time.time() - t0, 2)

    # Where the fields are: one known tensor.
    x = torch.empty(3 * 2**20 + 5, dtype=torch.uint8, device="cuda")
    last = (ctypes.c_ulong * 7)()
    raw.vt_last(0, last)
    result["known_alloc"] = {"data_ptr": x.data_ptr(), "nbytes": x.nbytes,
                             "stream": torch.cuda.current_stream().cuda_stream,
                             "entry": dict(zip(["action", "device", "addr", "size", "stream",
                                                "pool0", "pool1"], list(last)))}
    del x
    raw.vt_last(1, last)
    result["known_free_requested"] = list(last)
    raw.vt_last(3, last)
    result["last_segment_alloc"] = list(last)

    s1 = torch.cuda.memory_stats()
    result["stats_delta"] = {k: s1.get(k, 0) - s0.get(k, 0) for k in STATS}
    result["memory_reserved"] = torch.cuda.memory_reserved()
    for label, lib, fn in (("raw", raw, "vt_counts"), ("cxx", cxx, "vtx_counts")):
        c = counts(lib, fn)
        result[label] = {a: {"n": c[i], "bytes": c[16 + i]} for i, a in enumerate(ACTIONS)}
        if label == "raw":
            result["manager_ops"] = dict(zip(["type_info", "functor_ptr", "clone", "destroy"],
                                             c[32:36]))
    r = result["raw"]
    result["trace_reserved_now"] = (r["SEGMENT_ALLOC"]["bytes"] + r["SEGMENT_MAP"]["bytes"]
                                    - r["SEGMENT_FREE"]["bytes"] - r["SEGMENT_UNMAP"]["bytes"])
    json.dump(result, open(result_path, "w"), indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
