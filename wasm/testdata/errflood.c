// errflood writes 1 MiB to stderr, ending with a last line, then fails.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void) {
	static char buf[1 << 10];
	memset(buf, 'e', sizeof buf);
	for (int i = 0; i < 1024; i++)
		write(2, buf, sizeof buf);
	fprintf(stderr, "\nthe last line\n");
	return 1;
}
