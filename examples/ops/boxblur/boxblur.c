/*
 * boxblur is a braid operation (a WASI preview 1 module) that filters an
 * image tile by tile: a box blur, each output pixel the mean of the
 * (2*RADIUS+1) x (2*RADIUS+1) pixels around it.
 *
 * Input (stdin): one BRT1 tile, as the tiles:WxH+HALO split makes them.
 * Output (stdout): a BRT1 tile whose data rectangle is the input's core,
 * holding the blurred core; the tiles merge assembles the PNG.
 *
 * Parameter RADIUS: 0 to 64, default 2. The blur reads up to RADIUS
 * pixels beyond the core; pixels beyond the tile's data rectangle read as
 * the nearest data pixel. With a halo of at least RADIUS that is exactly
 * what the whole image would give (the data rectangle stops short of the
 * core's neighbourhood only at the image's edge), so the tiled result
 * equals the untiled one. With a smaller halo the tile seams show: this
 * module does not check, which makes it a handy demonstration.
 *
 *   clang --target=wasm32-wasi -O2 -o boxblur.wasm boxblur.c
 *   braid op run boxblur.wasm --split tiles:256x256+4 --merge tiles --param RADIUS=4 < in.png > out.png
 *
 * Exit codes: 0 done, 1 bad input (the message says what is wrong),
 * 2 bad parameter.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../brt1.h"

#define MAX_RADIUS 64

/* fail prints "boxblur: MESSAGE" on stderr and exits with code. */
static void fail(int code, const char *format, ...) {
	va_list ap;
	fputs("boxblur: ", stderr);
	va_start(ap, format);
	vfprintf(stderr, format, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

/* radius_param parses the RADIUS parameter. */
static int radius_param(void) {
	const char *s = getenv("RADIUS");
	if (s == NULL || *s == '\0')
		return 2;
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')
		end++;
	if (end == s || *end != '\0' || errno != 0 || v < 0 || v > MAX_RADIUS)
		fail(2, "parameter RADIUS=\"%s\": want a whole number from 0 to %d", s, MAX_RADIUS);
	return (int)v;
}


/* row_sums sets sum[4*x+c], for each core column x and channel c, to the
 * sum of channel c over the 2r+1 pixels of data row y centred on x,
 * reading beyond the data rectangle as its edge pixel. */
static void row_sums(const struct tile *t, int r, long y, uint32_t *sum) {
	long dw = dx(t->data), cw = dx(t->core), cx = t->core.x0 - t->data.x0;
	const uint8_t *row = t->pix + (size_t)y * dw * 4;
	uint32_t s[4] = {0, 0, 0, 0};
	for (long d = -r; d <= r; d++) {
		const uint8_t *p = row + 4 * clamp(cx + d, 0, dw - 1);
		for (int c = 0; c < 4; c++)
			s[c] += p[c];
	}
	for (long x = 0;; x++) {
		memcpy(sum + 4 * x, s, sizeof s);
		if (x + 1 == cw)
			break;
		/* Slide the window one pixel right. Unsigned arithmetic wraps
		 * in between, but s ends up the window's true sum. */
		const uint8_t *in = row + 4 * clamp(cx + x + 1 + r, 0, dw - 1);
		const uint8_t *out = row + 4 * clamp(cx + x - r, 0, dw - 1);
		for (int c = 0; c < 4; c++)
			s[c] += (uint32_t)in[c] - out[c];
	}
}

/* blur writes the box blur of t's core into dst, row by row. The column
 * sums slide down the core, adding the row that enters the window and
 * subtracting the one that leaves, so memory stays a few rows. */
static void blur(const struct tile *t, int r, uint8_t *dst) {
	long dh = dy(t->data), cw = dx(t->core), ch = dy(t->core), cy = t->core.y0 - t->data.y0;
	uint32_t *acc = calloc((size_t)cw * 4, sizeof *acc);
	uint32_t *in = malloc((size_t)cw * 4 * sizeof *in);
	uint32_t *out = malloc((size_t)cw * 4 * sizeof *out);
	if (acc == NULL || in == NULL || out == NULL)
		fail(1, "no memory for a tile %ld pixels wide; use smaller tiles or raise the job's --unit-mem", cw);
	for (long d = -r; d <= r; d++) {
		row_sums(t, r, clamp(cy + d, 0, dh - 1), in);
		for (long i = 0; i < cw * 4; i++)
			acc[i] += in[i];
	}
	/* At most 255 * 129 * 129 per sum: no overflow. Round half up. */
	uint32_t n = (uint32_t)(2 * r + 1) * (uint32_t)(2 * r + 1);
	for (long y = 0;; y++) {
		uint8_t *o = dst + (size_t)y * cw * 4;
		for (long i = 0; i < cw * 4; i++)
			o[i] = (uint8_t)((acc[i] + n / 2) / n);
		if (y + 1 == ch)
			break;
		row_sums(t, r, clamp(cy + y + 1 + r, 0, dh - 1), in);
		row_sums(t, r, clamp(cy + y - r, 0, dh - 1), out);
		for (long i = 0; i < cw * 4; i++)
			acc[i] += in[i] - out[i];
	}
	free(acc);
	free(in);
	free(out);
}

int main(void) {
	int r = radius_param();
	struct tile t;
	read_tile(&t);
	size_t len = HEADER + (size_t)dx(t.core) * dy(t.core) * 4;
	uint8_t *out = malloc(len);
	if (out == NULL)
		fail(1, "no memory for the %zu-byte result; use smaller tiles or raise the job's --unit-mem", len);
	blur(&t, r, out + HEADER);
	write_tile(&t, t.core, out, len);
	return 0;
}
