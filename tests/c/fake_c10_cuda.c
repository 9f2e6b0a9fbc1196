/* A libc10_cuda.so shaped like PyTorch 2.11's, for the recorder's tracker tests: it exports the
 * allocator pointer `c10::cuda::CUDACachingAllocator::allocator` (mangled), whose object has a
 * vtable with the type_info of the native caching allocator before it, `initialized()` in slot
 * 6 and `attachAllocatorTraceTracker(std::function)` in slot 44 (docs/torch-tracker.md). Like the
 * real one it copies the tracker it is given (libstdc++ clone), and calls every attached tracker
 * with a 136-byte TraceEntry (action 0, device 4, addr 8, stream 32, size 40, mempool 48) after
 * each action. Its "allocator" takes one driver segment per tensor, rounded to 2 MiB, through
 * the fake driver. Like 2.11's it has `emptyCache(MempoolId_t)` in slot 7, and
 * `getMemoryFraction(DeviceIndex)` / `setMemoryFraction(double, DeviceIndex)` in slots 17 / 18,
 * which its exported helpers call through the vtable, as PyTorch's inline header functions do. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

struct std_function {
    void *storage[2];
    int (*manager)(void *dest, const void *src, int op);
    void (*invoker)(const void *functor, const void *entry);
};

struct type_info { const void *vtable; const char *name; };
static const struct type_info native_type = {
    0, "N3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE"};

struct allocator {
    void **vtable;
    int initialized;
    int trackers;
    struct std_function tracker[4];
};

static int initialized(struct allocator *a) { return a->initialized; }

static double fraction = 1.0;
static int empty_caches;
static double get_fraction(struct allocator *a, signed char device) { (void)a; (void)device; return fraction; }
static void set_fraction(struct allocator *a, double f, signed char device) { (void)a; (void)device; fraction = f; }
static void empty_cache(struct allocator *a, unsigned long pool0, unsigned long pool1) {
    (void)a; (void)pool0; (void)pool1; empty_caches++;
}

static void attach(struct allocator *a, struct std_function *f) {
    if (a->trackers >= 4) return;
    struct std_function *t = &a->tracker[a->trackers++];
    f->manager(t->storage, f->storage, 2); /* __clone_functor */
    t->manager = f->manager;
    t->invoker = f->invoker;
}

static void *vtable_with_rtti[1 + 64];
static struct allocator the_allocator;

/* `std::atomic<CUDAAllocator*> c10::cuda::CUDACachingAllocator::allocator`. */
__attribute__((visibility("default"))) struct allocator *_ZN3c104cuda20CUDACachingAllocator9allocatorE;

static CUresult (*mem_alloc)(CUdeviceptr *, size_t);
static CUresult (*mem_free)(CUdeviceptr);

static void trace(int action, long addr, unsigned long size, unsigned long stream,
                  unsigned long pool0, unsigned long pool1) {
    unsigned char e[136];
    memset(e, 0, sizeof e);
    memcpy(e + 0, &action, 4);
    e[4] = 0;
    memcpy(e + 8, &addr, 8);
    memcpy(e + 32, &stream, 8);
    memcpy(e + 40, &size, 8);
    memcpy(e + 48, &pool0, 8);
    memcpy(e + 56, &pool1, 8);
    for (int i = 0; i < the_allocator.trackers; i++)
        the_allocator.tracker[i].invoker(the_allocator.tracker[i].storage, e);
}

