/*
 * cat is the smallest braid operation: it copies the unit's input (stdin)
 * to its output (stdout) unchanged. It measures what running a module
 * costs: braid's transfer, the sandbox and the WASI calls, with no work.
 *
 *   clang --target=wasm32-wasi -O2 -o cat.wasm cat.c
 *   braid op run cat.wasm < in > out && cmp in out
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Static, not on the stack: a WebAssembly module's stack is 64 KiB. */
static char buf[64 << 10];

int main(void) {
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) {
		if (fwrite(buf, 1, n, stdout) != n) {
			fprintf(stderr, "cat: write output: %s\n", strerror(errno));
			return 1;
		}
	}
	if (ferror(stdin)) {
		fprintf(stderr, "cat: read input: %s\n", strerror(errno));
		return 1;
	}
	if (fflush(stdout) != 0) {
		fprintf(stderr, "cat: write output: %s\n", strerror(errno));
		return 1;
	}
	return 0;
}
