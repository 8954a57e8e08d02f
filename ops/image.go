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
	return repeat(cutTiles(img, tw, th, f.halo, params), hint.copies()), nil
}

// cutTiles cuts img into tw x th tiles, row by row, each carrying a halo
// of halo pixels around its core (clipped at the image edge), as units
// whose Data is the encoded tile and whose Params are params.
func cutTiles(img *image.RGBA, tw, th, halo int, params map[string]string) []UnitSpec {
	full := img.Rect
	specs := make([]UnitSpec, 0, ceilDiv(full.Dx(), tw)*ceilDiv(full.Dy(), th))
	for y := 0; y < full.Dy(); y += th {
		for x := 0; x < full.Dx(); x += tw {
			core := image.Rect(x, y, min(x+tw, full.Dx()), min(y+th, full.Dy()))
			data := core.Inset(-halo).Intersect(full)
			t := &tile{w: full.Dx(), h: full.Dy(), data: data, core: core, pix: cropPix(img, data)}
			specs = append(specs, UnitSpec{Params: params, Data: t.encode()})
		}
	}
	return specs
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
	if bytes.HasPrefix(inputs[0], []byte(TileMagic)) {
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
	b := out.appendHeader(make([]byte, 0, TileHeaderSize+t.core.Dx()*t.core.Dy()*4))
	b = b[:cap(b)]
	if err := f.apply(ctx, t, b[TileHeaderSize:]); err != nil {
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
	img, err := placeTiles(o.name, "assemble", results, false)
	if err != nil {
		return nil, err
	}
	return encodePNGOutput(o.name, img)
}

// placeTiles decodes each result as a tile and places its core into one
// image, checking that the cores cover the image exactly once. With crop,
// a tile's data may be any rectangle holding its core (a tile as Split
// made it, halo included, or just the core); without, it must be the core.
// Errors start with op and step and name the result.
func placeTiles(op, step string, results [][]byte, crop bool) (*image.RGBA, error) {
	prefix := op + ": " + step
	if len(results) == 0 {
		return nil, fmt.Errorf("%s: no results: %w", prefix, ErrBadInput)
	}
	// Check the headers first, so results that do not carry the image's
	// pixels cannot make it allocate the image.
	tiles := make([]*tile, len(results))
	var full image.Rectangle
	area := 0
	for i, b := range results {
		t, err := decodeTile(op, b)
		if err != nil {
			return nil, fmt.Errorf("%s: result %d: %w", prefix, i, err)
		}
		if i == 0 {
			full = t.full()
		}
		switch {
		case crop && t.full() != full:
			return nil, fmt.Errorf("%s: result %d is a tile of a %dx%d image, but result 0 is of a %dx%d image: %w",
				prefix, i, t.w, t.h, full.Dx(), full.Dy(), ErrBadInput)
		case !crop && (t.full() != full || t.data != t.core):
			return nil, fmt.Errorf("%s: result %d is a %v tile of a %dx%d image, want a result tile of %v: %w",
				prefix, i, t.data, t.w, t.h, full, ErrBadInput)
		}
		tiles[i] = t
		area += t.core.Dx() * t.core.Dy()
	}
	if area < full.Dx()*full.Dy() {
		return nil, fmt.Errorf("%s: results cover %d of %d pixels: %w", prefix, area, full.Dx()*full.Dy(), ErrBadInput)
	}
	// The cores' areas add up to at least the image's, so the cores
	// cover it exactly once unless two overlap.
	img := image.NewRGBA(full)
	covered := make([]uint64, (full.Dx()*full.Dy()+63)/64)
	for i, t := range tiles {
		for y := t.core.Min.Y; y < t.core.Max.Y; y++ {
			for x := t.core.Min.X; x < t.core.Max.X; x++ {
				k := y*t.w + x
				if covered[k/64]&(1<<(k%64)) != 0 {
					return nil, fmt.Errorf("%s: result %d overlaps another at (%d,%d): %w", prefix, i, x, y, ErrBadInput)
				}
				covered[k/64] |= 1 << (k % 64)
			}
			row := t.pix[t.offset(t.core.Min.X, y):][:t.core.Dx()*4]
			copy(img.Pix[img.PixOffset(t.core.Min.X, y):], row)
		}
	}
	return img, nil
}

// encodePNGOutput encodes img as a job's PNG output.
func encodePNGOutput(op string, img *image.RGBA) ([]byte, error) {
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("%s: encode PNG: %w", op, err)
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

// TileMagic starts every encoded tile; image files never start with it.
//
// A tile is a rectangle of an image, as image operations and the tiles
// split (SplitTiles) send it to a unit, and as a unit returns its result
// for the tiles merge (MergeTiles). Its encoding is:
//
//	offset  size  field
//	0       4     magic "BRT1"
//	4       4     image width            (ten little-endian uint32s)
//	8       4     image height
//	12      16    data rect minX, minY, maxX, maxY
//	28      16    core rect minX, minY, maxX, maxY
//	44      ...   the data rect's pixels, row by row, left to right,
//	              4 bytes R, G, B, A each (premultiplied alpha, as Go's
//	              image.RGBA): (maxX-minX)*(maxY-minY)*4 bytes
//
// Rectangles are half-open ([minX, maxX) x [minY, maxY)) in the full image's
// coordinates, with (0, 0) at its top left. The core is the part a unit
// computes; it lies inside the data rect, which lies inside the image. The
// data rect around the core is the halo a filter reads, clipped at the
// image edge. A result for MergeTiles keeps the image size and core of the
// tile its unit got; its data rect may be any rectangle holding the core,
// such as the tile's own (the tile returned as given, halo included) or
// just the core. MergeTiles uses only the core's pixels.
const TileMagic = "BRT1"

// TileHeaderSize is the encoded size of a tile without its pixels: the
// magic and ten little-endian uint32s (see TileMagic).
const TileHeaderSize = len(TileMagic) + 10*4

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
	b := t.appendHeader(make([]byte, 0, TileHeaderSize+len(t.pix)))
	return append(b, t.pix...)
}

func (t *tile) appendHeader(b []byte) []byte {
	b = append(b, TileMagic...)
	for _, v := range [...]int{t.w, t.h, t.data.Min.X, t.data.Min.Y, t.data.Max.X, t.data.Max.Y,
		t.core.Min.X, t.core.Min.Y, t.core.Max.X, t.core.Max.Y} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}

// decodeTile parses an encoded tile; pix aliases b.
func decodeTile(op string, b []byte) (*tile, error) {
	if len(b) < TileHeaderSize || string(b[:len(TileMagic)]) != TileMagic {
		return nil, fmt.Errorf("%s: tile: %d bytes, not an encoded tile: %w", op, len(b), ErrBadInput)
	}
	var v [10]int
	for i := range v {
		u := binary.LittleEndian.Uint32(b[len(TileMagic)+4*i:])
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
	if want := t.data.Dx() * t.data.Dy() * 4; len(b)-TileHeaderSize != want {
		return nil, fmt.Errorf("%s: tile: %d bytes of pixels, want %d for %v: %w", op, len(b)-TileHeaderSize, want, t.data, ErrBadInput)
	}
	t.pix = b[TileHeaderSize:]
	return t, nil
}
