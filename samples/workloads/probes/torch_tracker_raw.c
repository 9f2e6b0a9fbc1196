/* Attaches a trace tracker to PyTorch's caching allocator the way the recorder does: without
 * PyTorch's headers, from the exported allocator pointer, a vtable slot and field offsets given
 * at run time, and a std::function built by hand (libstdc++ layout: two words of functor
 * storage, then the manager and the invoker pointers). Counts entries per action and keeps the
 * last entry of each action. Driven by torch_tracker_probe.py. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

struct std_function {
    void *storage[2];
    int (*manager)(void *dest, const void *src, int op);
    void (*invoker)(const void *functor, const void *entry);
};

struct last_entry {
    long action, device;
    unsigned long addr, size, stream, pool0, pool1;
};

static long off_action, off_device, off_addr, off_stream, off_size, off_pool;
static atomic_ulong counts[16], sizes[16], manager_ops[4];
static struct last_entry last[16];

/* libstdc++ _Manager_operation: 0 get type_info, 1 get functor pointer, 2 clone, 3 destroy. */
static int manager(void *dest, const void *src, int op) {
    if (op >= 0 && op < 4) atomic_fetch_add(&manager_ops[op], 1);
    switch (op) {
    case 0: *(void **)dest = 0; break;
    case 1: *(const void **)dest = src; break;
    case 2: memcpy(dest, src, 2 * sizeof(void *)); break;
    default: break;
    }
    return 0;
}

static void invoker(const void *functor, const void *entry) {
    (void)functor;
    const char *e = entry;
    long a = *(const int *)(e + off_action) & 15;
    unsigned long size = *(const unsigned long *)(e + off_size);
    atomic_fetch_add(&counts[a], 1);
    atomic_fetch_add(&sizes[a], size);
    struct last_entry *l = &last[a];
    l->action = a;
    l->device = off_device >= 0 ? *(const signed char *)(e + off_device) : -1;
    l->addr = *(const unsigned long *)(e + off_addr);
    l->size = size;
    l->stream = *(const unsigned long *)(e + off_stream);
    l->pool0 = off_pool >= 0 ? *(const unsigned long *)(e + off_pool) : 0;
    l->pool1 = off_pool >= 0 ? *(const unsigned long *)(e + off_pool + 8) : 0;
}

/* offs: action, device, addr, stream, size, mempool. Returns 0 when attached; writes the
 * allocator's dynamic type name (from the vtable's type_info) into type_name. */
int vt_attach(long slot, long slot_initialized, const long *offs, char *type_name, long n) {
    off_action = offs[0]; off_device = offs[1]; off_addr = offs[2];
    off_stream = offs[3]; off_size = offs[4]; off_pool = offs[5];
    void *lib = dlopen("libc10_cuda.so", RTLD_NOLOAD | RTLD_LAZY);
    if (!lib) return 1;
    void **sym = dlsym(lib, "_ZN3c104cuda20CUDACachingAllocator9allocatorE");
    if (!sym) return 2;
    void *alloc = atomic_load((_Atomic(void *) *)sym);
    if (!alloc) return 3;
    void **vtbl = *(void ***)alloc;
    const char *name = *(const char **)((char *)vtbl[-1] + sizeof(void *));
    strncpy(type_name, name, (size_t)n - 1);
    int (*initialized)(void *) = (int (*)(void *))vtbl[slot_initialized];
    if (!(initialized(alloc) & 1)) return 4;
    struct std_function f = {{0, 0}, manager, invoker};
    void (*attach)(void *, struct std_function *) = (void (*)(void *, struct std_function *))vtbl[slot];
    attach(alloc, &f);
    /* Itanium ABI: the caller destroys a by-value argument. */
    if (f.manager) f.manager(&f, &f, 3);
    return 0;
}

void vt_counts(unsigned long *out) {
    for (int i = 0; i < 16; i++) {
        out[i] = atomic_load(&counts[i]);
        out[16 + i] = atomic_load(&sizes[i]);
    }
    for (int i = 0; i < 4; i++) out[32 + i] = atomic_load(&manager_ops[i]);
}

void vt_last(long action, unsigned long *out) {
    struct last_entry *l = &last[action & 15];
    out[0] = (unsigned long)l->action; out[1] = (unsigned long)l->device; out[2] = l->addr;
    out[3] = l->size; out[4] = l->stream; out[5] = l->pool0; out[6] = l->pool1;
}
