// dirty checks that its memory starts zeroed, then dirties it: run twice
// in a row, it fails if a run sees what the one before left.
#include <stdio.h>
#include <stddef.h>

// volatile, so the compiler neither assumes what the memory holds nor
// drops the writes.
static volatile unsigned char bss[1 << 20];

static int zero(volatile unsigned char *p, size_t n) {
	for (size_t i = 0; i < n; i++)
		if (p[i] != 0)
			return 0;
	return 1;
}

static void fill(volatile unsigned char *p, size_t n, unsigned char c) {
	for (size_t i = 0; i < n; i++)
		p[i] = c;
}

int main(void) {
	if (!zero(bss, sizeof bss)) {
		fprintf(stderr, "static memory is dirty\n");
		return 1;
	}
	fill(bss, sizeof bss, 0xab);

	// Pages added by memory.grow must be zero too.
	size_t pages = 32;
	size_t old = __builtin_wasm_memory_grow(0, pages);
	if (old == (size_t)-1)
		return 2;
	volatile unsigned char *grown = (volatile unsigned char *)(old * 65536);
	if (!zero(grown, pages * 65536)) {
		fprintf(stderr, "grown memory is dirty\n");
		return 3;
	}
	fill(grown, pages * 65536, 0xcd);
	printf("clean\n");
	return 0;
}
