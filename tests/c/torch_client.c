/* A PyTorch-shaped program for the tracker tests: loads the fake libc10_cuda.so named on the
 * command line (as `import torch` loads the real one), initializes its allocator, then makes
 * tensors through it: three allocations on two streams and a graph pool, their frees (the
 * second one's completion deferred past the third's, as record_stream defers it), one refused
 * allocation, one expandable map/unmap pair, and a last tensor whose free is requested and
 * never completed before the program exits. It sets a memory fraction of 0.5 before its first
 * tensor and 0.25 after the refused one, then empties the cache. Prints each tensor's address
 * and what the allocator saw of the fraction and the cache. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef unsigned long long CUdeviceptr;

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: torch_client LIBC10_CUDA\n"); return 2; }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    void (*init)(void) = (void (*)(void))dlsym(h, "fake_torch_init");
    CUdeviceptr (*alloc)(unsigned long, unsigned long, unsigned long, unsigned long) =
        (CUdeviceptr (*)(unsigned long, unsigned long, unsigned long, unsigned long))dlsym(
            h, "fake_torch_malloc");
    void (*release)(CUdeviceptr, unsigned long, unsigned long) =
        (void (*)(CUdeviceptr, unsigned long, unsigned long))dlsym(h, "fake_torch_free");
    void (*release_later)(CUdeviceptr, unsigned long, unsigned long) =
        (void (*)(CUdeviceptr, unsigned long, unsigned long))dlsym(h, "fake_torch_free_later");
    void (*complete)(CUdeviceptr, unsigned long, unsigned long) =
        (void (*)(CUdeviceptr, unsigned long, unsigned long))dlsym(h, "fake_torch_complete_free");
    void (*map_unmap)(unsigned long, unsigned long) =
        (void (*)(unsigned long, unsigned long))dlsym(h, "fake_torch_map_unmap");
    void (*set_fraction)(double) = (void (*)(double))dlsym(h, "fake_torch_set_fraction");
    void (*empty_cache)(void) = (void (*)(void))dlsym(h, "fake_torch_empty_cache");
    void (*limits)(double *, int *) = (void (*)(double *, int *))dlsym(h, "fake_torch_limits");
    if (!init || !alloc || !release || !release_later || !complete || !map_unmap ||
        !set_fraction || !empty_cache || !limits) {
        fprintf(stderr, "not a fake c10\n");
        return 1;
    }
    init();
    set_fraction(0.5);
    CUdeviceptr a = alloc(1000, 0, 0, 0);
    CUdeviceptr b = alloc(3u << 20, 0x77, 0, 0);
    CUdeviceptr c = alloc(4096, 0, 1, 0);
    alloc(1ul << 50, 0, 0, 0);
    set_fraction(0.25);
    release(a, 1000, 0);
    release_later(b, 3u << 20, 0x77);
    release(c, 4096, 0);
    complete(b, 3u << 20, 0x77);
    map_unmap(0x7000000000ul, 20u << 20);
    empty_cache();
    CUdeviceptr d = alloc(512, 0, 0, 0);
    release_later(d, 512, 0);
    printf("tensors %#llx %#llx %#llx %#llx\n", a, b, c, d);
    double f = 0;
    int empties = 0;
    limits(&f, &empties);
    printf("allocator fraction %g empty_caches %d\n", f, empties);
    return 0;
}
