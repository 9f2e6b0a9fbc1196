"""Allocations on autograd engine threads (tests/pyframes.rs): a fake libtorch_cpu.so
(tests/c/fake_torch_cpu.c, its path the first argument) runs a thread named as PyTorch names its
engine threads, then one of another name, each allocating while an `MmBackward0` node is
current (twice), while an `AccumulateGrad` is, and while none is. Prints `uses N` after each:
the nodes' use counts (11 when every reference the recorder took was given back)."""
import ctypes
import sys

from fake_driver import alloc

torch_cpu = ctypes.CDLL(sys.argv[1])
ptr = ctypes.c_uint64()
alloc(ctypes.byref(ptr), 4096)
print("uses", torch_cpu.fake_backward(b"pt_autograd_0", 1 << 20), flush=True)
print("uses", torch_cpu.fake_backward(b"pt_worker", 5 << 20), flush=True)
