/*
 * Hook overhead over a direct call: times cuMemAlloc_v2, cuMemFree_v2 and two ordering calls
 * (cuStreamQuery, cuEventRecord: formats/SPEC.md §4.4) of a (fake) driver,
 * reached with dlopen + dlsym, from a call site DEPTH frames above main. Run it once plainly
 * (direct calls) and once under the recorder (the same calls through its wrappers); the
 * difference of the medians is what the hook adds. See recorder/BENCHMARKS.md.
 *
 *   hook_overhead DEPTH ROUNDS [WARMUP]
 *
 * WARMUP untimed rounds come first (default 40, 80,000 events: more than the recorder's
 * journal holds, so every journal page has been touched once and the timed rounds see the
 * steady state of a long-running program rather than first-touch page faults).
 *
 * Each round makes 1000 alloc/free pairs and 1000 query/record pairs, timed in batches of 100
 * calls of one kind, then
 * sleeps 2 ms so that the recorder's writer thread drains its journal outside the timed part.
 * Prints the median and the 90th percentile of the per-call time of each kind, in ns.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef int (*alloc_fn)(unsigned long long *, size_t);
typedef int (*free_fn)(unsigned long long);
typedef int (*query_fn)(void *);
typedef int (*record_fn)(void *, void *);

#define PAIRS 1000
#define BATCH 100
#define MAX_ROUNDS 1000

static alloc_fn cu_alloc;
static free_fn cu_free;
static query_fn cu_query;
static record_fn cu_record;
static double alloc_ns[MAX_ROUNDS * PAIRS / BATCH], free_ns[MAX_ROUNDS * PAIRS / BATCH];
static double query_ns[MAX_ROUNDS * PAIRS / BATCH], record_ns[MAX_ROUNDS * PAIRS / BATCH];
static int batches;
volatile int sink;

static unsigned long long now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static int timing;

__attribute__((noinline)) static void round_of_calls(void) {
    static unsigned long long p[BATCH];
    for (int b = 0; b < PAIRS / BATCH; b++) {
        unsigned long long t0 = now();
        for (int i = 0; i < BATCH; i++) cu_alloc(&p[i], 4096);
        unsigned long long t1 = now();
        for (int i = 0; i < BATCH; i++) cu_free(p[i]);
        unsigned long long t2 = now();
        for (int i = 0; i < BATCH; i++) cu_query((void *)0x5000);
        unsigned long long t3 = now();
        for (int i = 0; i < BATCH; i++) cu_record((void *)0xe0, (void *)0x5000);
        unsigned long long t4 = now();
        if (!timing) continue;
        alloc_ns[batches] = (double)(t1 - t0) / BATCH;
        free_ns[batches] = (double)(t2 - t1) / BATCH;
        query_ns[batches] = (double)(t3 - t2) / BATCH;
        record_ns[batches] = (double)(t4 - t3) / BATCH;
        batches++;
    }
}

/* Calls round_of_calls from `depth` frames further up the stack. */
__attribute__((noinline)) static void at_depth(int depth) {
    if (depth > 0) at_depth(depth - 1);
    else round_of_calls();
    sink++;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    printf("%s median_ns %.1f p90_ns %.1f batches %d\n", what, v[n / 2], v[n * 9 / 10], n);
}

int main(int argc, char **argv) {
    int depth = argc > 1 ? atoi(argv[1]) : 0;
    int rounds = argc > 2 ? atoi(argv[2]) : 50;
    int warmup = argc > 3 ? atoi(argv[3]) : 40;
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
    cu_alloc = (alloc_fn)dlsym(cuda, "cuMemAlloc_v2");
    cu_free = (free_fn)dlsym(cuda, "cuMemFree_v2");
    cu_query = (query_fn)dlsym(cuda, "cuStreamQuery");
    cu_record = (record_fn)dlsym(cuda, "cuEventRecord");
    if (!init || !cu_alloc || !cu_free || !cu_query || !cu_record) { fprintf(stderr, "missing driver symbols\n"); return 1; }
    init(0);
    for (int r = 0; r < warmup + rounds; r++) {
        timing = r >= warmup;
        at_depth(depth);
        usleep(2000);
    }
    report("alloc", alloc_ns, batches);
    report("free", free_ns, batches);
    report("query", query_ns, batches);
    report("record", record_ns, batches);
    return 0;
}
