// open tries to read /etc/passwd and prints what it gets.
#include <errno.h>
#include <stdio.h>
#include <string.h>

int main(void) {
	FILE *f = fopen("/etc/passwd", "r");
	if (f == NULL) {
		printf("open failed: %s\n", strerror(errno));
		return 1;
	}
	char buf[4096];
	size_t n = fread(buf, 1, sizeof buf, f);
	fwrite(buf, 1, n, stdout);
	return 0;
}
