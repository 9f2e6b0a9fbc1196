/*
 * What reading the clock costs on this machine: clock_gettime(CLOCK_MONOTONIC), the recorder's
 * timestamp of every event (a vDSO call where the clock source allows it, a system call where
 * it does not), against the CPU's time-stamp counter. recording_cost_h200.sh runs it.
 *
 *   clock_cost [CALLS]     prints ns per call of each, best of 5 runs
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

static double ns_between(struct timespec a, struct timespec b) {
    return (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
}

int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 2000000;
    double best_clock = 1e30, best_tsc = 1e30;
    unsigned long long sink = 0;
    for (int run = 0; run < 5; run++) {
        struct timespec a, b, t;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (long i = 0; i < calls; i++) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            sink += t.tv_nsec;
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        double c = ns_between(a, b) / calls;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (long i = 0; i < calls; i++)
            sink += __rdtsc();
        clock_gettime(CLOCK_MONOTONIC, &b);
        double r = ns_between(a, b) / calls;
        if (c < best_clock) best_clock = c;
        if (r < best_tsc) best_tsc = r;
    }
    printf("clock_gettime %.1f ns  rdtsc %.1f ns  (sink %llu)\n", best_clock, best_tsc, sink & 1);
    return 0;
}
