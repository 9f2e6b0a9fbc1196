/*
 * A fake libnvidia-ml.so.1 for the recorder's tests (recorder/src/nvml.rs): the four functions
 * the recorder calls, with NVIDIA's nvml.h ABIs. It lists one compute process on every device,
 * holding what the fake driver (fakecuda.c) says the process holds (`fakecuda_process_bytes`:
 * its live allocations and its contexts' own memory), or none while that is 0.
 *   FAKENVML_PID   - the pid listed for the process (as NVML lists host pids to a container)
 *   FAKENVML_FAIL  - nvmlInit_v2 fails
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

enum { SUCCESS = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, INSUFFICIENT_SIZE = 7 };

int nvmlInit_v2(void) { return getenv("FAKENVML_FAIL") ? UNINITIALIZED : SUCCESS; }
int nvmlShutdown(void) { return SUCCESS; }

int nvmlDeviceGetHandleByUUID(const char *uuid, void **device) {
    if (strncmp(uuid, "GPU-", 4) || strlen(uuid) != 40) return INVALID_ARGUMENT;
    *device = (void *)0x1;
    return SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned *count, nvmlProcessInfo_t *out) {
    (void)device;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    unsigned long long (*held)(void) = cuda ? (unsigned long long (*)(void))dlsym(cuda, "fakecuda_process_bytes") : NULL;
    unsigned long long bytes = held ? held() : 0;
    if (bytes == 0) { *count = 0; return SUCCESS; }
    if (*count < 1) { *count = 1; return INSUFFICIENT_SIZE; }
    const char *pid = getenv("FAKENVML_PID");
    out[0].pid = pid ? (unsigned)atoi(pid) : (unsigned)getpid();
    out[0].usedGpuMemory = bytes;
    out[0].gpuInstanceId = out[0].computeInstanceId = ~0u;
    *count = 1;
    return SUCCESS;
}
