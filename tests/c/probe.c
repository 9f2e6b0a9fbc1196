/*
 * A library that looks a symbol up with dlsym(RTLD_NEXT, ...), the way LLVM OpenMP's
 * ompt_start_tool does. The lookup must search the objects after *this* library; a dlsym hook
 * that forwards through an ordinary call makes the hook's library the caller, and the search
 * then finds this library's own definition (the loop HAMi-core hit, PR #315).
 */
#define _GNU_SOURCE
#include <dlfcn.h>

int probe_symbol(void) { return 1; }

/* 1 when RTLD_NEXT found this library's own probe_symbol (wrong), 0 when it found none. */
int probe_finds_itself(void) {
    void *p = dlsym(RTLD_NEXT, "probe_symbol");
    return p == (void *)probe_symbol;
}
