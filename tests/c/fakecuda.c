/*
 * A fake libcuda.so.1 for the recorder's tests: the exported names and ABIs of the real driver's
 * memory functions, over a fake device address space. Device memory is never touched, only
 * accounted: FAKECUDA_CAPACITY (bytes, default 1 TiB) bounds the live total, and a request
 * beyond it returns CUDA_ERROR_OUT_OF_MEMORY. Host (pinned) memory is real malloc'ed memory.
 * The first primary-context retain on a device takes FAKECUDA_CONTEXT_BYTES (default 0) more,
 * which no allocation shows; `fakecuda_process_bytes` is what the fake NVML (fakenvml.c) counts.
 *
 * cuGetProcAddress[_v2] behave as driver 580 does (docs/interposition.md §1): the
 * newest versioned symbol at or before the requested version, the _ptsz variant for flag 2,
 * CUDA_SUCCESS with a NULL pointer for unknown names, and each returned pointer is the exact
 * address of the exported symbol of that name.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long u64;

enum {
    OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_FOUND = 500, NOT_READY = 600, NOT_SUPPORTED = 801
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static u64 capacity, used;
static u64 next_va = 0x7f0000000000ULL;
static u64 next_handle = 0x1000;

/* Live objects: address or handle -> size, open addressing. */
#define SLOTS (1 << 20)
static u64 *keys, *sizes;

static void init_once(void) {
    if (keys) return;
    keys = calloc(SLOTS, sizeof(u64));
    sizes = calloc(SLOTS, sizeof(u64));
    const char *c = getenv("FAKECUDA_CAPACITY");
    capacity = c ? strtoull(c, NULL, 0) : (1ULL << 40);
}

/* Key 1 marks a removed entry: lookups probe past it, inserts reuse it. */
static u64 *slot_of(u64 key, int insert) {
    u64 i = (key * 0x9E3779B97F4A7C15ULL) >> 44;
    u64 *reuse = NULL;
    for (;;) {
        if (keys[i] == key) return &sizes[i];
        if (keys[i] == 1 && !reuse) reuse = &keys[i];
        if (keys[i] == 0) {
            if (!insert) return NULL;
            u64 *k = reuse ? reuse : &keys[i];
            *k = key;
            return &sizes[k - keys];
        }
        i = (i + 1) & (SLOTS - 1);
    }
}

static void remove_key(u64 key) {
    u64 i = (key * 0x9E3779B97F4A7C15ULL) >> 44;
    for (;;) {
        if (keys[i] == key) { keys[i] = 1; sizes[i] = 0; return; }
        if (keys[i] == 0) return;
        i = (i + 1) & (SLOTS - 1);
    }
}

/* Takes `size` bytes of capacity; gives a fresh address (or handle) for it. */
static CUresult take(u64 size, u64 *out, int handle) {
    pthread_mutex_lock(&mu);
    init_once();
    if (size == 0) { pthread_mutex_unlock(&mu); return INVALID_VALUE; }
    if (used + size > capacity) { pthread_mutex_unlock(&mu); return OUT_OF_MEMORY; }
    used += size;
    u64 key;
    if (handle) key = next_handle++;
    else { key = next_va; next_va += (size + 0xfff) & ~0xfffULL; }
    *slot_of(key, 1) = size;
    *out = key;
    pthread_mutex_unlock(&mu);
    return OK;
}

static CUresult give(u64 key) {
    pthread_mutex_lock(&mu);
    init_once();
    u64 *s = key > 1 ? slot_of(key, 0) : NULL;
    if (!s) { pthread_mutex_unlock(&mu); return INVALID_VALUE; }
    used -= *s;
    remove_key(key);
    pthread_mutex_unlock(&mu);
    return OK;
}

