// trap executes the unreachable instruction.
#include <stdio.h>

int main(void) {
	fprintf(stderr, "about to trap\n");
	__builtin_trap();
}
