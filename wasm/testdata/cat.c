// cat copies stdin to stdout: the minimal operation.
#include <unistd.h>

int main(void) {
	static char buf[64 << 10];
	for (;;) {
		ssize_t n = read(0, buf, sizeof buf);
		if (n < 0)
			return 1;
		if (n == 0)
			return 0;
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(1, buf + off, n - off);
			if (w <= 0)
				return 2;
			off += w;
		}
	}
}
