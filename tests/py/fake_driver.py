"""The fake driver (tests/c/fakecuda.c), reached through ctypes, with a context made current:
what tests/py/*.py allocate through."""
import ctypes

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuInit(0)
ctx = ctypes.c_void_p()
cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
cuda.cuCtxSetCurrent(ctx)
alloc = cuda.cuMemAlloc_v2
