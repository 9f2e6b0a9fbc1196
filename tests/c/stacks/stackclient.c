/*
 * A client for the stack tests: it allocates from known call sites through the (fake) driver,
 * reached with dlopen + dlsym as XLA does, and prints where those sites are. argv[1]:
 *   sites     - site_a twice (1001 bytes), site_b once (2002 bytes)
 *   deep      - recursion 500 deep, then one allocation (3003 bytes)
 *   dlopen    - one allocation (4004), then dlopen(argv[2]) and its lib_alloc (5005) at once,
 *               and again 200 ms later
 *   signal    - an allocation inside a SIGUSR1 handler (6006), and inside one that runs on an
 *               alternate signal stack (7007)
 *   nounwind  - an allocation below a function built without unwind tables or frame pointer
 *               (8008)
 * The test finds the functions in the stacks by their symbols (nm), so they are not static.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*alloc_fn)(unsigned long long *, size_t);
typedef int (*free_fn)(unsigned long long);

alloc_fn cu_alloc;
static free_fn cu_free;

/* Keeps the compiler from turning calls into jumps or folding the sites together. */
volatile int sink;

__attribute__((noinline)) void alloc_bytes(size_t n) {
    unsigned long long p = 0;
    if (cu_alloc(&p, n) != 0) { fprintf(stderr, "alloc %zu failed\n", n); exit(1); }
    cu_free(p);
    sink++;
}

__attribute__((noinline)) void site_a(void) { alloc_bytes(1001); sink++; }
__attribute__((noinline)) void site_b(void) { alloc_bytes(2002); sink++; }

__attribute__((noinline)) void recurse(int depth) {
    if (depth == 0) alloc_bytes(3003);
    else recurse(depth - 1);
    sink++;
}

void on_usr1(int sig) { (void)sig; alloc_bytes(6006); }
void on_usr2(int sig) { (void)sig; alloc_bytes(7007); }

void no_unwind_info(void (*f)(size_t), size_t n); /* nounwind.c */

int main(int argc, char **argv) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
    cu_alloc = (alloc_fn)dlsym(cuda, "cuMemAlloc_v2");
    cu_free = (free_fn)dlsym(cuda, "cuMemFree_v2");
    if (!init || !cu_alloc || !cu_free) { fprintf(stderr, "missing driver symbols\n"); return 1; }
    init(0);
    const char *what = argc > 1 ? argv[1] : "sites";
    if (!strcmp(what, "sites")) {
        for (volatile int i = 0; i < 2; i++) site_a(); /* one call site, run twice */
        site_b();
    } else if (!strcmp(what, "deep")) {
        recurse(500);
    } else if (!strcmp(what, "dlopen") && argc > 2) {
        alloc_bytes(4004);
        void *lib = dlopen(argv[2], RTLD_NOW);
        if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 1; }
        void (*lib_alloc)(void) = (void (*)(void))dlsym(lib, "lib_alloc");
        lib_alloc();
        usleep(200 * 1000);
        lib_alloc();
    } else if (!strcmp(what, "signal")) {
        signal(SIGUSR1, on_usr1);
        raise(SIGUSR1);
        stack_t ss = { .ss_sp = malloc(1 << 16), .ss_size = 1 << 16, .ss_flags = 0 };
        sigaltstack(&ss, NULL);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr2;
        sa.sa_flags = SA_ONSTACK;
        sigaction(SIGUSR2, &sa, NULL);
        raise(SIGUSR2);
    } else if (!strcmp(what, "nounwind")) {
        no_unwind_info(alloc_bytes, 8008);
    } else {
        fprintf(stderr, "unknown scenario %s\n", what);
        return 2;
    }
    fflush(stdout);
    return 0;
}
