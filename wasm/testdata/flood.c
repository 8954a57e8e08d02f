// flood writes to stdout forever, ignoring errors.
#include <string.h>
#include <unistd.h>

int main(void) {
	static char buf[64 << 10];
	memset(buf, 'x', sizeof buf);
	for (;;)
		write(1, buf, sizeof buf);
}