/* Sets up the allocator as torch.cuda.init() does. */
void fake_torch_init(void) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) { fprintf(stderr, "no libcuda.so.1\n"); exit(1); }
    CUresult (*init)(unsigned) = (CUresult (*)(unsigned))dlsym(cuda, "cuInit");
    CUresult (*ctx_create)(void **, unsigned, int) =
        (CUresult (*)(void **, unsigned, int))dlsym(cuda, "cuCtxCreate_v2");
    void *ctx = 0;
    if (init(0) != 0 || ctx_create(&ctx, 0, 0) != 0) { fprintf(stderr, "no context\n"); exit(1); }
    mem_alloc = (CUresult (*)(CUdeviceptr *, size_t))dlsym(cuda, "cuMemAlloc_v2");
    mem_free = (CUresult (*)(CUdeviceptr))dlsym(cuda, "cuMemFree_v2");
    vtable_with_rtti[0] = (void *)&native_type;
    vtable_with_rtti[1 + 6] = (void *)initialized;
    vtable_with_rtti[1 + 44] = (void *)attach;
    vtable_with_rtti[1 + 7] = (void *)empty_cache;
    vtable_with_rtti[1 + 17] = (void *)get_fraction;
    vtable_with_rtti[1 + 18] = (void *)set_fraction;
    the_allocator.vtable = &vtable_with_rtti[1];
    the_allocator.initialized = 1;
    _ZN3c104cuda20CUDACachingAllocator9allocatorE = &the_allocator;
}

/* One tensor of `size` bytes on `stream` in memory pool (pool0, pool1): a fresh segment. */
CUdeviceptr fake_torch_malloc(unsigned long size, unsigned long stream, unsigned long pool0,
                              unsigned long pool1) {
    CUdeviceptr p = 0;
    unsigned long seg = (size + (2ul << 20) - 1) & ~((2ul << 20) - 1);
    if (mem_alloc(&p, seg) != 0) {
        trace(8, 1234, size, stream, pool0, pool1); /* OOM: addr_ = free bytes */
        return 0;
    }
    trace(3, (long)p, seg, stream, pool0, pool1);
    trace(0, (long)p, size, stream, pool0, pool1);
    return p;
}

/* Completes the free of a tensor and frees its segment. */
void fake_torch_complete_free(CUdeviceptr p, unsigned long size, unsigned long stream) {
    unsigned long seg = (size + (2ul << 20) - 1) & ~((2ul << 20) - 1);
    trace(2, (long)p, size, stream, 0, 0);
    mem_free(p);
    trace(4, (long)p, seg, stream, 0, 0);
}

/* Frees the tensor and its segment, as PyTorch's free() does a block with no uses on other
 * streams: the request, then at once its completion. */
void fake_torch_free(CUdeviceptr p, unsigned long size, unsigned long stream) {
    trace(1, (long)p, size, stream, 0, 0);
    fake_torch_complete_free(p, size, stream);
}

/* Requests the free of a tensor that has uses on other streams (record_stream): PyTorch
 * completes it later (fake_torch_complete_free), once their events have completed. */
void fake_torch_free_later(CUdeviceptr p, unsigned long size, unsigned long stream) {
    trace(1, (long)p, size, stream, 0, 0);
}

/* One entry of `action` for the trackers, nothing else (recorder/bench/tracker_overhead.c). */
void fake_torch_entry(int action, unsigned long addr, unsigned long size) {
    trace(action, (long)addr, size, 0, 0, 0);
}

/* An expandable segment's map and unmap (no driver call: the entries alone). */
void fake_torch_map_unmap(unsigned long addr, unsigned long size) {
    trace(5, (long)addr, size, 0, 0, 0);
    trace(6, (long)addr, size, 0, 0, 0);
}

/* `torch.cuda.set_per_process_memory_fraction(f)`: through the vtable. */
void fake_torch_set_fraction(double f) {
    ((void (*)(struct allocator *, double, signed char))the_allocator.vtable[18])(&the_allocator, f, 0);
}

/* `torch.cuda.empty_cache()`: through the vtable, for the default pools. */
void fake_torch_empty_cache(void) {
    ((void (*)(struct allocator *, unsigned long, unsigned long))the_allocator.vtable[7])(&the_allocator, 0, 0);
}

/* What the allocator itself saw: its fraction and how many times its cache was emptied. */
void fake_torch_limits(double *f, int *empties) { *f = fraction; *empties = empty_caches; }
