// files lists the directory /in, prints each file's name and bytes, then
// tries to write into /in and to read /etc/passwd, which must fail.
#include <dirent.h>
#include <stdio.h>
#include <string.h>

int main(void) {
	DIR *d = opendir("/in");
	if (d == NULL) {
		printf("no /in\n");
		return 1;
	}
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.') continue;
		char path[512];
		snprintf(path, sizeof path, "/in/%s", e->d_name);
		FILE *f = fopen(path, "r");
		if (f == NULL) {
			printf("%s: cannot open\n", e->d_name);
			continue;
		}
		char buf[4096];
		size_t n = fread(buf, 1, sizeof buf, f);
		fclose(f);
		printf("%s=%.*s\n", e->d_name, (int)n, buf);
	}
	closedir(d);
	printf("write %s\n", fopen("/in/new", "w") == NULL ? "refused" : "allowed");
	printf("passwd %s\n", fopen("/etc/passwd", "r") == NULL ? "refused" : "allowed");
	return 0;
}
