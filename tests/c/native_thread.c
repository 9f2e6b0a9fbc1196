/* Called from Python through ctypes (tests/py/stress.py): allocates through the fake driver from
 * a thread that the C library starts, which never gets a Python thread state. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

typedef int (*alloc_fn)(unsigned long long *, size_t);

static void *run(void *arg) {
    size_t size = *(size_t *)arg;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    alloc_fn alloc = h ? (alloc_fn)dlsym(h, "cuMemAlloc_v2") : NULL;
    unsigned long long p = 0;
    if (alloc) alloc(&p, size);
    return NULL;
}

/* Allocates `size` bytes from a new native thread and waits for it; 0 on success. */
int alloc_from_native_thread(size_t size) {
    pthread_t t;
    if (pthread_create(&t, NULL, run, &size) != 0) return -1;
    return pthread_join(t, NULL);
}
