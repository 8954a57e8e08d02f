// clock checks that the clocks and random_get work.
#include <stdio.h>
#include <time.h>
#include <unistd.h>

int main(void) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0 || ts.tv_sec < 1600000000) {
		fprintf(stderr, "bad wall clock %lld\n", (long long)ts.tv_sec);
		return 1;
	}
	unsigned char r[32];
	if (getentropy(r, sizeof r) != 0)
		return 2;
	int nonzero = 0;
	for (int i = 0; i < 32; i++)
		nonzero += r[i] != 0;
	printf("ok %d\n", nonzero > 8);
	return 0;
}
