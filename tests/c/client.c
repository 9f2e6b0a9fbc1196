/*
 * A CUDA driver client for the recorder's tests. It reaches the (fake) driver the way real
 * programs do, chosen by argv[1]:
 *   linked  - calls the functions directly (build with -DLINKED and -lcuda)
 *   dlsym   - dlopen("libcuda.so.1") + dlsym of each versioned name (XLA style)
 *   gpa     - dlsym(h, "cuGetProcAddress_v2"), then lookups with flags 0 and 2 (cudart style;
 *             the stream-ordered calls use the flag-2, _ptsz, entry points)
 *   numba   - dlopen("libcuda.so") + cuGetProcAddress_v2 with flags 0 (cuda-bindings style)
 * and runs the scenario argv[2]:
 *   all               - every hooked API a known number of times; prints "count NAME N"
 *   threads T N       - T threads, each N alloc/free pairs on its own stream
 *   fork              - allocations before, in and after a fork child (no exec)
 *   fork_exit         - the same, but the child ends with the exit_group system call (no
 *                       destructors run, and no library sees it end)
 *   exit              - three alloc/free pairs, then _exit(0)
 *   hold N MS         - allocates N bytes, holds them MS milliseconds, frees them
 *   forkexec SELF     - a fork child that execs SELF argv[1] all
 *   kill              - alloc/free forever; prints each returned call ("A addr size", "F addr")
 *   oom               - allocates 1 MiB blocks until the driver says out of memory
 *   abort             - three alloc/free pairs, then abort()
 *   sync              - a stream-ordered free, then every ordering call once, in this order:
 *                       event record (0xe1 on stream 7), record with flags 1 (0xe2 on 8), wait
 *                       (stream 8 on 0xe1, flags 0), stream query (7: done; 9: not ready),
 *                       event query (0xe1: done; 0xe9: not ready), event, stream and context
 *                       synchronize (both forms); then one more allocation on stream 8
 *   private           - a thread makes device 0 current the way cudart does (not through a
 *                       public context call), then allocates 12345 bytes
 * Every process prints "pid N" first.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long u64;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct { u64 offset, size; unsigned flags; unsigned reserved[16]; } ExtBufDesc;
typedef struct { unsigned char pool_props[88]; const void *access; size_t count; size_t bytesize; CUdeviceptr dptr; } AllocNodeParams;
typedef struct { unsigned type, handle_types; unsigned loc_type; int loc_id; void *win32; unsigned char flags[8]; } AllocProp;
typedef struct { size_t w, h; unsigned format, channels; } ArrayDesc;
typedef struct { size_t w, h, d; unsigned format, channels, flags; } Array3DDesc;

#define FUNCS(X) \
    X(cuInit, "cuInit", 2000, 0, CUresult, (unsigned)) \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, 0, CUresult, (void **, int)) \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, 0, CUresult, (void *)) \
    X(cuMemAlloc_v2, "cuMemAlloc", 3020, 0, CUresult, (CUdeviceptr *, size_t)) \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0, CUresult, (CUdeviceptr *, size_t *, size_t, size_t, unsigned)) \
    X(cuMemAllocManaged, "cuMemAllocManaged", 6000, 0, CUresult, (CUdeviceptr *, size_t, unsigned)) \
    X(cuMemFree_v2, "cuMemFree", 3020, 0, CUresult, (CUdeviceptr)) \
    X(cuMemAllocAsync, "cuMemAllocAsync", 11020, 1, CUresult, (CUdeviceptr *, size_t, void *)) \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, 1, CUresult, (CUdeviceptr *, size_t, void *, void *)) \
    X(cuMemFreeAsync, "cuMemFreeAsync", 11020, 1, CUresult, (CUdeviceptr, void *)) \
    X(cuMemPoolCreate, "cuMemPoolCreate", 11020, 0, CUresult, (void **, const void *)) \
    X(cuMemPoolDestroy, "cuMemPoolDestroy", 11020, 0, CUresult, (void *)) \
    X(cuMemPoolTrimTo, "cuMemPoolTrimTo", 11020, 0, CUresult, (void *, size_t)) \
    X(cuMemPoolImportPointer, "cuMemPoolImportPointer", 11020, 0, CUresult, (CUdeviceptr *, void *, void *)) \
    X(cuMemAddressReserve, "cuMemAddressReserve", 10020, 0, CUresult, (CUdeviceptr *, size_t, size_t, CUdeviceptr, u64)) \
    X(cuMemAddressFree, "cuMemAddressFree", 10020, 0, CUresult, (CUdeviceptr, size_t)) \
    X(cuMemCreate, "cuMemCreate", 10020, 0, CUresult, (u64 *, size_t, const AllocProp *, u64)) \
    X(cuMemRelease, "cuMemRelease", 10020, 0, CUresult, (u64)) \
    X(cuMemMap, "cuMemMap", 10020, 0, CUresult, (CUdeviceptr, size_t, size_t, u64, u64)) \
    X(cuMemUnmap, "cuMemUnmap", 10020, 0, CUresult, (CUdeviceptr, size_t)) \
    X(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 10020, 0, CUresult, (u64 *, void *, int)) \
    X(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 11000, 0, CUresult, (u64 *, void *)) \
    X(cuMemMapArrayAsync, "cuMemMapArrayAsync", 11010, 1, CUresult, (void *, unsigned, void *)) \
    X(cuMulticastCreate, "cuMulticastCreate", 12010, 0, CUresult, (u64 *, const void *)) \
    X(cuMemAllocHost_v2, "cuMemAllocHost", 3020, 0, CUresult, (void **, size_t)) \
    X(cuMemHostAlloc, "cuMemHostAlloc", 2020, 0, CUresult, (void **, size_t, unsigned)) \
    X(cuMemFreeHost, "cuMemFreeHost", 2000, 0, CUresult, (void *)) \
    X(cuMemHostRegister_v2, "cuMemHostRegister", 6050, 0, CUresult, (void *, size_t, unsigned)) \
    X(cuMemHostUnregister, "cuMemHostUnregister", 4000, 0, CUresult, (void *)) \
    X(cuArrayCreate_v2, "cuArrayCreate", 3020, 0, CUresult, (void **, const ArrayDesc *)) \
    X(cuArray3DCreate_v2, "cuArray3DCreate", 3020, 0, CUresult, (void **, const Array3DDesc *)) \
    X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, 0, CUresult, (void **, const Array3DDesc *, unsigned)) \
    X(cuArrayDestroy, "cuArrayDestroy", 2000, 0, CUresult, (void *)) \
    X(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000, 0, CUresult, (void *)) \
    X(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 11000, 0, CUresult, (CUdeviceptr *, CUipcMemHandle, unsigned)) \
    X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 4010, 0, CUresult, (CUdeviceptr)) \
    X(cuExternalMemoryGetMappedBuffer, "cuExternalMemoryGetMappedBuffer", 10000, 0, CUresult, (CUdeviceptr *, void *, const ExtBufDesc *)) \
    X(cuDestroyExternalMemory, "cuDestroyExternalMemory", 10000, 0, CUresult, (void *)) \
    X(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode", 11040, 0, CUresult, (void **, void *, const void *, size_t, AllocNodeParams *)) \
    X(cuGraphAddMemFreeNode, "cuGraphAddMemFreeNode", 11040, 0, CUresult, (void **, void *, const void *, size_t, CUdeviceptr)) \
    X(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 11040, 0, CUresult, (int)) \
    X(cuStreamSynchronize, "cuStreamSynchronize", 2000, 1, CUresult, (void *)) \
    X(cuStreamQuery, "cuStreamQuery", 2000, 1, CUresult, (void *)) \
    X(cuCtxSynchronize, "cuCtxSynchronize", 2000, 0, CUresult, (void)) \
    X(cuCtxSynchronize_v2, "cuCtxSynchronize", 13000, 0, CUresult, (void *)) \
    X(cuEventSynchronize, "cuEventSynchronize", 2000, 0, CUresult, (void *)) \
    X(cuEventQuery, "cuEventQuery", 2000, 0, CUresult, (void *)) \
    X(cuEventRecord, "cuEventRecord", 2000, 1, CUresult, (void *, void *)) \
    X(cuEventRecordWithFlags, "cuEventRecordWithFlags", 11010, 1, CUresult, (void *, void *, unsigned)) \
    X(cuStreamWaitEvent, "cuStreamWaitEvent", 3020, 1, CUresult, (void *, void *, unsigned))

#define DECLARE(fn, base, ver, stream, ret, args) static ret(*p_##fn) args;
FUNCS(DECLARE)

#ifdef LINKED
#define DECL_EXTERN(fn, base, ver, stream, ret, args) ret fn args;
FUNCS(DECL_EXTERN)
#endif

static void die(const char *what) { fprintf(stderr, "client: %s\n", what); exit(3); }

typedef CUresult (*gpa_fn)(const char *, void **, int, u64, int *);

static void load(const char *how) {
    if (!strcmp(how, "linked")) {
#ifdef LINKED
#define BIND_LINKED(fn, base, ver, stream, ret, args) p_##fn = fn;
        FUNCS(BIND_LINKED)
        return;
#else
        die("not built with -DLINKED");
#endif
    }
    int numba = !strcmp(how, "numba");
    void *h = dlopen(numba ? "libcuda.so" : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) die(dlerror());
    if (!strcmp(how, "dlsym")) {
#define BIND_DLSYM(fn, base, ver, stream, ret, args) \
        if (!(p_##fn = (ret(*) args)dlsym(h, #fn))) die("dlsym " #fn);
        FUNCS(BIND_DLSYM)
        return;
    }
    if (strcmp(how, "gpa") && !numba) die("unknown loader");
    gpa_fn gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) die("no cuGetProcAddress_v2");
    /* cudart style: the resolver resolves itself first, then everything through it. */
    gpa_fn gpa2 = NULL;
    if (gpa("cuGetProcAddress", (void **)&gpa2, 12000, 0, NULL) || !gpa2) die("gpa self");
    int ptsz = !numba;
    void *unused;
