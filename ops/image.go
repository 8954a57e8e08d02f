package ops

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/draw"
	_ "image/gif" // GIF input: the first frame
	_ "image/jpeg"
	"image/png"
	"io"
)

// MaxPixels bounds the size of an image an operation decodes, so a small
// file claiming huge dimensions cannot exhaust memory.
const MaxPixels = 1 << 27

// filter is an image operation prepared with its parameters.
type filter struct {
	// halo is how many pixels around a tile the filter reads.
	halo int
	// apply computes the core of t into dst as RGBA bytes, row by row,
	// core.Dx()*4 bytes a row.
	apply func(ctx context.Context, t *tile, dst []byte) error
}

// imageOp is an image operation: the splitting, tiling and assembling
// are common, the filter differs.
type imageOp struct {
	name string
	info Info
	// prepare validates params and returns the filter they configure.
	prepare func(params map[string]string) (filter, error)
}

func (o *imageOp) Name() string { return o.name }
func (o *imageOp) Info() Info   { return o.info }

func (o *imageOp) filter(params map[string]string) (filter, error) {
	if err := checkParams(o.name, o.info.Params, params); err != nil {
		return filter{}, err
	}
	return o.prepare(params)
}

// Split decodes the image and cuts it into tiles (Hint.TileW x TileH), or
// horizontal strips (Hint.Units), each with a halo. Without either, the
// single unit carries the input file itself.
func (o *imageOp) Split(in io.ReaderAt, size int64, params map[string]string, hint Hint) ([]UnitSpec, error) {
	if err := hint.check(o.name, true); err != nil {
		return nil, err
	}
	f, err := o.filter(params)
	if err != nil {
		return nil, err
	}
	cfg, err := decodeConfig(o.name, io.NewSectionReader(in, 0, size))
	if err != nil {
		return nil, err
	}
	tw, th := tileSize(cfg.Width, cfg.Height, hint)
	n := ceilDiv(cfg.Width, tw) * ceilDiv(cfg.Height, th)
	if err := checkUnits(o.name, n, hint); err != nil {
		return nil, err
	}
	if n == 1 && !hint.tiled() {
		// The unit carries the file as is: the worker decodes it, so
		// the pixels need not be decoded here. A file whose header is
		// sound but whose pixels are corrupt fails in that unit.
		return repeat([]UnitSpec{{Params: params, FromInput: true, Len: size}}, hint.copies()), nil
	}
	img, err := decodeImage(o.name, io.NewSectionReader(in, 0, size))
	if err != nil {
		return nil, err
	}
	full := img.Rect
	specs := make([]UnitSpec, 0, n)
	for y := 0; y < full.Dy(); y += th {
		for x := 0; x < full.Dx(); x += tw {
			core := image.Rect(x, y, min(x+tw, full.Dx()), min(y+th, full.Dy()))
			data := core.Inset(-f.halo).Intersect(full)
			t := &tile{w: full.Dx(), h: full.Dy(), data: data, core: core, pix: cropPix(img, data)}
			specs = append(specs, UnitSpec{Params: params, Data: t.encode()})
		}
	}
	return repeat(specs, hint.copies()), nil
}

// tileSize returns the tile size that hint asks for on a w x h image.
func tileSize(w, h int, hint Hint) (tw, th int) {
	switch {
	case hint.tiled():
		return hint.TileW, hint.TileH
	case hint.Units > 1:
		return w, ceilDiv(h, min(hint.Units, h))
	}
	return w, h
}

