/*
 * A second interposer shaped like HAMi-core's libvgpu.so (Project-HAMi/HAMi-core,
 * src/libvgpu.c and src/cuda/hook.c), for the recorder's coexistence tests (tests/faults.rs):
 *   - it exports dlsym and takes the "real" one with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
 *   - its dlsym answers the names it hooks (cuMemAlloc_v2, cuMemFree_v2, cuGetProcAddress,
 *     cuGetProcAddress_v2) with its own functions and forwards everything else;
 *   - its hooks call the driver's functions, which it looks up with the real dlsym in its own
 *     dlopen("libcuda.so.1") handle;
 *   - its cuGetProcAddress[_v2] answer hooked names from its own table without asking the
 *     driver, and forward the others;
 *   - it also exports its hooks under the driver's names (for programs linked with -lcuda).
 * At exit it prints "hami: L lookups, A allocations, F frees" on stderr: the cu* names its dlsym
 * was asked for, and the calls its allocation hooks forwarded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static void *(*real_dlsym)(void *, const char *);
static pthread_once_t dlsym_once = PTHREAD_ONCE_INIT;
static atomic_int lookups, allocations, frees;

static void init_dlsym(void) { real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"); }

static void *driver(const char *name) {
    static void *lib;
    if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW);
    return lib ? real_dlsym(lib, name) : NULL;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    static CUresult (*f)(CUdeviceptr *, size_t);
    pthread_once(&dlsym_once, init_dlsym);
    if (!f) f = driver("cuMemAlloc_v2");
    atomic_fetch_add(&allocations, 1);
    return f(p, n);
}

CUresult cuMemFree_v2(CUdeviceptr p) {
    static CUresult (*f)(CUdeviceptr);
    pthread_once(&dlsym_once, init_dlsym);
    if (!f) f = driver("cuMemFree_v2");
    atomic_fetch_add(&frees, 1);
    return f(p);
}

CUresult cuGetProcAddress_v2(const char *, void **, int, unsigned long long, int *);
CUresult cuGetProcAddress(const char *, void **, int, unsigned long long);

/* Its own function for a base name at a version, as HAMi's find_symbols_in_table_by_cudaversion. */
static void *own(const char *symbol, int version) {
    if (!strcmp(symbol, "cuGetProcAddress")) return version >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
    if (!strcmp(symbol, "cuMemAlloc") && version >= 3020) return (void *)cuMemAlloc_v2;
    if (!strcmp(symbol, "cuMemFree") && version >= 3020) return (void *)cuMemFree_v2;
    return NULL;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
    static CUresult (*f)(const char *, void **, int, unsigned long long, int *);
    pthread_once(&dlsym_once, init_dlsym);
    if ((*pfn = own(symbol, version))) {
        if (status) *status = 0;
        return 0;
    }
    if (!f) f = driver("cuGetProcAddress_v2");
    return f(symbol, pfn, version, flags, status);
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
    static CUresult (*f)(const char *, void **, int, unsigned long long);
    pthread_once(&dlsym_once, init_dlsym);
    if ((*pfn = own(symbol, version))) return 0;
    if (!f) f = driver("cuGetProcAddress");
    return f(symbol, pfn, version, flags);
}

void *dlsym(void *handle, const char *symbol) {
    pthread_once(&dlsym_once, init_dlsym);
    if (handle == RTLD_NEXT) return real_dlsym(RTLD_NEXT, symbol);
    if (symbol[0] == 'c' && symbol[1] == 'u') {
        atomic_fetch_add(&lookups, 1);
        if (!strcmp(symbol, "cuMemAlloc_v2")) return (void *)cuMemAlloc_v2;
        if (!strcmp(symbol, "cuMemFree_v2")) return (void *)cuMemFree_v2;
        if (!strcmp(symbol, "cuGetProcAddress_v2")) return (void *)cuGetProcAddress_v2;
        if (!strcmp(symbol, "cuGetProcAddress")) return (void *)cuGetProcAddress;
    }
    return real_dlsym(handle, symbol);
}

__attribute__((destructor)) static void report(void) {
    fprintf(stderr, "hami: %d lookups, %d allocations, %d frees\n", atomic_load(&lookups),
            atomic_load(&allocations), atomic_load(&frees));
}
