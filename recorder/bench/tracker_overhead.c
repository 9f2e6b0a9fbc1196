/*
 * What the recorder's PyTorch tracker costs per allocator entry: a fake libc10_cuda.so
 * (tests/c/fake_c10_cuda.c, PyTorch 2.11's layout) reports ROUNDS x 1000 `alloc` entries and as
 * many `free_completed` entries, timed in batches of 100 from a call site DEPTH frames above
 * main. Run it plainly (no tracker attached: the allocator's own loop over zero trackers) and
 * under the recorder (stacks none / native); the difference of the medians is the tracker's
 * cost. One fake allocation first makes the recorder attach. See recorder/BENCHMARKS.md.
 *
 *   tracker_overhead LIBC10_CUDA DEPTH ROUNDS
 *
 * Prints the median and the 90th percentile per entry of each kind, in ns.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define ENTRIES 1000
#define BATCH 100
#define MAX_ROUNDS 1000

static void (*entry)(int, unsigned long, unsigned long);
static double alloc_ns[MAX_ROUNDS * ENTRIES / BATCH], free_ns[MAX_ROUNDS * ENTRIES / BATCH];
static int batches;

static unsigned long long now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

__attribute__((noinline)) static void round_of_entries(void) {
    for (int b = 0; b < ENTRIES / BATCH; b++) {
        unsigned long long t0 = now();
        for (int i = 0; i < BATCH; i++) entry(0, 0x7f0000000000ul + 512ul * i, 512);
        unsigned long long t1 = now();
        for (int i = 0; i < BATCH; i++) entry(2, 0x7f0000000000ul + 512ul * i, 512);
        unsigned long long t2 = now();
        alloc_ns[batches] = (double)(t1 - t0) / BATCH;
        free_ns[batches] = (double)(t2 - t1) / BATCH;
        batches++;
    }
}

__attribute__((noinline)) static void at_depth(int depth, int rounds) {
    if (depth > 0) {
        at_depth(depth - 1, rounds);
        __asm__ volatile("" ::: "memory");
        return;
    }
    for (int r = 0; r < rounds; r++) {
        round_of_entries();
        usleep(2000);
    }
}

static void report(const char *what, double *v) {
    qsort(v, batches, sizeof *v, cmp);
    printf("%s median %.1f p90 %.1f\n", what, v[batches / 2], v[batches * 9 / 10]);
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: tracker_overhead LIBC10_CUDA DEPTH ROUNDS\n"); return 2; }
    int depth = atoi(argv[2]), rounds = atoi(argv[3]);
    if (rounds < 1 || rounds > MAX_ROUNDS) { fprintf(stderr, "ROUNDS: 1..%d\n", MAX_ROUNDS); return 2; }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    void (*init)(void) = (void (*)(void))dlsym(h, "fake_torch_init");
    unsigned long long (*alloc)(unsigned long, unsigned long, unsigned long, unsigned long) =
        (unsigned long long (*)(unsigned long, unsigned long, unsigned long, unsigned long))dlsym(
            h, "fake_torch_malloc");
    entry = (void (*)(int, unsigned long, unsigned long))dlsym(h, "fake_torch_entry");
    if (!init || !alloc || !entry) { fprintf(stderr, "not a fake c10\n"); return 1; }
    init();
    alloc(1000, 0, 0, 0);
    at_depth(depth, rounds);
    report("alloc", alloc_ns);
    report("free_completed", free_ns);
    return 0;
}