/* ---- init, devices, contexts ---- */
CUresult cuInit(unsigned flags) { (void)flags; return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
CUresult cuDeviceGet(int *dev, int ordinal) { if (ordinal < 0 || ordinal > 1) return INVALID_VALUE; *dev = ordinal; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = 2; return OK; }
CUresult cuDeviceGetName(char *name, int len, int dev) { snprintf(name, len, "Fake GPU %d", dev); return OK; }
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { (void)dev; pthread_mutex_lock(&mu); init_once(); *bytes = capacity; pthread_mutex_unlock(&mu); return OK; }
CUresult cuDeviceGetUuid(unsigned char *uuid, int dev) { memset(uuid, 0xa0 + dev, 16); return OK; }
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) { (void)dev; *v = attr == 75 ? 9 : 0; return OK; }
static __thread void *current_ctx;
static u64 context_bytes;
static int context_made[2];
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    pthread_mutex_lock(&mu);
    if (dev >= 0 && dev < 2 && !context_made[dev]) {
        const char *c = getenv("FAKECUDA_CONTEXT_BYTES");
        context_made[dev] = 1;
        context_bytes += c ? strtoull(c, NULL, 0) : 0;
    }
    pthread_mutex_unlock(&mu);
    *ctx = (void *)(uintptr_t)(0xc0000 + dev * 0x100);
    return OK;
}
u64 fakecuda_process_bytes(void) {
    pthread_mutex_lock(&mu); u64 n = used + context_bytes; pthread_mutex_unlock(&mu); return n;
}
CUresult cuCtxCreate_v2(void **ctx, unsigned flags, int dev) { (void)flags; *ctx = (void *)(uintptr_t)(0xd0000 + dev * 0x100); current_ctx = *ctx; return OK; }
CUresult cuCtxSetCurrent(void *ctx) { current_ctx = ctx; return OK; }
/* What cudart does through the driver's private export table: a current context the public
 * context calls never saw. */
void fakecuda_private_set_current(int dev) { current_ctx = (void *)(uintptr_t)(0xc0000 + dev * 0x100); }
CUresult cuCtxGetCurrent(void **ctx) { *ctx = current_ctx; return OK; }
CUresult cuCtxGetDevice(int *dev) { if (!current_ctx) return 201; *dev = ((uintptr_t)current_ctx >> 8) & 0xf; return OK; }
CUresult cuCtxPushCurrent_v2(void *ctx) { current_ctx = ctx; return OK; }
CUresult cuCtxPopCurrent_v2(void **ctx) { if (ctx) *ctx = current_ctx; current_ctx = NULL; return OK; }
CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
    pthread_mutex_lock(&mu); init_once(); *free_ = capacity - used; *total = capacity; pthread_mutex_unlock(&mu); return OK;
}
CUresult cuGetExportTable(const void **t, const void *id) { (void)t; (void)id; return NOT_FOUND; }

/* ---- device memory ---- */
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return take(n, p, 0); }
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned elem) {
    (void)elem; size_t pt = (w + 511) & ~(size_t)511; CUresult r = take(pt * h, p, 0); if (r == OK) *pitch = pt; return r;
}
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags) { (void)flags; return take(n, p, 0); }
CUresult cuMemFree_v2(CUdeviceptr p) { return give(p); }

/* ---- stream-ordered ---- */
static int ptsz_calls;
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *s) { (void)s; return take(n, p, 0); }
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, void *s) { (void)s; __atomic_add_fetch(&ptsz_calls, 1, __ATOMIC_RELAXED); return take(n, p, 0); }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, void *pool, void *s) { (void)s; if (!pool) return INVALID_VALUE; return take(n, p, 0); }
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, void *pool, void *s) { (void)s; __atomic_add_fetch(&ptsz_calls, 1, __ATOMIC_RELAXED); if (!pool) return INVALID_VALUE; return take(n, p, 0); }
CUresult cuMemFreeAsync(CUdeviceptr p, void *s) { (void)s; return give(p); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, void *s) { (void)s; __atomic_add_fetch(&ptsz_calls, 1, __ATOMIC_RELAXED); return give(p); }
CUresult cuMemPoolCreate(void **pool, const void *props) { (void)props; pthread_mutex_lock(&mu); *pool = (void *)(uintptr_t)(0x50000 + next_handle++); pthread_mutex_unlock(&mu); return OK; }
CUresult cuMemPoolDestroy(void *pool) { return pool ? OK : INVALID_VALUE; }
CUresult cuMemPoolTrimTo(void *pool, size_t keep) { (void)keep; return pool ? OK : INVALID_VALUE; }
CUresult cuMemPoolImportPointer(CUdeviceptr *p, void *pool, void *data) { (void)pool; (void)data; *p = 0x6e0000000000ULL; return OK; }

