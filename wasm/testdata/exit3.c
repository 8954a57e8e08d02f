// exit3 complains on stderr and exits with code 3.
#include <stdio.h>
#include <stdlib.h>

int main(void) {
	printf("partial output\n");
	fprintf(stderr, "bad line 7\n");
	exit(3);
}
