package ops

import (
	"context"
	"math"
)

// Grayscale returns the grayscale operation: luma (Rec. 601 weights) in
// all three colour channels, alpha kept.
func Grayscale() Op {
	return &imageOp{
		name: "grayscale",
		info: Info{Doc: "grayscale (luma) of a PNG, JPEG or GIF image; writes PNG", Tiles: true},
		prepare: func(map[string]string) (filter, error) {
			return filter{halo: 0, apply: grayTile}, nil
		},
	}
}

// luma returns the Rec. 601 luma of a premultiplied RGBA pixel. The
// weights sum to 1<<16, so luma never exceeds alpha.
func luma(p []byte) int32 {
	return (19595*int32(p[0]) + 38470*int32(p[1]) + 7471*int32(p[2]) + 1<<15) >> 16
}

func grayTile(ctx context.Context, t *tile, dst []byte) error {
	cw := t.core.Dx()
	for y := range t.core.Dy() {
		if y%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		src := t.pix[t.offset(t.core.Min.X, t.core.Min.Y+y):][:cw*4]
		out := dst[y*cw*4 : (y+1)*cw*4]
		for x := 0; x < cw*4; x += 4 {
			l := byte(luma(src[x : x+4]))
			out[x], out[x+1], out[x+2], out[x+3] = l, l, l, src[x+3]
		}
	}
	return nil
}

// Sharpen returns the sharpen operation: a 3x3 Laplacian unsharp mask,
// out = p + amount*(4p - up - down - left - right), on colour channels.
func Sharpen() Op {
	return &imageOp{
		name: "sharpen",
		info: Info{
			Doc:    "sharpen (3x3 Laplacian) a PNG, JPEG or GIF image; writes PNG",
			Tiles:  true,
			Params: []Param{{Name: "amount", Default: "1", Doc: "strength, above 0 and at most 10"}},
		},
		prepare: func(params map[string]string) (filter, error) {
			amount, _, err := floatParam("sharpen", params, "amount", 1, 0, 10)
			if err != nil {
				return filter{}, err
			}
			// Fixed point with 8 fraction bits keeps the filter exact
			// integer arithmetic on every worker.
			a := int32(math.Round(amount * 256))
			return filter{halo: 1, apply: func(ctx context.Context, t *tile, dst []byte) error {
				return sharpenTile(ctx, t, a, dst)
			}}, nil
		},
	}
}

func sharpenTile(ctx context.Context, t *tile, a int32, dst []byte) error {
	cw := t.core.Dx()
	for y := range t.core.Dy() {
		if y%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		gy := t.core.Min.Y + y
		up, mid, down := t.clampedRow(gy-1), t.clampedRow(gy), t.clampedRow(gy+1)
		out := dst[y*cw*4 : (y+1)*cw*4]
		for x := range cw {
			gx := t.core.Min.X + x
			c, l, r := 4*t.clampX(gx), 4*t.clampX(gx-1), 4*t.clampX(gx+1)
			alpha := int32(mid[c+3])
			for ch := range 3 {
				p := int32(mid[c+ch])
				lap := 4*p - int32(up[c+ch]) - int32(down[c+ch]) - int32(mid[l+ch]) - int32(mid[r+ch])
				v := p + (a*lap+128)>>8
				out[4*x+ch] = byte(min(max(v, 0), alpha))
			}
			out[4*x+3] = byte(alpha)
		}
	}
	return nil
}

// Edges returns the edge detection operation: the Sobel gradient
// magnitude of luma, as an opaque gray image.
func Edges() Op {
	return &imageOp{
		name: "edges",
		info: Info{Doc: "edge detection (Sobel gradient of luma) of a PNG, JPEG or GIF image; writes PNG", Tiles: true},
		prepare: func(map[string]string) (filter, error) {
			return filter{halo: 1, apply: edgesTile}, nil
		},
	}
}

func edgesTile(ctx context.Context, t *tile, dst []byte) error {
	// Luma of the data rectangle first, then the 3x3 Sobel on it.
	dw, dh := t.data.Dx(), t.data.Dy()
	lum := make([]int32, dw*dh)
	for i := range lum {
		lum[i] = luma(t.pix[4*i : 4*i+4])
	}
	at := func(x, y int) int32 {
		x = min(max(x-t.data.Min.X, 0), dw-1)
		y = min(max(y-t.data.Min.Y, 0), dh-1)
		return lum[y*dw+x]
	}
	cw := t.core.Dx()
	for y := range t.core.Dy() {
		if y%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		gy := t.core.Min.Y + y
		for x := range cw {
			gx := t.core.Min.X + x
			nw, n, ne := at(gx-1, gy-1), at(gx, gy-1), at(gx+1, gy-1)
			w, e := at(gx-1, gy), at(gx+1, gy)
			sw, s, se := at(gx-1, gy+1), at(gx, gy+1), at(gx+1, gy+1)
			dx := (ne + 2*e + se) - (nw + 2*w + sw)
			dy := (sw + 2*s + se) - (nw + 2*n + ne)
			// Square root is correctly rounded in IEEE 754, so every
			// worker gets the same byte.
			m := min(math.Sqrt(float64(dx*dx+dy*dy)), 255)
			o := dst[4*x+4*cw*y:]
			o[0], o[1], o[2], o[3] = byte(m), byte(m), byte(m), 255
		}
	}
	return nil
}

// offset returns the index in t.pix of the pixel at image coordinates
// (x, y), which must lie in t.data.
func (t *tile) offset(x, y int) int {
	return ((y-t.data.Min.Y)*t.data.Dx() + x - t.data.Min.X) * 4
}

// clampedRow returns the data row at image row y, clamped into t.data.
func (t *tile) clampedRow(y int) []byte {
	y = min(max(y, t.data.Min.Y), t.data.Max.Y-1) - t.data.Min.Y
	return t.pix[y*t.data.Dx()*4 : (y+1)*t.data.Dx()*4]
}

// clampX returns the column index within the data row for image column x,
// clamped into t.data.
func (t *tile) clampX(x int) int {
	return min(max(x, t.data.Min.X), t.data.Max.X-1) - t.data.Min.X
}