/* ---- ordering: stream 0x5009 and event 0xe9 are never done (queries answer NOT_READY) ---- */
static CUresult done_stream(void *s) { return (uintptr_t)s == 0x5009 ? NOT_READY : OK; }
static CUresult done_event(void *e) { return (uintptr_t)e == 0xe9 ? NOT_READY : OK; }
CUresult cuStreamSynchronize(void *s) { (void)s; return OK; }
CUresult cuStreamSynchronize_ptsz(void *s) { (void)s; __atomic_add_fetch(&ptsz_calls, 1, __ATOMIC_RELAXED); return OK; }
CUresult cuStreamQuery(void *s) { return done_stream(s); }
CUresult cuStreamQuery_ptsz(void *s) { __atomic_add_fetch(&ptsz_calls, 1, __ATOMIC_RELAXED); return done_stream(s); }
CUresult cuCtxSynchronize(void) { return OK; }
CUresult cuCtxSynchronize_v2(void *ctx) { (void)ctx; return OK; }
CUresult cuEventSynchronize(void *e) { return e ? OK : INVALID_VALUE; }
CUresult cuEventQuery(void *e) { return done_event(e); }
CUresult cuEventRecord(void *e, void *s) { (void)s; return e ? OK : INVALID_VALUE; }
CUresult cuEventRecord_ptsz(void *e, void *s) { (void)s; __atomic_add_fetch(&ptsz_calls, 1, __ATOMIC_RELAXED); return e ? OK : INVALID_VALUE; }
CUresult cuEventRecordWithFlags(void *e, void *s, unsigned f) { (void)s; (void)f; return e ? OK : INVALID_VALUE; }
CUresult cuEventRecordWithFlags_ptsz(void *e, void *s, unsigned f) { (void)s; (void)f; __atomic_add_fetch(&ptsz_calls, 1, __ATOMIC_RELAXED); return e ? OK : INVALID_VALUE; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) { (void)s; (void)f; return e ? OK : INVALID_VALUE; }
CUresult cuStreamWaitEvent_ptsz(void *s, void *e, unsigned f) { (void)s; (void)f; __atomic_add_fetch(&ptsz_calls, 1, __ATOMIC_RELAXED); return e ? OK : INVALID_VALUE; }

/* ---- virtual memory management ---- */
CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, u64 flags) {
    (void)align; (void)addr; (void)flags;
    pthread_mutex_lock(&mu); *p = next_va; next_va += (n + 0x1fffff) & ~0x1fffffULL; pthread_mutex_unlock(&mu); return OK;
}
CUresult cuMemAddressFree(CUdeviceptr p, size_t n) { (void)n; return p ? OK : INVALID_VALUE; }
CUresult cuMemCreate(u64 *h, size_t n, const void *prop, u64 flags) { (void)prop; if (flags) return INVALID_VALUE; return take(n, h, 1); }
CUresult cuMemRelease(u64 h) { return give(h); }
CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, u64 h, u64 flags) { (void)p; (void)n; (void)off; (void)flags; return h ? OK : INVALID_VALUE; }
CUresult cuMemUnmap(CUdeviceptr p, size_t n) { (void)n; return p ? OK : INVALID_VALUE; }
CUresult cuMemImportFromShareableHandle(u64 *h, void *os, int type) { (void)os; (void)type; *h = 0x7777; return OK; }
CUresult cuMemRetainAllocationHandle(u64 *h, void *addr) { (void)addr; *h = 0x8888; return OK; }
CUresult cuMemMapArrayAsync(void *list, unsigned n, void *s) { (void)list; (void)n; (void)s; return OK; }
CUresult cuMemMapArrayAsync_ptsz(void *list, unsigned n, void *s) { (void)list; (void)n; (void)s; __atomic_add_fetch(&ptsz_calls, 1, __ATOMIC_RELAXED); return OK; }
CUresult cuMulticastCreate(u64 *h, const void *prop) { (void)prop; *h = 0x9999; return OK; }

