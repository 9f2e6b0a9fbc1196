/* A library the stack client dlopens after its first allocation. */
extern void alloc_bytes(unsigned long n);
volatile int lib_sink;

__attribute__((noinline)) void lib_alloc(void) {
    alloc_bytes(5005);
    lib_sink++;
}
