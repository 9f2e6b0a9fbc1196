/*
 * The smallest fake libcuda.so.1 for the overhead benchmark: allocation hands out the next
 * address, free does nothing. A direct call costs a few nanoseconds, so what the recorder adds
 * stands out (the test suite's tests/c/fakecuda.c does real bookkeeping and is slower).
 */
typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static CUdeviceptr next = 0x7f0000000000ULL;

CUresult cuInit(unsigned flags) { (void)flags; return 0; }

CUresult cuMemAlloc_v2(CUdeviceptr *p, unsigned long n) {
    *p = next;
    next += (n + 511) & ~511ULL;
    return 0;
}

CUresult cuMemFree_v2(CUdeviceptr p) { (void)p; return 0; }

/* Ordering calls (formats/SPEC.md §4.4): the stream is done, the record succeeds. */
CUresult cuStreamQuery(void *stream) { (void)stream; return 0; }

CUresult cuEventRecord(void *event, void *stream) { (void)event; (void)stream; return 0; }

/* One context on device 0, current on every thread (the recorder asks on every call). */
CUresult cuCtxGetCurrent(void **ctx) { *ctx = (void *)0x1000; return 0; }

CUresult cuCtxGetDevice(int *device) { *device = 0; return 0; }