/* ---- host memory ---- */
CUresult cuMemAllocHost_v2(void **p, size_t n) { *p = malloc(n); return *p ? OK : OUT_OF_MEMORY; }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) { (void)flags; *p = malloc(n); return *p ? OK : OUT_OF_MEMORY; }
CUresult cuMemFreeHost(void *p) { free(p); return OK; }
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) { (void)n; (void)flags; return p ? OK : INVALID_VALUE; }
CUresult cuMemHostUnregister(void *p) { return p ? OK : INVALID_VALUE; }

/* ---- arrays, imports, graphs ---- */
CUresult cuArrayCreate_v2(void **a, const void *d) { (void)d; *a = (void *)(uintptr_t)(0xa0000 + next_handle++); return OK; }
CUresult cuArray3DCreate_v2(void **a, const void *d) { (void)d; *a = (void *)(uintptr_t)(0xa0000 + next_handle++); return OK; }
CUresult cuMipmappedArrayCreate(void **a, const void *d, unsigned levels) { (void)d; (void)levels; *a = (void *)(uintptr_t)(0xb0000 + next_handle++); return OK; }
CUresult cuArrayDestroy(void *a) { return a ? OK : INVALID_VALUE; }
CUresult cuMipmappedArrayDestroy(void *a) { return a ? OK : INVALID_VALUE; }
typedef struct { char reserved[64]; } CUipcMemHandle;
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned flags) { (void)flags; *p = 0x6f0000000000ULL + (unsigned char)h.reserved[0]; return OK; }
CUresult cuIpcCloseMemHandle(CUdeviceptr p) { return p ? OK : INVALID_VALUE; }
typedef struct { u64 offset, size; unsigned flags; unsigned reserved[16]; } ExtBufDesc;
CUresult cuExternalMemoryGetMappedBuffer(CUdeviceptr *p, void *ext, const ExtBufDesc *d) { (void)ext; *p = 0x6d0000000000ULL + d->offset; return OK; }
CUresult cuDestroyExternalMemory(void *ext) { return ext ? OK : INVALID_VALUE; }
typedef struct { unsigned char pool_props[88]; const void *access; size_t count; size_t bytesize; CUdeviceptr dptr; } AllocNodeParams;
CUresult cuGraphAddMemAllocNode(void **node, void *g, const void *deps, size_t n, AllocNodeParams *p) {
    (void)g; (void)deps; (void)n; *node = (void *)0xe1; p->dptr = 0x6c0000000000ULL; return OK;
}
CUresult cuGraphAddMemFreeNode(void **node, void *g, const void *deps, size_t n, CUdeviceptr p) { (void)g; (void)deps; (void)n; (void)p; *node = (void *)0xe2; return OK; }
CUresult cuDeviceGraphMemTrim(int dev) { (void)dev; return OK; }

/* ---- entry points ---- */
CUresult cuGetProcAddress(const char *, void **, int, u64);
CUresult cuGetProcAddress_v2(const char *, void **, int, u64, int *);