// Run applies the filter to one unit: a tile made by Split, or a whole
// encoded image. The result is a tile holding just the core.
func (o *imageOp) Run(ctx context.Context, params map[string]string, inputs [][]byte) ([]byte, error) {
	if len(inputs) != 1 {
		return nil, fmt.Errorf("%s: want 1 input (a tile or an image), got %d: %w", o.name, len(inputs), ErrBadInput)
	}
	f, err := o.filter(params)
	if err != nil {
		return nil, err
	}
	var t *tile
	if bytes.HasPrefix(inputs[0], []byte(tileMagic)) {
		if t, err = decodeTile(o.name, inputs[0]); err != nil {
			return nil, err
		}
	} else {
		img, err := decodeImage(o.name, bytes.NewReader(inputs[0]))
		if err != nil {
			return nil, err
		}
		t = &tile{w: img.Rect.Dx(), h: img.Rect.Dy(), data: img.Rect, core: img.Rect, pix: img.Pix}
	}
	if need := t.core.Inset(-f.halo).Intersect(t.full()); !need.In(t.data) {
		return nil, fmt.Errorf("%s: tile %v carries data %v but the filter reads %v; split with the same parameters: %w",
			o.name, t.core, t.data, need, ErrBadInput)
	}
	out := tile{w: t.w, h: t.h, data: t.core, core: t.core}
	b := out.appendHeader(make([]byte, 0, tileHeader+t.core.Dx()*t.core.Dy()*4))
	b = b[:cap(b)]
	if err := f.apply(ctx, t, b[tileHeader:]); err != nil {
		return nil, err
	}
	return b, nil
}

// Assemble places the result tiles into one image and encodes it as PNG.
// The tiles must cover the image exactly once.
func (o *imageOp) Assemble(_ map[string]string, hint Hint, results [][]byte) ([]byte, error) {
	results, err := firstCopy(o.name, results, hint)
	if err != nil {
		return nil, err
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("%s: assemble: no results: %w", o.name, ErrBadInput)
	}
	var img *image.RGBA
	var covered []uint64
	area := 0
	for i, b := range results {
		t, err := decodeTile(o.name, b)
		if err != nil {
			return nil, fmt.Errorf("%s: assemble: result %d: %w", o.name, i, err)
		}
		if img == nil {
			img = image.NewRGBA(t.full())
			covered = make([]uint64, (t.w*t.h+63)/64)
		}
		if t.full() != img.Rect || t.data != t.core {
			return nil, fmt.Errorf("%s: assemble: result %d is a %v tile of a %dx%d image, want a result tile of %v: %w",
				o.name, i, t.data, t.w, t.h, img.Rect, ErrBadInput)
		}
		for y := t.core.Min.Y; y < t.core.Max.Y; y++ {
			for x := t.core.Min.X; x < t.core.Max.X; x++ {
				k := y*t.w + x
				if covered[k/64]&(1<<(k%64)) != 0 {
					return nil, fmt.Errorf("%s: assemble: result %d overlaps another at (%d,%d): %w", o.name, i, x, y, ErrBadInput)
				}
				covered[k/64] |= 1 << (k % 64)
			}
			row := t.pix[(y-t.core.Min.Y)*t.core.Dx()*4:][:t.core.Dx()*4]
			copy(img.Pix[img.PixOffset(t.core.Min.X, y):], row)
		}
		area += t.core.Dx() * t.core.Dy()
	}
	if area != img.Rect.Dx()*img.Rect.Dy() {
		return nil, fmt.Errorf("%s: assemble: results cover %d of %d pixels: %w", o.name, area, img.Rect.Dx()*img.Rect.Dy(), ErrBadInput)
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("%s: encode PNG: %w", o.name, err)
	}
	return buf.Bytes(), nil
}

// decodeImage decodes a PNG, JPEG or GIF into premultiplied RGBA with its
// origin at (0, 0).
func decodeImage(op string, r io.ReadSeeker) (*image.RGBA, error) {
	cfg, err := decodeConfig(op, r)
	if err != nil {
		return nil, err
	}
	format := cfg.format
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("%s: read input: %w", op, err)
	}
	src, _, err := image.Decode(r)
	if err != nil {
		return nil, fmt.Errorf("%s: corrupt %s image: %v: %w", op, format, err, ErrBadInput)
	}
	b := src.Bounds()
	if rgba, ok := src.(*image.RGBA); ok && b.Min == (image.Point{}) && rgba.Stride == 4*b.Dx() {
		return rgba, nil
	}
	dst := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(dst, dst.Rect, src, b.Min, draw.Src)
	return dst, nil
}

// imageConfig is an image's format and size.
type imageConfig struct {
	image.Config
	format string
}

