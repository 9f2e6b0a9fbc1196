/*
 * What the recorder's PyTorch tracker costs per allocator entry: a fake libc10_cuda.so
 * (tests/c/fake_c10_cuda.c, PyTorch 2.11's layout) calls the attached trackers from a call site
 * DEPTH frames above main. Run it plainly (no tracker attached: the allocator's own loop over
 * zero trackers) and under the recorder (stacks none / python / native); the difference of the
 * medians is the tracker's cost. One fake allocation first makes the recorder attach, then
 * 70,000 untimed entries go round the recorder's journal once (its default 65,536 slots), so
 * the timed part sees the steady state of a long run, not first-touch page faults. See
 * recorder/BENCHMARKS.md.
 *
 *   tracker_overhead LIBC10_CUDA DEPTH ROUNDS [COLD_KIB]
 *
 * Each round has two parts, then sleeps 2 ms so the recorder's writer drains its journal
 * outside the timed part:
 *
 * - hot: 1,000 `alloc` entries, then 1,000 `free_completed` entries, timed in batches of 100
 *   (the recorder's code and data stay in the caches: its best case).
 * - tensor: 100 tensors as PyTorch's caching allocator reports a cached block that is freed
 *   with no stream uses (`alloc`; later `free_requested` then `free_completed` in one `free()`
 *   call), each of the two calls timed alone (TSC); between two calls the program writes the
 *   next COLD_KIB KiB (default 4096) of 64 MiB of other memory, more than the last-level
 *   cache, as a training step's work between two tensors does, so the recorder finds its
 *   data, its journal slots and the entries cold, as in a real program (0: no such writes).
 *
 * Prints the median, the 90th percentile, the interquartile mean and the mean per entry of each
 * hot kind, and per call of each tensor kind (`tensor_alloc`, `tensor_free` = both entries of
 * the free), in ns.
 *
 * Under a bench build of the recorder (`--features bench`), MASK (a number, default 0) is the
 * variant passed to `vramtrace_bench_skip` (recorder/src/bench.rs); with its STAMPS bit (256)
 * the recorder times its parts (recorder/src/stamps.rs; with WHOLE, 512, too, the whole
 * callback alone), and the program prints, per part, the
 * ns a hot entry and a cold tensor spent in it and how many times it ran a tensor, then the
 * cost of one empty stamp (`part empty`).
 *
 *   tracker_overhead LIBC10_CUDA DEPTH ROUNDS [COLD_KIB [MASK]]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ENTRIES 1000
#define BATCH 100
#define TENSORS 100
#define MAX_ROUNDS 1000
#define WARMUP_ENTRIES 70000

static void (*entry)(int, unsigned long, unsigned long);
static double alloc_ns[MAX_ROUNDS * ENTRIES / BATCH], free_ns[MAX_ROUNDS * ENTRIES / BATCH];
static double tensor_alloc_ns[MAX_ROUNDS * TENSORS], tensor_free_ns[MAX_ROUNDS * TENSORS];
static int batches, tensors;
static unsigned char *cold;
/* A bench build's per-part sums (recorder/src/stamps.rs): the counter and CLOCK_MONOTONIC,
 * then PARTS tick sums, then PARTS run counts. */
#define PARTS 13
#define WORDS (2 + 2 * PARTS)
static const char *part_names[PARTS] = {"decode", "held",   "clock", "ids",  "stack", "walk",
                                        "node",   "intern", "record", "push", "exit",  "whole", "empty"};
static unsigned long (*bench_parts)(unsigned long long *, unsigned long);
static unsigned long long hot_parts[WORDS], tensor_parts[WORDS];

/* Adds the sums' growth since `*at` to `into`, and moves `*at` on. */
static void parts_since(unsigned long long *at, unsigned long long *into) {
    unsigned long long now[WORDS];
    if (!bench_parts) return;
    bench_parts(now, WORDS);
    for (int i = 2; i < WORDS; i++) into[i] += now[i] - at[i];
    memcpy(at, now, sizeof now);
}
static size_t cold_len, cold_at;
/* The other memory: 64 MiB, more than the last-level cache, written COLD_KIB at a time. */
#define COLD_AREA (64ul << 20)

static unsigned long long now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A timestamp in TSC ticks (converted to ns at the end): finer than this VM's clock_gettime. */
static unsigned long long ticks(void) {
    __builtin_ia32_lfence();
    unsigned long long t = __builtin_ia32_rdtsc();
    __builtin_ia32_lfence();
    return t;
}

/* The program's own work between two allocator calls: writes the next `cold_len` bytes of
 * the other memory. */
