/*
 * brt1.h reads and writes BRT1 tiles, the raw pixel format that braid's
 * tiles:WxH+HALO split gives each unit and its tiles merge assembles
 * (docs/ops.md). The C examples include it; copy it into your own
 * operation.
 *
 * A tile is "BRT1", ten little-endian uint32 (the image's width and
 * height, the data rectangle, the core rectangle, each minX, minY, maxX,
 * maxY), then the data rectangle's pixels, 4 bytes each (premultiplied
 * RGBA), row by row.
 *
 * The including file defines fail(code, format, ...), which prints the
 * message and exits.
 */
#ifndef BRT1_H
#define BRT1_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MAX_PIXELS bounds the image a tile may belong to, as braid's own does. */
#define MAX_PIXELS (1u << 27)
/* A BRT1 header: the magic and ten little-endian uint32. */
#define HEADER 44

/* rect is [x0, x1) x [y0, y1) in full-image pixel coordinates. */
struct rect {
	uint32_t x0, y0, x1, y1;
};

/* tile is one BRT1 tile: the w x h image it belongs to, the data
 * rectangle its pixels cover (4 bytes each, premultiplied RGBA, row by
 * row) and the core, inside data, that the unit computes. */
struct tile {
	uint32_t w, h;
	struct rect data, core;
	uint8_t *pix;
};

static void fail(int code, const char *format, ...);

static uint32_t le32(const uint8_t *b) {
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void put_le32(uint8_t *b, uint32_t v) {
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
	b[2] = (uint8_t)(v >> 16);
	b[3] = (uint8_t)(v >> 24);
}

static uint32_t dx(struct rect r) { return r.x1 - r.x0; }
static uint32_t dy(struct rect r) { return r.y1 - r.y0; }

/* inside reports whether a lies inside b. */
static int inside(struct rect a, struct rect b) {
	return a.x0 >= b.x0 && a.y0 >= b.y0 && a.x1 <= b.x1 && a.y1 <= b.y1;
}

/* read_tile reads and checks one BRT1 tile from stdin. */
static void read_tile(struct tile *t) {
	uint8_t h[HEADER];
	size_t n = fread(h, 1, HEADER, stdin);
	if (ferror(stdin))
		fail(1, "read input: %s", strerror(errno));
	if (n < HEADER)
		fail(1, "input of %zu bytes is not a BRT1 tile (a %d-byte header, then pixels); split the job with tiles:WxH+HALO",
		     n, HEADER);
	if (memcmp(h, "BRT1", 4) != 0)
		fail(1, "input does not start with BRT1, so it is not a tile; split the job with tiles:WxH+HALO");
	uint32_t v[10];
	for (int i = 0; i < 10; i++)
		v[i] = le32(h + 4 + 4 * i);
	t->w = v[0];
	t->h = v[1];
	t->data = (struct rect){v[2], v[3], v[4], v[5]};
	t->core = (struct rect){v[6], v[7], v[8], v[9]};
	struct rect full = {0, 0, t->w, t->h};
	if (t->w < 1 || t->h < 1 || (uint64_t)t->w * t->h > MAX_PIXELS)
		fail(1, "tile: image size %ux%u: want at least 1x1 and at most %u pixels", t->w, t->h, MAX_PIXELS);
	if (t->data.x0 > t->data.x1 || t->data.y0 > t->data.y1 || t->core.x0 > t->core.x1 || t->core.y0 > t->core.y1)
		fail(1, "tile: inverted rectangle (each is minX, minY, maxX, maxY)");
	if (dx(t->core) == 0 || dy(t->core) == 0 || !inside(t->data, full) || !inside(t->core, t->data))
		fail(1, "tile: core (%u,%u)-(%u,%u) must be non-empty and inside data (%u,%u)-(%u,%u) inside the %ux%u image",
		     t->core.x0, t->core.y0, t->core.x1, t->core.y1, t->data.x0, t->data.y0, t->data.x1, t->data.y1, t->w, t->h);

	size_t want = (size_t)dx(t->data) * dy(t->data) * 4;
	t->pix = malloc(want);
	if (t->pix == NULL)
		fail(1, "tile: no memory for %zu bytes of pixels; use smaller tiles or raise the job's --unit-mem", want);
	n = fread(t->pix, 1, want, stdin);
	if (ferror(stdin))
		fail(1, "read input: %s", strerror(errno));
	if (n < want)
		fail(1, "tile: %zu bytes of pixels, want %zu for data (%u,%u)-(%u,%u)", n, want, t->data.x0, t->data.y0,
		     t->data.x1, t->data.y1);
	if (getchar() != EOF) {
		size_t extra = 1;
		while (getchar() != EOF)
			extra++;
		fail(1, "tile: %zu bytes of pixels, want %zu for data (%u,%u)-(%u,%u)", want + extra, want, t->data.x0,
		     t->data.y0, t->data.x1, t->data.y1);
	}
}

/* write_tile writes a BRT1 tile whose data and core are core; out holds
 * HEADER free bytes, then the pixels. */
static void write_tile(const struct tile *t, struct rect core, uint8_t *out, size_t len) {
	memcpy(out, "BRT1", 4);
	uint32_t v[10] = {t->w, t->h, core.x0, core.y0, core.x1, core.y1, core.x0, core.y0, core.x1, core.y1};
	for (int i = 0; i < 10; i++)
		put_le32(out + 4 + 4 * i, v[i]);
	if (fwrite(out, 1, len, stdout) != len || fflush(stdout) != 0)
		fail(1, "write output: %s", strerror(errno));
}

static long clamp(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }

#endif
