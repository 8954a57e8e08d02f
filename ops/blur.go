package ops

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
)

// MaxRadius bounds the blur radius.
const MaxRadius = 200

// Blur returns the gaussian blur operation. Parameters: radius (pixels,
// default 5) and sigma (default radius/2); given only sigma, the radius is
// ceil(3*sigma).
func Blur() Op {
	return &imageOp{
		name: "blur",
		info: Info{
			Doc:   "gaussian blur of a PNG, JPEG or GIF image; writes PNG",
			Tiles: true,
			Params: []Param{
				{Name: "radius", Default: "5", Doc: "kernel radius in pixels, 1 to " + strconv.Itoa(MaxRadius) + "; the tile halo"},
				{Name: "sigma", Default: "radius/2", Doc: "standard deviation in pixels; alone, it sets radius to ceil(3*sigma)"},
			},
		},
		prepare: prepareBlur,
	}
}

func prepareBlur(params map[string]string) (filter, error) {
	radius, err := intParam("blur", params, "radius", 0, 1, MaxRadius)
	if err != nil {
		return filter{}, err
	}
	sigma, hasSigma, err := floatParam("blur", params, "sigma", 0, 0, MaxRadius)
	if err != nil {
		return filter{}, err
	}
	switch {
	case radius == 0 && hasSigma:
		radius = int(math.Ceil(3 * sigma))
		if radius > MaxRadius {
			return filter{}, fmt.Errorf("blur: sigma %g needs radius %d, more than %d; give a smaller sigma: %w", sigma, radius, MaxRadius, ErrBadParam)
		}
	case radius == 0:
		radius = 5
	}
	if !hasSigma {
		sigma = float64(radius) / 2
	}
	k := gaussKernel(radius, sigma)
	return filter{halo: radius, apply: func(ctx context.Context, t *tile, dst []byte) error {
		return blurTile(ctx, t, k, dst)
	}}, nil
}

// weightBits is the fixed-point precision of kernel weights: they sum to
// exactly 1<<weightBits.
const weightBits = 16

// gaussKernel returns 2*radius+1 integer weights of a gaussian with the
// given sigma, summing to exactly 1<<weightBits. The weights are computed
// in float64 and rounded, so every worker on the same platform derives
// the same kernel.
func gaussKernel(radius int, sigma float64) []uint64 {
	f := make([]float64, 2*radius+1)
	sum := 0.0
	for i := range f {
		d := float64(i - radius)
		f[i] = math.Exp(-d * d / (2 * sigma * sigma))
		sum += f[i]
	}
	k := make([]uint64, len(f))
	total := uint64(0)
	for i := range f {
		k[i] = uint64(math.Round(f[i] / sum * (1 << weightBits)))
		total += k[i]
	}
	// Rounding may miss the exact sum; the centre absorbs the difference
	// (it is the largest weight, so it stays positive).
	k[radius] += 1<<weightBits - total
	return k
}

// Lanes: a uint64 holds two channels in 32-bit lanes (R and B, or G and
// A). The horizontal pass sums at most 255<<16 per lane and keeps 16 bits
// (8 of them fraction); the vertical pass sums at most 65280<<16 < 1<<32.
// Neither overflows a lane, so each pass costs two multiplies a tap per
// pixel instead of four; the kernel's symmetry halves that again, as the
// two pixels at the same distance are added before the multiply.
type lanes struct{ rb, ga uint64 }

const (
	lo16 = 0xffff
	// roundH and roundV round half up before the passes drop bits.
	roundH = 1<<7 | 1<<39
	roundV = 1<<23 | 1<<55
)

// scratch is blurTile's working memory, reused through scratchPool.
type scratch struct{ mid, pad, acc []lanes }

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func grow(s []lanes, n int) []lanes {
	if cap(s) < n {
		return make([]lanes, n)
	}
	return s[:n]
}