#define BIND_GPA(fn, base, ver, stream, ret, args) \
    if (gpa2(base, (void **)&p_##fn, ver, 0, NULL) || !p_##fn) die("gpa " base); \
    if (stream && ptsz) { \
        if (gpa2(base, (void **)&p_##fn, ver, 2, NULL) || !p_##fn) die("gpa ptsz " base); \
    }
    FUNCS(BIND_GPA)
    /* An unknown name: CUDA_SUCCESS with NULL, passed through untouched. */
    if (gpa2("cuNoSuchFunction", &unused, 12000, 0, NULL) || unused) die("unknown name");
}

#define CHECK(call) do { CUresult r_ = (call); if (r_) { fprintf(stderr, "client: %s = %d\n", #call, r_); exit(4); } } while (0)

static void *stream_of(int i) { return (void *)(uintptr_t)(0x5000 + i); }

static void scenario_all(void) {
    CUdeviceptr d[4];
    size_t pitch;
    void *h[4];
    u64 hd[2];
    /* device: 3 cuMemAlloc_v2 of 1000, 2 MiB, 3; one pitched 1000x10; 1 managed 4096; 5 frees */
    CHECK(p_cuMemAlloc_v2(&d[0], 1000));
    CHECK(p_cuMemAlloc_v2(&d[1], 2 << 20));
    CHECK(p_cuMemAlloc_v2(&d[2], 3));
    CHECK(p_cuMemAllocPitch_v2(&d[3], &pitch, 1000, 10, 4));
    for (int i = 0; i < 4; i++) CHECK(p_cuMemFree_v2(d[i]));
    CHECK(p_cuMemAllocManaged(&d[0], 4096, 1));
    CHECK(p_cuMemFree_v2(d[0]));
    /* failed: a free of an unknown pointer, an allocation of 0 bytes */
    if (p_cuMemFree_v2(0x1234) != 1) die("bad free accepted");
    if (p_cuMemAlloc_v2(&d[0], 0) != 1) die("zero alloc accepted");
    /* pools: 2 async allocs on stream 7, one from a created pool, 3 frees, trim, destroy, import */
    void *pool;
    CHECK(p_cuMemAllocAsync(&d[0], 512, stream_of(7)));
    CHECK(p_cuMemAllocAsync(&d[1], 1 << 20, stream_of(7)));
    CHECK(p_cuMemPoolCreate(&pool, NULL));
    CHECK(p_cuMemAllocFromPoolAsync(&d[2], 777, pool, stream_of(8)));
    for (int i = 0; i < 3; i++) CHECK(p_cuMemFreeAsync(d[i], stream_of(7)));
    CHECK(p_cuMemPoolTrimTo(pool, 4096));
    CHECK(p_cuMemPoolDestroy(pool));
    CHECK(p_cuMemPoolImportPointer(&d[0], pool, NULL));
    /* VMM: reserve 64 MiB, create 2 MiB x2 (device 1), map both, unmap, release, free */
    CUdeviceptr va;
    AllocProp prop = { 1, 0, 1, 1, NULL, {0} };
    CHECK(p_cuMemAddressReserve(&va, 64 << 20, 0, 0, 0));
    CHECK(p_cuMemCreate(&hd[0], 2 << 20, &prop, 0));
    CHECK(p_cuMemCreate(&hd[1], 2 << 20, &prop, 0));
    if (p_cuMemCreate(&hd[1] + 0, 2 << 20, &prop, 1) != 1) die("bad create accepted");
    CHECK(p_cuMemMap(va, 2 << 20, 0, hd[0], 0));
    CHECK(p_cuMemMap(va + (2 << 20), 2 << 20, 0, hd[1], 0));
    CHECK(p_cuMemUnmap(va, 4 << 20));
    CHECK(p_cuMemRelease(hd[0]));
    CHECK(p_cuMemRelease(hd[1]));
    CHECK(p_cuMemAddressFree(va, 64 << 20));
    u64 other;
    CHECK(p_cuMemImportFromShareableHandle(&other, (void *)(uintptr_t)5, 1));
    CHECK(p_cuMemRetainAllocationHandle(&other, (void *)(uintptr_t)va));
    CHECK(p_cuMemMapArrayAsync(NULL, 0, stream_of(9)));
    CHECK(p_cuMulticastCreate(&other, NULL));
    /* host */
    static char buf[8192];
    CHECK(p_cuMemAllocHost_v2(&h[0], 100));
    CHECK(p_cuMemHostAlloc(&h[1], 200, 2));
    CHECK(p_cuMemFreeHost(h[0]));
    CHECK(p_cuMemFreeHost(h[1]));
    CHECK(p_cuMemHostRegister_v2(buf, sizeof buf, 0));
    CHECK(p_cuMemHostUnregister(buf));
    /* arrays */
    ArrayDesc ad = { 64, 32, 0x20, 4 };
    Array3DDesc a3 = { 16, 16, 16, 0x01, 1, 0 };
    CHECK(p_cuArrayCreate_v2(&h[0], &ad));
    CHECK(p_cuArray3DCreate_v2(&h[1], &a3));
    CHECK(p_cuMipmappedArrayCreate(&h[2], &a3, 3));
    CHECK(p_cuArrayDestroy(h[0]));
    CHECK(p_cuArrayDestroy(h[1]));
    CHECK(p_cuMipmappedArrayDestroy(h[2]));
    /* imports and graphs */
    CUipcMemHandle ipc = { { 9 } };
    ExtBufDesc eb = { 4096, 65536, 0, { 0 } };
    AllocNodeParams np = { { 0 }, NULL, 0, 3 << 20, 0 };
    CHECK(p_cuIpcOpenMemHandle_v2(&d[0], ipc, 1));
    CHECK(p_cuIpcCloseMemHandle(d[0]));
    CHECK(p_cuExternalMemoryGetMappedBuffer(&d[0], (void *)0xeee, &eb));
    CHECK(p_cuDestroyExternalMemory((void *)0xeee));
    CHECK(p_cuGraphAddMemAllocNode(&h[0], (void *)0x9a, NULL, 0, &np));
    CHECK(p_cuGraphAddMemFreeNode(&h[1], (void *)0x9a, NULL, 0, np.dptr));
    CHECK(p_cuDeviceGraphMemTrim(0));
    printf("pitch %zu\n", pitch);
}

struct worker { int index, n; };

static void *worker(void *arg) {
    struct worker *w = arg;
    for (int i = 0; i < w->n; i++) {
        CUdeviceptr p;
        CHECK(p_cuMemAllocAsync(&p, 256 + w->index, stream_of(w->index)));
        CHECK(p_cuMemFreeAsync(p, stream_of(w->index)));
    }
    return NULL;
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *event_of(int i) { return (void *)(uintptr_t)(0xe0 + i); }

static void scenario_sync(void) {
    CUdeviceptr d;
    CHECK(p_cuMemAllocAsync(&d, 4096, stream_of(7)));
    CHECK(p_cuMemFreeAsync(d, stream_of(7)));
    CHECK(p_cuEventRecord(event_of(1), stream_of(7)));
    CHECK(p_cuEventRecordWithFlags(event_of(2), stream_of(8), 1));
    CHECK(p_cuStreamWaitEvent(stream_of(8), event_of(1), 0));
    CHECK(p_cuStreamQuery(stream_of(7)));
    if (p_cuStreamQuery(stream_of(9)) != 600) die("stream 9 done");
    CHECK(p_cuEventQuery(event_of(1)));
    if (p_cuEventQuery(event_of(9)) != 600) die("event 9 done");
    CHECK(p_cuEventSynchronize(event_of(1)));
    CHECK(p_cuStreamSynchronize(stream_of(7)));
    CHECK(p_cuCtxSynchronize());
    CHECK(p_cuCtxSynchronize_v2(NULL));
    CHECK(p_cuMemAllocAsync(&d, 4096, stream_of(8)));
}

static void scenario_threads(int t, int n) {
    pthread_t th[64];
    struct worker w[64];
    double t0 = now_ns();
    for (int i = 0; i < t; i++) {
        w[i] = (struct worker){ i, n };
        pthread_create(&th[i], NULL, worker, &w[i]);
    }
    for (int i = 0; i < t; i++) pthread_join(th[i], NULL);
    if (t && n) printf("ns per call %.1f\n", (now_ns() - t0) / (2.0 * n));
}

static void *private_thread(void *arg) {
    (void)arg;
    void (*set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "fakecuda_private_set_current");
    if (!set) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        set = h ? (void (*)(int))dlsym(h, "fakecuda_private_set_current") : NULL;
    }
    if (!set) die("no private entry point");
    set(0);
    CUdeviceptr p;
    CHECK(p_cuMemAlloc_v2(&p, 12345));
    CHECK(p_cuMemFree_v2(p));
    return NULL;
}

static void allocs(int n, size_t size) {
    for (int i = 0; i < n; i++) {
        CUdeviceptr p;
        CHECK(p_cuMemAlloc_v2(&p, size));
        CHECK(p_cuMemFree_v2(p));
    }
}

int main(int argc, char **argv) {
    if (argc < 3) die("usage: client LOADER SCENARIO ...");
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("pid %d\n", getpid());
    load(argv[1]);
    void *ctx;
    CHECK(p_cuInit(0));
    CHECK(p_cuDevicePrimaryCtxRetain(&ctx, 1));
    CHECK(p_cuCtxSetCurrent(ctx));
    const char *s = argv[2];
    if (!strcmp(s, "all")) {
        scenario_all();
    } else if (!strcmp(s, "sync")) {
        scenario_sync();
    } else if (!strcmp(s, "threads") && argc >= 5) {
        scenario_threads(atoi(argv[3]), atoi(argv[4]));
    } else if (!strcmp(s, "fork") || !strcmp(s, "fork_exit") || (!strcmp(s, "forkexec") && argc >= 4)) {
        allocs(3, 100);
        fflush(stdout);
        pid_t c = fork();
        if (c == 0) {
            printf("child %d\n", getpid());
            if (!strcmp(s, "forkexec")) {
                execl(argv[3], argv[3], argv[1], "all", (char *)NULL);
                die("exec");
            }
            allocs(5, 200);
            fflush(stdout);
            if (!strcmp(s, "fork_exit")) syscall(SYS_exit_group, 0);
            exit(0);
        }
        int st;
        waitpid(c, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) die("child failed");
        allocs(2, 300);
    } else if (!strcmp(s, "hold") && argc >= 5) {
        CUdeviceptr p;
        CHECK(p_cuMemAlloc_v2(&p, strtoull(argv[3], NULL, 0)));
        struct timespec hold = {atoi(argv[4]) / 1000, (atoi(argv[4]) % 1000) * 1000000L};
        nanosleep(&hold, NULL);
        CHECK(p_cuMemFree_v2(p));
    } else if (!strcmp(s, "exit")) {
        allocs(3, 100);
        _exit(0);
    } else if (!strcmp(s, "kill")) {
        for (unsigned long i = 1;; i++) {
            CUdeviceptr p;
            size_t n = 4096 + (i % 1000);
            CHECK(p_cuMemAlloc_v2(&p, n));
            printf("A %llu %zu\n", p, n);
            CHECK(p_cuMemFree_v2(p));
            printf("F %llu\n", p);
        }
    } else if (!strcmp(s, "private")) {
        pthread_t t;
        pthread_create(&t, NULL, private_thread, NULL);
        pthread_join(t, NULL);
    } else if (!strcmp(s, "abort")) {
        allocs(3, 64);
        abort();
    } else if (!strcmp(s, "oom")) {
        int n = 0;
        CUdeviceptr p;
        CUresult r;
        while ((r = p_cuMemAlloc_v2(&p, 1 << 20)) == 0) n++;
        printf("allocated %d then %d\n", n, r);
    } else {
        die("unknown scenario");
    }
    return 0;
}
