// bigdata starts with 40 MiB of memory: a large zeroed array.
#include <stdio.h>

char big[40 << 20];
volatile int last = sizeof big - 1;

int main(void) {
	big[0] = 1;
	big[last] = 2;
	printf("%d\n", big[0] + big[last]);
	return 0;
}
