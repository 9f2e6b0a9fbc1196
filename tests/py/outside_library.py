"""Allocates through the stream-ordered pool (a pass-through allocator's requests) and, from
one line, through a library named like NCCL that calls the driver itself (tests/pyframes.rs):
under the default `python` stacks that memory must still be named by its library."""
import ctypes
import sys

from fake_driver import cuda

nccl = ctypes.CDLL(sys.argv[1])
ptr = ctypes.c_uint64()
cuda.cuMemAllocAsync(ctypes.byref(ptr), ctypes.c_size_t(1 << 20), ctypes.c_void_p(0))
print("site", "<module>", sys._getframe().f_lineno + 1, flush=True)
assert nccl.nccl_like_alloc(ctypes.c_size_t(3 << 20)) == 0
