/* Built with -fno-asynchronous-unwind-tables -fno-unwind-tables -fomit-frame-pointer: no CFI
 * and no frame pointer, so an unwinder can only guess past this function. It keeps some of the
 * stack busy so that a guess reads something other than a return address. */
volatile unsigned long scratch[8];

__attribute__((noinline)) void no_unwind_info(void (*f)(unsigned long), unsigned long n) {
    volatile unsigned long local[16];
    for (int i = 0; i < 16; i++) local[i] = 0x4141414141414141UL + i;
    f(n);
    for (int i = 0; i < 8; i++) scratch[i] = local[i];
}
