/*
 * blur is braid's built-in gaussian blur (ops/blur.go) as a braid
 * operation (a WASI preview 1 module), computing the same bytes: the same
 * 16-bit fixed-point kernel, the same two passes with the same rounding,
 * the same edge clamping. It exists to compare a module with the built-in
 * on the same tiles.
 *
 * Input (stdin): one BRT1 tile, as the tiles:WxH+HALO split makes them,
 * with HALO at least the radius. Output (stdout): a BRT1 tile whose data
 * rectangle is the input's core, holding the blurred core.
 *
 * Parameters, as the built-in's radius and sigma:
 *   RADIUS  kernel radius in pixels, 1 to 200, default 5
 *   SIGMA   standard deviation in pixels, above 0 and at most 200,
 *           default RADIUS/2; given alone, it sets RADIUS to ceil(3*SIGMA)
 *
 *   clang --target=wasm32-wasi -O3 -msimd128 -o blur.wasm blur.c -lm
 *   braid op run blur.wasm --split tiles:256x256+5 --merge tiles < in.png > out.png
 *
 * Built with -msimd128 (as examples/ops/build.sh does), it computes with
 * explicit WebAssembly SIMD (blur_simd); without, in plain C (blur_scalar).
 *
 * Exit codes: 0 done, 1 bad input (the message says what is wrong),
 * 2 bad parameter.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../brt1.h"
#ifdef __wasm_simd128__
#include <wasm_simd128.h>
#endif

#define MAX_RADIUS 200
/* The kernel's weights sum to exactly 1 << WEIGHT_BITS. */
#define WEIGHT_BITS 16