struct version { const char *base; int min_version; const char *name; const char *ptsz; void *fn; };
#define V(base, ver, fn) { base, ver, #fn, NULL, (void *)fn }
#define P(base, ver, fn) { base, ver, #fn, #fn "_ptsz", (void *)fn }
static const struct version versions[] = {
    V("cuInit", 2000, cuInit), V("cuDriverGetVersion", 2020, cuDriverGetVersion),
    V("cuDeviceGet", 2000, cuDeviceGet), V("cuDeviceGetCount", 2000, cuDeviceGetCount),
    V("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain), V("cuCtxCreate", 3020, cuCtxCreate_v2),
    V("cuCtxSetCurrent", 4000, cuCtxSetCurrent), V("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    V("cuCtxGetDevice", 2000, cuCtxGetDevice), V("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    V("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2), V("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    V("cuGetExportTable", 3000, cuGetExportTable),
    V("cuGetProcAddress", 11030, cuGetProcAddress), V("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    V("cuMemAlloc", 3020, cuMemAlloc_v2), V("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    V("cuMemAllocManaged", 6000, cuMemAllocManaged), V("cuMemFree", 3020, cuMemFree_v2),
    P("cuMemAllocAsync", 11020, cuMemAllocAsync), P("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    P("cuMemFreeAsync", 11020, cuMemFreeAsync), V("cuMemPoolCreate", 11020, cuMemPoolCreate),
    V("cuMemPoolDestroy", 11020, cuMemPoolDestroy), V("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    V("cuMemPoolImportPointer", 11020, cuMemPoolImportPointer),
    V("cuMemAddressReserve", 10020, cuMemAddressReserve), V("cuMemAddressFree", 10020, cuMemAddressFree),
    V("cuMemCreate", 10020, cuMemCreate), V("cuMemRelease", 10020, cuMemRelease), V("cuMemMap", 10020, cuMemMap),
    V("cuMemUnmap", 10020, cuMemUnmap), V("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    V("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    P("cuMemMapArrayAsync", 11010, cuMemMapArrayAsync), V("cuMulticastCreate", 12010, cuMulticastCreate),
    V("cuMemAllocHost", 3020, cuMemAllocHost_v2), V("cuMemHostAlloc", 2020, cuMemHostAlloc),
    V("cuMemFreeHost", 2000, cuMemFreeHost), V("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    V("cuMemHostUnregister", 4000, cuMemHostUnregister),
    V("cuArrayCreate", 3020, cuArrayCreate_v2), V("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    V("cuMipmappedArrayCreate", 5000, cuMipmappedArrayCreate), V("cuArrayDestroy", 2000, cuArrayDestroy),
    V("cuMipmappedArrayDestroy", 5000, cuMipmappedArrayDestroy),
    V("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2), V("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    V("cuExternalMemoryGetMappedBuffer", 10000, cuExternalMemoryGetMappedBuffer),
    V("cuDestroyExternalMemory", 10000, cuDestroyExternalMemory),
    V("cuGraphAddMemAllocNode", 11040, cuGraphAddMemAllocNode), V("cuGraphAddMemFreeNode", 11040, cuGraphAddMemFreeNode),
    V("cuDeviceGraphMemTrim", 11040, cuDeviceGraphMemTrim),
    P("cuStreamSynchronize", 2000, cuStreamSynchronize), P("cuStreamQuery", 2000, cuStreamQuery),
    V("cuCtxSynchronize", 2000, cuCtxSynchronize), V("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    V("cuEventSynchronize", 2000, cuEventSynchronize),
    V("cuEventQuery", 2000, cuEventQuery), P("cuEventRecord", 2000, cuEventRecord),
    P("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags), P("cuStreamWaitEvent", 3020, cuStreamWaitEvent),
};
static void *ptsz_fns[][2] = {
    { (void *)cuMemAllocAsync, (void *)cuMemAllocAsync_ptsz },
    { (void *)cuMemAllocFromPoolAsync, (void *)cuMemAllocFromPoolAsync_ptsz },
    { (void *)cuMemFreeAsync, (void *)cuMemFreeAsync_ptsz },
    { (void *)cuMemMapArrayAsync, (void *)cuMemMapArrayAsync_ptsz },
    { (void *)cuStreamSynchronize, (void *)cuStreamSynchronize_ptsz },
    { (void *)cuStreamQuery, (void *)cuStreamQuery_ptsz },
    { (void *)cuEventRecord, (void *)cuEventRecord_ptsz },
    { (void *)cuEventRecordWithFlags, (void *)cuEventRecordWithFlags_ptsz },
    { (void *)cuStreamWaitEvent, (void *)cuStreamWaitEvent_ptsz },
};

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, u64 flags, int *status) {
    if (version > 13000) return INVALID_VALUE;
    const struct version *best = NULL;
    for (size_t i = 0; i < sizeof versions / sizeof *versions; i++)
        if (!strcmp(versions[i].base, symbol) && versions[i].min_version <= version &&
            (!best || versions[i].min_version > best->min_version))
            best = &versions[i];
    if (!best) { *pfn = NULL; if (status) *status = 1; return OK; }
    void *fn = best->fn;
    if ((flags & 2) && best->ptsz)
        for (size_t i = 0; i < sizeof ptsz_fns / sizeof *ptsz_fns; i++)
            if (ptsz_fns[i][0] == fn) fn = ptsz_fns[i][1];
    *pfn = fn;
    if (status) *status = 0;
    return OK;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, u64 flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

/* For the tests: how many _ptsz entry points ran. */
int fakecuda_ptsz_calls(void) { return ptsz_calls; }
