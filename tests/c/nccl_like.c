/*
 * A library that allocates device memory itself, as NCCL does for its buffers (tests/pyframes.rs
 * builds it as libnccl.so.2): it looks the driver's cuMemAlloc_v2 up and calls it, past the
 * program's allocator. `nccl_like_alloc(n)` returns the call's result.
 */
#include <dlfcn.h>
#include <stddef.h>

typedef int (*alloc_fn)(unsigned long long *, size_t);

int nccl_like_alloc(size_t n) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    alloc_fn alloc = cuda ? (alloc_fn)dlsym(cuda, "cuMemAlloc_v2") : NULL;
    unsigned long long p;
    return alloc ? alloc(&p, n) : -1;
}