/* fail prints "blur: MESSAGE" on stderr and exits with code. */
static void fail(int code, const char *format, ...) {
	va_list ap;
	fputs("blur: ", stderr);
	va_start(ap, format);
	vfprintf(stderr, format, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* trailing_space reports whether s holds only white space. */
static int trailing_space(const char *s) {
	while (is_space(*s))
		s++;
	return *s == '\0';
}

/* int_param parses the parameter name as a whole number in [lo, hi]; unset
 * or empty gives def. */
static long int_param(const char *name, long def, long lo, long hi) {
	const char *s = getenv(name);
	if (s == NULL || *s == '\0')
		return def;
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (end == s || !trailing_space(end) || errno != 0 || v < lo || v > hi)
		fail(2, "parameter %s=\"%s\": want a whole number from %ld to %ld", name, s, lo, hi);
	return v;
}

/* float_param parses the parameter name as a number in (lo, hi] and
 * reports in *given whether it was set; unset or empty gives def. */
static double float_param(const char *name, double def, double lo, double hi, int *given) {
	const char *s = getenv(name);
	*given = 0;
	if (s == NULL || *s == '\0')
		return def;
	char *end;
	double v = strtod(s, &end);
	if (end == s || !trailing_space(end) || isnan(v) || v <= lo || v > hi)
		fail(2, "parameter %s=\"%s\": want a number above %g and at most %g", name, s, lo, hi);
	*given = 1;
	return v;
}

/* kernel returns the 2*r+1 weights of a gaussian with the given sigma,
 * summing to exactly 1 << WEIGHT_BITS, computed as ops/blur.go's
 * gaussKernel does: in double, rounded half away from zero, the centre
 * absorbing what the rounding missed. */
static uint32_t *kernel(int r, double sigma) {
	double *f = malloc((size_t)(2 * r + 1) * sizeof *f);
	uint32_t *k = malloc((size_t)(2 * r + 1) * sizeof *k);
	if (f == NULL || k == NULL)
		fail(1, "no memory for the kernel");
	double sum = 0;
	for (int i = 0; i <= 2 * r; i++) {
		double d = (double)(i - r);
		f[i] = exp(-d * d / (2 * sigma * sigma));
		sum += f[i];
	}
	uint32_t total = 0;
	for (int i = 0; i <= 2 * r; i++) {
		k[i] = (uint32_t)round(f[i] / sum * (1 << WEIGHT_BITS));
		total += k[i];
	}
	k[r] += (1u << WEIGHT_BITS) - total;
	free(f);
	return k;
}


/* blur_h computes the horizontal pass of data row y for the core columns
 * into out (4 values a pixel): the weighted sum with 8 fraction bits,
 * rounded half up. It reads beyond the data rectangle as its edge pixel.
 * pad holds cw+2r pixels; acc cw*4 sums. A sum is at most 255 << 16, so
 * 32 bits hold it, and the result at most 255 << 8, so 16 bits do. */
static void blur_h(const struct tile *t, const uint32_t *k, int r, long y, uint8_t *pad, uint32_t *acc,
		   uint16_t *out) {
	long dw = dx(t->data), cw = dx(t->core), cx = t->core.x0 - t->data.x0;
	const uint8_t *row = t->pix + (size_t)y * dw * 4;
	for (long j = 0; j < cw + 2 * r; j++)
		memcpy(pad + 4 * j, row + 4 * clamp(cx - r + j, 0, dw - 1), 4);
	/* pad[4*(x+r+d)] is the pixel at distance d from core column x. */
	uint32_t w = k[r];
	for (long i = 0; i < cw * 4; i++)
		acc[i] = w * pad[4 * r + i];
	/* Two distances a sweep over acc halve its loads and stores. */
	int d = 1;
	for (; d + 1 <= r; d += 2) {
		const uint8_t *a = pad + 4 * (r - d), *b = pad + 4 * (r + d);
		const uint8_t *a2 = pad + 4 * (r - d - 1), *b2 = pad + 4 * (r + d + 1);
		uint32_t w1 = k[r + d], w2 = k[r + d + 1];
		for (long i = 0; i < cw * 4; i++)
			acc[i] += w1 * ((uint32_t)a[i] + b[i]) + w2 * ((uint32_t)a2[i] + b2[i]);
	}
	if (d <= r) {
		const uint8_t *a = pad + 4 * (r - d), *b = pad + 4 * (r + d);
		w = k[r + d];
		for (long i = 0; i < cw * 4; i++)
			acc[i] += w * ((uint32_t)a[i] + b[i]);
	}
	for (long i = 0; i < cw * 4; i++)
		out[i] = (uint16_t)((acc[i] + (1u << 7)) >> 8);
}

/* blur_scalar writes the gaussian blur of t's core into dst, row by row. The
 * horizontal pass keeps only the 2r+1 rows the vertical pass needs, in a
 * ring indexed by data row modulo 2r+1: the rows one output row reads are
 * consecutive, so they never share a slot. */
static void blur_scalar(const struct tile *t, const uint32_t *k, int r, uint8_t *dst) {
	long dh = dy(t->data), cw = dx(t->core), ch = dy(t->core), cy = t->core.y0 - t->data.y0;
	long slots = 2 * r + 1;
	uint16_t *ring = malloc((size_t)slots * cw * 4 * sizeof *ring);
	uint8_t *pad = malloc((size_t)(cw + 2 * r) * 4);
	uint32_t *acc = malloc((size_t)cw * 4 * sizeof *acc);
	if (ring == NULL || pad == NULL || acc == NULL)
		fail(1, "no memory for a tile %ld pixels wide; use smaller tiles or raise the job's --unit-mem", cw);
	long next = clamp(cy - r, 0, dh - 1); /* the next data row to pass horizontally */
	for (long y = 0; y < ch; y++) {
		for (long last = clamp(cy + y + r, 0, dh - 1); next <= last; next++)
			blur_h(t, k, r, next, pad, acc, ring + (size_t)(next % slots) * cw * 4);
		/* At most 65280 << 16 per sum: 32 bits hold it with the rounding. */
		const uint16_t *c = ring + (size_t)(clamp(cy + y, 0, dh - 1) % slots) * cw * 4;
		uint32_t w = k[r];
		for (long i = 0; i < cw * 4; i++)
			acc[i] = w * c[i];
		int d = 1;
		for (; d + 1 <= r; d += 2) {
			const uint16_t *a = ring + (size_t)(clamp(cy + y - d, 0, dh - 1) % slots) * cw * 4;
			const uint16_t *b = ring + (size_t)(clamp(cy + y + d, 0, dh - 1) % slots) * cw * 4;
			const uint16_t *a2 = ring + (size_t)(clamp(cy + y - d - 1, 0, dh - 1) % slots) * cw * 4;
			const uint16_t *b2 = ring + (size_t)(clamp(cy + y + d + 1, 0, dh - 1) % slots) * cw * 4;
			uint32_t w1 = k[r + d], w2 = k[r + d + 1];
			for (long i = 0; i < cw * 4; i++)
				acc[i] += w1 * ((uint32_t)a[i] + b[i]) + w2 * ((uint32_t)a2[i] + b2[i]);
		}
		if (d <= r) {
			const uint16_t *a = ring + (size_t)(clamp(cy + y - d, 0, dh - 1) % slots) * cw * 4;
			const uint16_t *b = ring + (size_t)(clamp(cy + y + d, 0, dh - 1) % slots) * cw * 4;
			w = k[r + d];
			for (long i = 0; i < cw * 4; i++)
				acc[i] += w * ((uint32_t)a[i] + b[i]);
		}
		uint8_t *o = dst + (size_t)y * cw * 4;
		for (long i = 0; i < cw * 4; i++)
			o[i] = (uint8_t)((acc[i] + (1u << 23)) >> 24);
	}
	free(ring);
	free(pad);
	free(acc);
}

#ifdef __wasm_simd128__
/*
 * The SIMD path (WebAssembly SIMD, built with -msimd128, wasm_simd128.h): the same sums as
 * blur_h and blur, exact, in i32x4.dot_i16x8_s, which multiplies 16-bit
 * lanes and adds pairs of products into 32-bit lanes. Against a weight
 * vector (w, 0, w, 0, ...) it gives w times the even 16-bit lanes (R and
 * B of two pixels), against (0, w, 0, w, ...) w times the odd ones (G and
 * A): the built-in's two channels a word, in one instruction. dot is
 * signed, so every weight must be below 1 << 15 (simd_ok; otherwise
 * blur_scalar runs), and the vertical pass reads its rows biased by
 * -32768 (stored with the top bit flipped): the bias costs
 * 32768 * (the weights' sum, exactly 1 << 16) = 1 << 31 per sum, added
 * back before the shift, modulo 1 << 32 as the sum itself fits 32 bits.
 * The sums of one group of 4 pixels (16 values) stay in registers across
 * the whole kernel; a row is read with one 16-byte load a tap.
 */

/* simd_ok reports whether every weight fits a signed 16-bit lane. */
static int simd_ok(const uint32_t *k, int r) {
	for (int i = 0; i <= 2 * r; i++)
		if (k[i] >= 1u << 15)
			return 0;
	return 1;
}

#define INLINE static inline __attribute__((always_inline))

/* hrow computes the horizontal pass of one row for groups groups of 4
 * pixels: pad holds 4*groups+2r pixels, edge pixels repeated; out gets
 * (sum + 128) >> 8 a value, top bit flipped. we[d] and wo[d] are the
 * even and odd weight vectors of distance d. */
INLINE void hrow(const uint8_t *pad, int r, const v128_t *we, const v128_t *wo, long groups, uint16_t *out) {
	const v128_t rnd = wasm_i32x4_splat(1 << 7), flip = wasm_i32x4_splat((int32_t)0x80008000u);
	for (long i = 0; i < groups; i++) {
		const uint8_t *p = pad + 16 * i + 4 * r;
		v128_t lo = wasm_u16x8_load8x8(p), hi = wasm_u16x8_load8x8(p + 8);
		v128_t el = wasm_i32x4_dot_i16x8(lo, we[0]), ol = wasm_i32x4_dot_i16x8(lo, wo[0]);
		v128_t eh = wasm_i32x4_dot_i16x8(hi, we[0]), oh = wasm_i32x4_dot_i16x8(hi, wo[0]);
		for (int d = 1; d <= r; d++) {
			/* At most 510 a lane: a signed 16-bit lane holds it. */
			v128_t sl = wasm_i16x8_add(wasm_u16x8_load8x8(p - 4 * d), wasm_u16x8_load8x8(p + 4 * d));
			v128_t sh = wasm_i16x8_add(wasm_u16x8_load8x8(p - 4 * d + 8), wasm_u16x8_load8x8(p + 4 * d + 8));
			el = wasm_i32x4_add(el, wasm_i32x4_dot_i16x8(sl, we[d]));
			ol = wasm_i32x4_add(ol, wasm_i32x4_dot_i16x8(sl, wo[d]));
			eh = wasm_i32x4_add(eh, wasm_i32x4_dot_i16x8(sh, we[d]));
			oh = wasm_i32x4_add(oh, wasm_i32x4_dot_i16x8(sh, wo[d]));
		}
		el = wasm_u32x4_shr(wasm_i32x4_add(el, rnd), 8);
		ol = wasm_u32x4_shr(wasm_i32x4_add(ol, rnd), 8);
		eh = wasm_u32x4_shr(wasm_i32x4_add(eh, rnd), 8);
		oh = wasm_u32x4_shr(wasm_i32x4_add(oh, rnd), 8);
		/* At most 65280 a value: even | odd << 16 is the 8 values in order. */
		wasm_v128_store(out + 16 * i, wasm_v128_xor(wasm_v128_or(el, wasm_i32x4_shl(ol, 16)), flip));
		wasm_v128_store(out + 16 * i + 8, wasm_v128_xor(wasm_v128_or(eh, wasm_i32x4_shl(oh, 16)), flip));
	}
}

/* vrow computes one output row for groups groups of 4 pixels from the
 * 2r+1 horizontal rows rows[0..2r] (rows[r] the centre) into o. */
INLINE void vrow(const uint16_t *const *rows, int r, const v128_t *we, const v128_t *wo, long groups, uint8_t *o) {
	/* 1 << 31 undoes the rows' bias, 1 << 23 rounds half up. */
	const v128_t bias = wasm_i32x4_splat((int32_t)(1u << 31 | 1u << 23));
	for (long i = 0; i < groups; i++) {
		v128_t e0 = wasm_i32x4_splat(0), o0 = e0, e1 = e0, o1 = e0;
		for (int t = 0; t <= 2 * r; t++) {
			int d = t < r ? r - t : t - r;
			const uint16_t *p = rows[t] + 16 * i;
			v128_t v0 = wasm_v128_load(p), v1 = wasm_v128_load(p + 8);
			e0 = wasm_i32x4_add(e0, wasm_i32x4_dot_i16x8(v0, we[d]));
			o0 = wasm_i32x4_add(o0, wasm_i32x4_dot_i16x8(v0, wo[d]));
			e1 = wasm_i32x4_add(e1, wasm_i32x4_dot_i16x8(v1, we[d]));
			o1 = wasm_i32x4_add(o1, wasm_i32x4_dot_i16x8(v1, wo[d]));
		}
		e0 = wasm_u32x4_shr(wasm_i32x4_add(e0, bias), 24);
		o0 = wasm_u32x4_shr(wasm_i32x4_add(o0, bias), 24);
		e1 = wasm_u32x4_shr(wasm_i32x4_add(e1, bias), 24);
		o1 = wasm_u32x4_shr(wasm_i32x4_add(o1, bias), 24);
		/* Lanes R | G << 8 and B | A << 8: narrowed, the 16 bytes in order. */
		v128_t x0 = wasm_v128_or(e0, wasm_i32x4_shl(o0, 8)), x1 = wasm_v128_or(e1, wasm_i32x4_shl(o1, 8));
		wasm_v128_store(o + 16 * i, wasm_u16x8_narrow_i32x4(x0, x1));
	}
}

/* fill_pad sets pad's n pixels to row's pixels from column start on,
 * columns beyond [0, dw) reading the edge pixel. */
static void fill_pad(const uint8_t *row, long dw, long start, long n, uint8_t *pad) {
	long j = 0;
	for (; j < n && start + j < 0; j++)
		memcpy(pad + 4 * j, row, 4);
	long end = dw - start < n ? dw - start : n;
	if (end > j) {
		memcpy(pad + 4 * j, row + 4 * (start + j), (size_t)(end - j) * 4);
		j = end;
	}
	for (; j < n; j++)
		memcpy(pad + 4 * j, row + 4 * (dw - 1), 4);
}

/* blur_simd is blur on the SIMD path (simd_ok(k, r) must hold). Rows are
 * padded to whole groups of 4 pixels; what the padding computes is not
 * written out. */
static void blur_simd(const struct tile *t, const uint32_t *k, int r, uint8_t *dst) {
	static v128_t we[MAX_RADIUS + 1], wo[MAX_RADIUS + 1];
	static const uint16_t *rows[2 * MAX_RADIUS + 1];
	long dw = dx(t->data), dh = dy(t->data), cw = dx(t->core), ch = dy(t->core);
	long cx = t->core.x0 - t->data.x0, cy = t->core.y0 - t->data.y0;
	long groups = (cw + 3) / 4, stride = groups * 16, slots = 2 * r + 1, npad = 4 * groups + 2 * r;
	for (int d = 0; d <= r; d++) {
		we[d] = wasm_i32x4_splat((int32_t)k[r + d]);
		wo[d] = wasm_i32x4_splat((int32_t)(k[r + d] << 16));
	}
	uint16_t *ring = aligned_alloc(16, (size_t)slots * stride * sizeof *ring);
	uint8_t *pad = aligned_alloc(16, (size_t)npad * 4);
	uint8_t *line = aligned_alloc(16, (size_t)groups * 16);
	if (ring == NULL || pad == NULL || line == NULL)
		fail(1, "no memory for a tile %ld pixels wide; use smaller tiles or raise the job's --unit-mem", cw);
	long next = clamp(cy - r, 0, dh - 1);
	for (long y = 0; y < ch; y++) {
		for (long last = clamp(cy + y + r, 0, dh - 1); next <= last; next++) {
			fill_pad(t->pix + (size_t)next * dw * 4, dw, cx - r, npad, pad);
			uint16_t *out = ring + (size_t)(next % slots) * stride;
			if (r == 5)
				hrow(pad, 5, we, wo, groups, out);
			else
				hrow(pad, r, we, wo, groups, out);
		}
		for (int i = 0; i <= 2 * r; i++)
			rows[i] = ring + (size_t)(clamp(cy + y - r + i, 0, dh - 1) % slots) * stride;
		uint8_t *o = cw % 4 == 0 ? dst + (size_t)y * cw * 4 : line;
		if (r == 5)
			vrow(rows, 5, we, wo, groups, o);
		else
			vrow(rows, r, we, wo, groups, o);
		if (o == line)
			memcpy(dst + (size_t)y * cw * 4, line, (size_t)cw * 4);
	}
	free(ring);
	free(pad);
	free(line);
}
#endif

int main(void) {
	int given;
	int r = (int)int_param("RADIUS", 0, 1, MAX_RADIUS);
	double sigma = float_param("SIGMA", 0, 0, MAX_RADIUS, &given);
	if (r == 0 && given) {
		double need = ceil(3 * sigma);
		if (need > MAX_RADIUS)
			fail(2, "SIGMA=%g needs RADIUS=%g, more than %d; give a smaller SIGMA", sigma, need, MAX_RADIUS);
		r = (int)need;
	} else if (r == 0) {
		r = 5;
	}
	if (!given)
		sigma = (double)r / 2;
	if (2 * sigma * sigma == 0)
		fail(2, "SIGMA=%g is too small to compute a kernel with; give at least 1e-150", sigma);
	uint32_t *k = kernel(r, sigma);

	struct tile t;
	read_tile(&t);
	/* The pixels within r of the core, as far as the image goes. */
	struct rect need = {
		(uint32_t)clamp((long)t.core.x0 - r, 0, t.w), (uint32_t)clamp((long)t.core.y0 - r, 0, t.h),
		(uint32_t)clamp((long)t.core.x1 + r, 0, t.w), (uint32_t)clamp((long)t.core.y1 + r, 0, t.h),
	};
	if (!inside(need, t.data))
		fail(1, "tile with core (%u,%u)-(%u,%u) carries data (%u,%u)-(%u,%u) but RADIUS=%d reads (%u,%u)-(%u,%u); "
			"split with a halo of at least the radius, tiles:WxH+%d",
		     t.core.x0, t.core.y0, t.core.x1, t.core.y1, t.data.x0, t.data.y0, t.data.x1, t.data.y1, r, need.x0,
		     need.y0, need.x1, need.y1, r);

	size_t len = HEADER + (size_t)dx(t.core) * dy(t.core) * 4;
	uint8_t *out = malloc(len);
	if (out == NULL)
		fail(1, "no memory for the %zu-byte result; use smaller tiles or raise the job's --unit-mem", len);
#ifdef __wasm_simd128__
	if (simd_ok(k, r))
		blur_simd(&t, k, r, out + HEADER);
	else
#endif
		blur_scalar(&t, k, r, out + HEADER);
	write_tile(&t, t.core, out, len);
	return 0;
}
