/* Prints what probe_finds_itself() says; see probe.c. */
#include <stdio.h>
int probe_finds_itself(void);
int main(void) {
    printf("finds itself: %d\n", probe_finds_itself());
    return 0;
}
