/*
 * A plain second interposer for the recorder's coexistence tests (tests/faults.rs): it exports
 * cuMemAlloc_v2 and cuMemFree_v2 only, finds the next definition with dlsym(RTLD_NEXT, name),
 * and prints "plain: A allocations, F frees" on stderr at exit. Programs that reach the driver
 * through dlsym or cuGetProcAddress bypass it (as they bypass any plain symbol interposer);
 * programs linked with -lcuda call it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static atomic_int allocations, frees;

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    static CUresult (*f)(CUdeviceptr *, size_t);
    if (!f) f = (CUresult (*)(CUdeviceptr *, size_t))dlsym(RTLD_NEXT, "cuMemAlloc_v2");
    atomic_fetch_add(&allocations, 1);
    return f(p, n);
}

CUresult cuMemFree_v2(CUdeviceptr p) {
    static CUresult (*f)(CUdeviceptr);
    if (!f) f = (CUresult (*)(CUdeviceptr))dlsym(RTLD_NEXT, "cuMemFree_v2");
    atomic_fetch_add(&frees, 1);
    return f(p);
}

__attribute__((destructor)) static void report(void) {
    fprintf(stderr, "plain: %d allocations, %d frees\n", atomic_load(&allocations), atomic_load(&frees));
}