// blurTile blurs the core of t with the separable kernel k into dst
// (core.Dx()*core.Dy()*4 bytes), reading pixels beyond the data
// rectangle's edge as the edge pixel (which, for a tile with a full halo,
// is what the whole image would read).
func blurTile(ctx context.Context, t *tile, k []uint64, dst []byte) error {
	r := len(k) / 2
	half := k[r:] // half[i] weighs the pixels at distance i
	dw, dh := t.data.Dx(), t.data.Dy()
	cw, ch := t.core.Dx(), t.core.Dy()
	cx, cy := t.core.Min.X-t.data.Min.X, t.core.Min.Y-t.data.Min.Y

	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	s.mid = grow(s.mid, cw*dh)
	s.pad = grow(s.pad, cw+2*r)
	s.acc = grow(s.acc, cw)
	mid, pad, acc := s.mid, s.pad, s.acc

	// Horizontal pass over every data row, for the core columns only.
	padAt := func(d int) []lanes { return pad[r+d : r+d+cw] }
	for y := range dh {
		if y%64 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		row := t.pix[y*dw*4 : (y+1)*dw*4]
		for j := range pad {
			x := min(max(cx-r+j, 0), dw-1) * 4
			p := row[x : x+4 : x+4]
			pad[j] = lanes{uint64(p[0]) | uint64(p[2])<<32, uint64(p[1]) | uint64(p[3])<<32}
		}
		weigh(acc, half, padAt)
		out := mid[cw*y : cw*(y+1)]
		out = out[:len(acc)]
		for x, a := range acc {
			rb, ga := a.rb+roundH, a.ga+roundH
			out[x] = lanes{rb>>8&lo16 | rb>>40<<32, ga>>8&lo16 | ga>>40<<32}
		}
	}

	// Vertical pass over the core rows.
	for y := range ch {
		if y%64 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		weigh(acc, half, func(d int) []lanes {
			yy := min(max(cy+y+d, 0), dh-1)
			return mid[cw*yy : cw*(yy+1)]
		})
		out := dst[y*cw*4 : (y+1)*cw*4]
		for x, a := range acc {
			rb, ga := a.rb+roundV, a.ga+roundV
			o := out[4*x : 4*x+4 : 4*x+4]
			o[0] = byte(rb >> 24)
			o[1] = byte(ga >> 24)
			o[2] = byte(rb >> 56)
			o[3] = byte(ga >> 56)
		}
	}
	return nil
}

// weigh sets acc[x] to the kernel's weighted sum of the rows at(d)[x] for
// d in [-r, r], where half[i] weighs distance i. Two distances are added
// per sweep over acc, which halves the loads and stores of acc.
func weigh(acc []lanes, half []uint64, at func(d int) []lanes) {
	n := len(acc)
	c := at(0)[:n]
	w0 := half[0]
	i := 1
	if len(half) > 1 {
		a, b := at(-1)[:n], at(1)[:n]
		w1 := half[1]
		for x := range acc {
			acc[x] = lanes{
				w0*c[x].rb + w1*(a[x].rb+b[x].rb),
				w0*c[x].ga + w1*(a[x].ga+b[x].ga),
			}
		}
		i = 2
	} else {
		for x := range acc {
			acc[x] = lanes{w0 * c[x].rb, w0 * c[x].ga}
		}
	}
	for ; i+1 < len(half); i += 2 {
		a1, b1, a2, b2 := at(-i)[:n], at(i)[:n], at(-i - 1)[:n], at(i + 1)[:n]
		w1, w2 := half[i], half[i+1]
		for x := range acc {
			acc[x].rb += w1*(a1[x].rb+b1[x].rb) + w2*(a2[x].rb+b2[x].rb)
			acc[x].ga += w1*(a1[x].ga+b1[x].ga) + w2*(a2[x].ga+b2[x].ga)
		}
	}
	if i < len(half) {
		a, b := at(-i)[:n], at(i)[:n]
		w := half[i]
		for x := range acc {
			acc[x].rb += w * (a[x].rb + b[x].rb)
			acc[x].ga += w * (a[x].ga + b[x].ga)
		}
	}
}