__attribute__((noinline)) static void other_work(unsigned round) {
    if (cold_at + cold_len > COLD_AREA) cold_at = 0;
    for (size_t i = 0; i < cold_len; i += 64) cold[cold_at + i] = (unsigned char)(round + i);
    cold_at += cold_len;
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void round_of_entries(unsigned round) {
    unsigned long long at[WORDS];
    parts_since(at, at);
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
    parts_since(at, hot_parts);
    for (int i = 0; i < TENSORS; i++) {
        unsigned long addr = 0x7f1000000000ul + 4096ul * (i + TENSORS * (round & 15));
        other_work(round);
        unsigned long long t0 = ticks();
        entry(0, addr, 4096);
        unsigned long long t1 = ticks();
        other_work(round);
        unsigned long long t2 = ticks();
        entry(1, addr, 4096);
        entry(2, addr, 4096);
        unsigned long long t3 = ticks();
        tensor_alloc_ns[tensors] = (double)(t1 - t0);
        tensor_free_ns[tensors] = (double)(t3 - t2);
        tensors++;
    }
    parts_since(at, tensor_parts);
}

__attribute__((noinline)) static void at_depth(int depth, int rounds) {
    if (depth > 0) {
        at_depth(depth - 1, rounds);
        __asm__ volatile("" ::: "memory");
        return;
    }
    for (int i = 0; i < WARMUP_ENTRIES; i++) {
        entry(i % 3, 0x7f2000000000ul + 512ul * (i % 1000), 512);
        if (i % 1000 == 999) usleep(1000);
    }
    for (int r = 0; r < rounds; r++) {
        round_of_entries((unsigned)r);
        usleep(2000);
    }
}

/* The median, the 90th percentile and the mean of the middle half (finer than the median
 * where the clock ticks coarsely). */
static void report(const char *what, double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    double sum = 0, all = 0;
    for (int i = n / 4; i < n * 3 / 4; i++) sum += v[i];
    for (int i = 0; i < n; i++) all += v[i];
    printf("%s median %.1f p90 %.1f iqm %.1f mean %.1f\n", what, v[n / 2], v[n * 9 / 10],
           sum / (n * 3 / 4 - n / 4), all / n);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: tracker_overhead LIBC10_CUDA DEPTH ROUNDS [COLD_KIB [MASK]]\n");
        return 2;
    }
    int depth = atoi(argv[2]), rounds = atoi(argv[3]);
    long cold_kib = argc > 4 ? atol(argv[4]) : 4096;
    if (rounds < 1 || rounds > MAX_ROUNDS) { fprintf(stderr, "ROUNDS: 1..%d\n", MAX_ROUNDS); return 2; }
    if (cold_kib < 0 || cold_kib > (long)(COLD_AREA >> 10)) {
        fprintf(stderr, "COLD_KIB: 0..%lu\n", COLD_AREA >> 10);
        return 2;
    }
    cold_len = (size_t)cold_kib << 10;
    cold = malloc(COLD_AREA);
    if (!cold) { fprintf(stderr, "out of memory\n"); return 1; }
    memset(cold, 1, COLD_AREA);
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
    unsigned (*bench_skip)(unsigned) = (unsigned (*)(unsigned))dlsym(RTLD_DEFAULT, "vramtrace_bench_skip");
    if (argc > 5) {
        if (!bench_skip) { fprintf(stderr, "MASK: not a bench build of the recorder\n"); return 1; }
        bench_skip((unsigned)atoi(argv[5]));
        bench_parts = (unsigned long (*)(unsigned long long *, unsigned long))dlsym(
            RTLD_DEFAULT, "vramtrace_bench_parts");
    }
    unsigned long long c0 = now(), k0 = ticks();
    at_depth(depth, rounds);
    double ns_per_tick = (double)(now() - c0) / (double)(ticks() - k0);
    for (int i = 0; i < tensors; i++) {
        tensor_alloc_ns[i] *= ns_per_tick;
        tensor_free_ns[i] *= ns_per_tick;
    }
    report("alloc", alloc_ns, batches);
    report("free_completed", free_ns, batches);
    report("tensor_alloc", tensor_alloc_ns, tensors);
    report("tensor_free", tensor_free_ns, tensors);
    if (bench_parts) {
        void (*stamp_cost)(unsigned) = (void (*)(unsigned))dlsym(RTLD_DEFAULT, "vramtrace_bench_stamp_cost");
        unsigned long long at[WORDS], empty[WORDS] = {0};
        parts_since(at, at);
        if (stamp_cost) stamp_cost(100000);
        parts_since(at, empty);
        for (int p = 0; p < PARTS - 1; p++)
            printf("part %s hot %.1f tensor %.1f runs %.2f\n", part_names[p],
                   hot_parts[2 + p] * ns_per_tick / (batches * 2.0 * BATCH),
                   tensor_parts[2 + p] * ns_per_tick / tensors,
                   (double)tensor_parts[2 + PARTS + p] / tensors);
        unsigned long long runs = empty[2 + 2 * PARTS - 1];
        printf("part empty %.1f\n", runs ? empty[2 + PARTS - 1] * ns_per_tick / runs : 0.0);
    }
    return 0;
}
