/*
 * Calls the CUDA driver API directly, linked with -lcuda, a known number of times, including a
 * full VMM sequence and stream-ordered pool calls; prints what it did.
 *
 *   gcc -O2 -I/usr/local/cuda/include -o driver_counts driver_counts.c \
 *       -L/usr/local/cuda/lib64/stubs -lcuda
 */
#include <cuda.h>
#include <stdio.h>

#define CHECK(x)                                                   \
    do {                                                           \
        CUresult r_ = (x);                                         \
        if (r_ != CUDA_SUCCESS) {                                  \
            fprintf(stderr, "%s = %d\n", #x, (int)r_);             \
            return 1;                                              \
        }                                                          \
    } while (0)

int main(void) {
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));

    const int n = 50;
    CUdeviceptr d[50];
    for (int i = 0; i < n; i++) CHECK(cuMemAlloc(&d[i], (size_t)(i + 1) << 16));
    for (int i = 0; i < n; i++) CHECK(cuMemFree(d[i]));

    size_t pitch;
    CUdeviceptr dp;
    CHECK(cuMemAllocPitch(&dp, &pitch, 1000, 64, 4));
    CHECK(cuMemFree(dp));

    void *h;
    CHECK(cuMemHostAlloc(&h, 1 << 20, 0));
    CHECK(cuMemFreeHost(h));

    /* VMM: reserve 4 granules, two physical allocations of 2 granules each, map, access. */
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, 4 * gran, 0, 0, 0));
    CUmemGenericAllocationHandle hd[2];
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (int i = 0; i < 2; i++) {
        CHECK(cuMemCreate(&hd[i], 2 * gran, &prop, 0));
        CHECK(cuMemMap(va + i * 2 * gran, 2 * gran, 0, hd[i], 0));
    }
    CHECK(cuMemSetAccess(va, 4 * gran, &access, 1));
    CHECK(cuMemUnmap(va, 4 * gran));
    for (int i = 0; i < 2; i++) CHECK(cuMemRelease(hd[i]));
    CHECK(cuMemAddressFree(va, 4 * gran));

    /* Stream-ordered: 20 on a stream, 5 from the device's default pool explicitly. */
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmemoryPool pool;
    CHECK(cuDeviceGetDefaultMemPool(&pool, dev));
    for (int i = 0; i < 20; i++) {
        CUdeviceptr q;
        CHECK(cuMemAllocAsync(&q, 1 << 20, s));
        CHECK(cuMemFreeAsync(q, s));
    }
    for (int i = 0; i < 5; i++) {
        CUdeviceptr q;
        CHECK(cuMemAllocFromPoolAsync(&q, 3 << 20, pool, s));
        CHECK(cuMemFreeAsync(q, s));
    }
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemPoolTrimTo(pool, 0));

    /* A failed call: far more than the device has. */
    CUdeviceptr big;
    CUresult r = cuMemAlloc(&big, (size_t)1 << 50);
    printf("expect cuMemAlloc_v2 %d (+1 failed with %d)\n", n, (int)r);
    printf("expect cuMemFree_v2 %d\n", n + 1);
    printf("expect cuMemAllocPitch_v2 1\n");
    printf("expect cuMemHostAlloc 1\n");
    printf("expect cuMemCreate 2 size %zu\n", 2 * gran);
    printf("expect cuMemMap 2\n");
    printf("expect cuMemAllocAsync 20\n");
    printf("expect cuMemAllocFromPoolAsync 5\n");
    printf("expect cuMemFreeAsync 25\n");
    CHECK(cuStreamDestroy(s));
    return 0;
}
