// Wall time per allocation/free pair, to compare a run under the recorder with a plain run.
//   nvcc -O2 -o overhead overhead.cu && ./overhead
#include <chrono>
#include <cstdio>
#include <cuda_runtime.h>

template <class F> static double ns_per(int n, F f) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; i++) f();
    cudaDeviceSynchronize();
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
}

int main() {
    cudaFree(0);
    cudaStream_t s;
    cudaStreamCreate(&s);
    void *p;
    for (int rep = 0; rep < 3; rep++) {
        double a = ns_per(20000, [&] { cudaMallocAsync(&p, 1 << 20, s); cudaFreeAsync(p, s); });
        double m = ns_per(2000, [&] { cudaMalloc(&p, 1 << 20); cudaFree(p); });
        printf("rep %d: cudaMallocAsync+cudaFreeAsync %.0f ns, cudaMalloc+cudaFree %.0f ns\n", rep, a, m);
    }
    return 0;
}
