"""Writes many_stacks.c: allocation stacks like a framework's, many distinct ones over a few
hundred distinct return addresses (PyTorch's request-level traces on the H200 had 59 stacks over
358 return addresses), for recorder/BENCHMARKS.md.

    python3 many_stacks.py > many_stacks.c
    many_stacks PATHS DEPTH ROUNDS

The program allocates and frees 4 KiB through the (fake) driver at the end of PATHS different
call paths, each DEPTH frames deep through 400 functions, ROUNDS times after 700 untimed
rounds (70,000 events: the recorder's journal has been round once), and prints the median time
of one path (the two calls plus the path's own work).
"""

FUNCTIONS = 400

print("""#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*alloc_fn)(unsigned long long *, size_t);
typedef int (*free_fn)(unsigned long long);
typedef void (*step_fn)(int, int);
static alloc_fn cu_alloc;
static free_fn cu_free;
volatile int sink;
extern step_fn table[%d];

__attribute__((noinline)) static void leaf(void) {
    unsigned long long p;
    cu_alloc(&p, 4096);
    cu_free(p);
    sink++;
}""" % FUNCTIONS)
for i in range(FUNCTIONS):
    print(
        f"__attribute__((noinline)) void f{i}(int d, int path) {{ if (d == 0) leaf(); "
        f"else table[(path * 7 + {i * 13} + d) % {FUNCTIONS}](d - 1, path); sink++; }}"
    )
print("step_fn table[%d] = {%s};" % (FUNCTIONS, ", ".join(f"f{i}" for i in range(FUNCTIONS))))
print("""
static unsigned long long now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int paths = argc > 1 ? atoi(argv[1]) : 50;
    int depth = argc > 2 ? atoi(argv[2]) : 34;
    int rounds = argc > 3 ? atoi(argv[3]) : 1000;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) { fprintf(stderr, "%s\\n", dlerror()); return 1; }
    cu_alloc = (alloc_fn)dlsym(cuda, "cuMemAlloc_v2");
    cu_free = (free_fn)dlsym(cuda, "cuMemFree_v2");
    ((int (*)(unsigned))dlsym(cuda, "cuInit"))(0);
    double *v = malloc(sizeof(double) * rounds);
    int n = 0;
    for (int r = 0; r < rounds + 700; r++) {
        unsigned long long t0 = now();
        for (int p = 0; p < paths; p++) table[p](depth, p);
        unsigned long long t1 = now();
        if (r >= 700) v[n++] = (double)(t1 - t0) / paths;
    }
    qsort(v, n, sizeof *v, cmp);
    printf("path median_ns %.1f p90_ns %.1f rounds %d\\n", v[n / 2], v[n * 9 / 10], n);
    return 0;
}""")
