// cudaMallocAsync/cudaFreeAsync latency, for the recorder's overhead figures
// (samples/workloads/h200/stacks_overhead.sh): ROUNDS rounds of 1000 pairs of 4 KiB on one stream,
// timed in batches of 100 calls of one kind; prints the median and 90th percentile per call.
//
//   malloc_async_loop [ROUNDS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <vector>

static double now_ns() {
    return std::chrono::duration<double, std::nano>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

static void report(const char *what, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    std::printf("%s median_ns %.1f p90_ns %.1f batches %zu\n", what, v[v.size() / 2],
                v[v.size() * 9 / 10], v.size());
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? std::atoi(argv[1]) : 200;
    cudaStream_t s;
    cudaStreamCreate(&s);
    void *p[100];
    std::vector<double> alloc_ns, free_ns;
    for (int r = 0; r < rounds + 20; r++) {
        for (int b = 0; b < 10; b++) {
            double t0 = now_ns();
            for (int i = 0; i < 100; i++) cudaMallocAsync(&p[i], 4096, s);
            double t1 = now_ns();
            for (int i = 0; i < 100; i++) cudaFreeAsync(p[i], s);
            double t2 = now_ns();
            if (r >= 20) {  // the first rounds warm the pool and the recorder's journal
                alloc_ns.push_back((t1 - t0) / 100);
                free_ns.push_back((t2 - t1) / 100);
            }
        }
        cudaStreamSynchronize(s);
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s\n", cudaGetErrorString(e));
        return 1;
    }
    report("alloc", alloc_ns);
    report("free", free_ns);
    return 0;
}
