// bomb allocates and touches 1 MiB chunks until malloc fails, then aborts.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// sink keeps the compiler from eliding the allocations.
char *volatile sink;

int main(void) {
	for (unsigned long n = 0;; n++) {
		char *p = malloc(1 << 20);
		if (p == NULL) {
			fprintf(stderr, "out of memory after %lu MiB\n", n);
			abort();
		}
		memset(p, 0xa5, 1 << 20);
		sink = p;
	}
}
