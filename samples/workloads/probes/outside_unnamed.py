"""What holds the process's device memory that no allocation call names (issue 26, item 2;
docs/validation.md "Outside the pool, named"): the steps of `programs/outside_pool.py` one at a
time, plus two kernels of CuPy's, with the driver's count of the process (NVML
`usedGpuMemory`), PyTorch's reserved bytes and the context's limits (`cuCtxGetLimit`: the
per-thread stack size, which sizes the local memory the driver reserves for every resident
thread) after each step.

    torchrun --nproc-per-node 1 outside_unnamed.py OUT.json

Unrecorded: the recorder is not loaded, so every figure is the driver's or PyTorch's own.
"""

import ctypes
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

CU_LIMIT_STACK_SIZE, CU_LIMIT_PRINTF_FIFO_SIZE, CU_LIMIT_MALLOC_HEAP_SIZE = 0, 1, 2


class Nvml:
    """The process's `usedGpuMemory` on device 0, from NVML (no context of its own)."""

    class Proc(ctypes.Structure):
        _fields_ = [
            ("pid", ctypes.c_uint),
            ("used", ctypes.c_ulonglong),
            ("gi", ctypes.c_uint),
            ("ci", ctypes.c_uint),
        ]

    def __init__(self, index):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        assert self.lib.nvmlInit_v2() == 0
        self.dev = ctypes.c_void_p()
        assert self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.dev)) == 0

    def used(self):
        n = ctypes.c_uint(64)
        procs = (self.Proc * 64)()
        rc = self.lib.nvmlDeviceGetComputeRunningProcesses_v3(self.dev, ctypes.byref(n), procs)
        if rc != 0:
            return None
        for p in procs[: n.value]:
            if p.pid == os.getpid():
                return p.used
        return 0


def limits(cuda):
    out = {}
    for name, which in [
        ("stack", CU_LIMIT_STACK_SIZE),
        ("printf_fifo", CU_LIMIT_PRINTF_FIFO_SIZE),
        ("malloc_heap", CU_LIMIT_MALLOC_HEAP_SIZE),
    ]:
        v = ctypes.c_size_t()
        out[name] = v.value if cuda.cuCtxGetLimit(ctypes.byref(v), which) == 0 else None
    return out


def main():
    local = int(os.environ.get("LOCAL_RANK", "0"))
    nvml = Nvml(local)
    cuda = ctypes.CDLL("libcuda.so.1")
    steps = []

    def step(name):
        torch.cuda.synchronize()
        steps.append(
            {
                "step": name,
                "nvml_used": nvml.used(),
                "torch_reserved": torch.cuda.memory_reserved(),
                "limits": limits(cuda),
            }
        )
        print(json.dumps(steps[-1]), flush=True)

    torch.cuda.set_device(local)
    torch.zeros(1, device="cuda")
    step("context and one tensor")
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    step("init_process_group")
    t = torch.ones(64 << 20, device="cuda")
    step("64 Mi floats")
    dist.all_reduce(t)
    step("all_reduce")
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")
    c = a @ b
    step("fp32 matmul")
    h = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    d = h @ h
    step("bf16 matmul")
    conv = nn.Conv2d(64, 128, 3, padding=1).cuda()
    x = torch.randn(32, 64, 128, 128, device="cuda", requires_grad=True)
    conv(x).sum().backward()
    step("conv forward and backward")
    try:
        import cupy

        cupy.cuda.set_allocator(None)  # CuPy's own pool off: plain cudaMalloc per array
        small = cupy.RawKernel(
            r'extern "C" __global__ void small(float* p) { p[threadIdx.x] += 1.0f; }', "small"
        )
        buf = cupy.zeros(1024, dtype=cupy.float32)
        step("cupy array")
        small((1,), (1024,), (buf,))
        step("a new small kernel (module load)")
        big = cupy.RawKernel(
            r'''extern "C" __global__ void big(float* p, int k) {
                volatile float local[8192];
                for (int i = 0; i < 8192; i++) local[i] = p[(i + k) & 1023];
                p[threadIdx.x] = local[(threadIdx.x * 7 + k) & 8191];
            }''',
            "big",
        )
        big((132,), (1024,), (buf, cupy.int32(3)))
        step("a kernel with 32 KiB of local memory a thread")
    except Exception as e:  # CuPy missing or refused: the torch steps stand alone
        steps.append({"step": "cupy", "error": repr(e)})
    props = torch.cuda.get_device_properties(local)
    result = {
        "pid": os.getpid(),
        "device": torch.cuda.get_device_name(local),
        "sm_count": props.multi_processor_count,
        "max_threads_per_sm": getattr(props, "max_threads_per_multi_processor", None),
        "checksum": float(c[0, 0] + d[0, 0].float() + t[0]),
        "steps": steps,
    }
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