// decodeConfig reads an image's header and checks its size.
func decodeConfig(op string, r io.Reader) (imageConfig, error) {
	cfg, format, err := image.DecodeConfig(r)
	if err != nil {
		if errors.Is(err, image.ErrFormat) {
			return imageConfig{}, fmt.Errorf("%s: input is not a PNG, JPEG or GIF image: %w", op, ErrBadInput)
		}
		return imageConfig{}, fmt.Errorf("%s: corrupt image header: %v: %w", op, err, ErrBadInput)
	}
	if cfg.Width < 1 || cfg.Height < 1 || int64(cfg.Width)*int64(cfg.Height) > MaxPixels {
		return imageConfig{}, fmt.Errorf("%s: %s image of %dx%d pixels: want at least 1x1 and at most %d pixels: %w",
			op, format, cfg.Width, cfg.Height, MaxPixels, ErrBadInput)
	}
	return imageConfig{cfg, format}, nil
}

// cropPix copies the pixels of r out of img, 4*r.Dx() bytes a row.
func cropPix(img *image.RGBA, r image.Rectangle) []byte {
	out := make([]byte, 0, r.Dx()*r.Dy()*4)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		i := img.PixOffset(r.Min.X, y)
		out = append(out, img.Pix[i:i+r.Dx()*4]...)
	}
	return out
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// tileMagic starts every encoded tile; image files never start with it.
const tileMagic = "BRT1"

// tileHeader is the encoded size of a tile without its pixels: the magic
// and ten little-endian uint32s (w, h, data rect, core rect).
const tileHeader = len(tileMagic) + 10*4

// tile is a rectangle of an image in premultiplied RGBA. data is where pix
// lies in the full w x h image; core, inside data, is the part a unit
// computes. The rest of data is the halo the filter reads.
type tile struct {
	w, h       int
	data, core image.Rectangle
	pix        []byte
}

func (t *tile) full() image.Rectangle { return image.Rect(0, 0, t.w, t.h) }

func (t *tile) encode() []byte {
	b := t.appendHeader(make([]byte, 0, tileHeader+len(t.pix)))
	return append(b, t.pix...)
}

func (t *tile) appendHeader(b []byte) []byte {
	b = append(b, tileMagic...)
	for _, v := range [...]int{t.w, t.h, t.data.Min.X, t.data.Min.Y, t.data.Max.X, t.data.Max.Y,
		t.core.Min.X, t.core.Min.Y, t.core.Max.X, t.core.Max.Y} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}

// decodeTile parses an encoded tile; pix aliases b.
func decodeTile(op string, b []byte) (*tile, error) {
	if len(b) < tileHeader || string(b[:len(tileMagic)]) != tileMagic {
		return nil, fmt.Errorf("%s: tile: %d bytes, not an encoded tile: %w", op, len(b), ErrBadInput)
	}
	var v [10]int
	for i := range v {
		u := binary.LittleEndian.Uint32(b[len(tileMagic)+4*i:])
		if u > MaxPixels {
			return nil, fmt.Errorf("%s: tile: header field %d is %d, too large: %w", op, i, u, ErrBadInput)
		}
		v[i] = int(u)
	}
	t := &tile{w: v[0], h: v[1], data: image.Rect(v[2], v[3], v[4], v[5]), core: image.Rect(v[6], v[7], v[8], v[9])}
	switch {
	case t.w < 1 || t.h < 1 || t.w*t.h > MaxPixels:
		return nil, fmt.Errorf("%s: tile: image size %dx%d out of range: %w", op, t.w, t.h, ErrBadInput)
	// image.Rect sorts its corners; an encoded rectangle must already be.
	case v[2] > v[4] || v[3] > v[5] || v[6] > v[8] || v[7] > v[9]:
		return nil, fmt.Errorf("%s: tile: inverted rectangle: %w", op, ErrBadInput)
	case t.core.Empty() || !t.data.In(t.full()) || !t.core.In(t.data):
		return nil, fmt.Errorf("%s: tile: core %v must be non-empty and inside data %v inside the %dx%d image: %w",
			op, t.core, t.data, t.w, t.h, ErrBadInput)
	}
	if want := t.data.Dx() * t.data.Dy() * 4; len(b)-tileHeader != want {
		return nil, fmt.Errorf("%s: tile: %d bytes of pixels, want %d for %v: %w", op, len(b)-tileHeader, want, t.data, ErrBadInput)
	}
	t.pix = b[tileHeader:]
	return t, nil
}
