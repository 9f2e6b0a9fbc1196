// Allocates through the CUDA runtime a known number of times and prints what it did, so a
// recorded trace can be checked against the program's own count. Built three ways for the
// recorder's validation: default (static cudart), --cudart shared, --default-stream per-thread.
//
//   nvcc -O2 -o cudart_counts cudart_counts.cu
//   vramtrace record -o cudart.vramtrace -- ./cudart_counts
#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(x)                                                                       \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                   \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

int main() {
    const int n_malloc = 100, n_async = 200, n_host = 10, n_pitch = 5, n_managed = 3;
    void *p[n_malloc];
    size_t free0, free1, total;
    CHECK(cudaFree(0));  // initialise the context
    CHECK(cudaMemGetInfo(&free0, &total));
    unsigned long long bytes = 0;
    for (int i = 0; i < n_malloc; i++) {
        size_t size = (size_t)(i + 1) * 4096 + i;
        bytes += size;
        CHECK(cudaMalloc(&p[i], size));
    }
    CHECK(cudaMemGetInfo(&free1, &total));
    for (int i = 0; i < n_malloc; i++) CHECK(cudaFree(p[i]));

    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    for (int i = 0; i < n_async; i++) {
        void *q;
        CHECK(cudaMallocAsync(&q, (size_t)1 << 20, s));
        CHECK(cudaFreeAsync(q, s));
    }
    CHECK(cudaStreamSynchronize(s));

    for (int i = 0; i < n_host; i++) {
        void *h;
        CHECK(cudaMallocHost(&h, 65536));
        CHECK(cudaFreeHost(h));
    }
    for (int i = 0; i < n_pitch; i++) {
        void *q;
        size_t pitch;
        CHECK(cudaMallocPitch(&q, &pitch, 1000, 100));
        CHECK(cudaFree(q));
    }
    for (int i = 0; i < n_managed; i++) {
        void *q;
        CHECK(cudaMallocManaged(&q, 1 << 20));
        CHECK(cudaFree(q));
    }
    CHECK(cudaStreamDestroy(s));
    printf("expect cuMemAlloc_v2 %d bytes %llu\n", n_malloc, bytes);
    printf("expect cuMemAllocAsync* %d\n", n_async);
    printf("expect cuMemFreeAsync* %d\n", n_async);
    printf("expect cuMemHostAlloc %d\n", n_host);
    printf("expect cuMemFreeHost %d\n", n_host);
    printf("expect cuMemAllocPitch_v2 %d\n", n_pitch);
    printf("expect cuMemAllocManaged %d\n", n_managed);
    printf("expect cuMemFree_v2 %d\n", n_malloc + n_pitch + n_managed);
    printf("memgetinfo_delta_after_mallocs %zu\n", free0 - free1);
    return 0;
}
