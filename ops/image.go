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
	specs, err := splitTiled(o.name, in, size, cfg, tw, th, f.halo, params)
	if err != nil {
		return nil, err
	}
	return repeat(specs, hint.copies()), nil
}

// SplitStored implements Streamer: a tiled image is decoded into a
// temporary file under dir and its tiles written to data.
func (o *imageOp) SplitStored(in io.ReaderAt, size int64, params map[string]string, hint Hint, dir string, data io.WriterAt) ([]UnitSpec, int64, error) {
	if err := hint.check(o.name, true); err != nil {
		return nil, 0, err
	}
	f, err := o.filter(params)
	if err != nil {
		return nil, 0, err
	}
	cfg, err := decodeConfig(o.name, io.NewSectionReader(in, 0, size))
	if err != nil {
		return nil, 0, err
	}
	tw, th := tileSize(cfg.Width, cfg.Height, hint)
	n := ceilDiv(cfg.Width, tw) * ceilDiv(cfg.Height, th)
	if err := checkUnits(o.name, n, hint); err != nil {
		return nil, 0, err
	}
	if n == 1 && !hint.tiled() {
		return repeat([]UnitSpec{{Params: params, FromInput: true, Len: size}}, hint.copies()), 0, nil
	}
	specs, written, err := splitImageTo(o.name, in, size, cfg, tw, th, f.halo, params, dir, data)
	if err != nil {
		return nil, 0, err
	}
	return repeat(specs, hint.copies()), written, nil
}

// splitTiled decodes the image (its header cfg) and cuts it into tw x th
// tiles with a halo, as units whose Data is the encoded tile, in memory.
func splitTiled(op string, in io.ReaderAt, size int64, cfg imageConfig, tw, th, halo int, params map[string]string) ([]UnitSpec, error) {
	rects := tileRects(cfg.Width, cfg.Height, tw, th, halo)
	var total int64
	for _, t := range rects {
		total += int64(TileHeaderSize) + int64(t.data.Dx())*int64(t.data.Dy())*4
	}
	mem := &memScratch{b: make([]byte, total)}
	specs, _, err := splitImageTo(op, in, size, cfg, tw, th, halo, params, "", mem)
	if err != nil {
		return nil, err
	}
	for i, sp := range specs {
		specs[i] = UnitSpec{Params: sp.Params, Data: mem.b[sp.Off : sp.Off+sp.Len : sp.Off+sp.Len]}
	}
	return specs, nil
}

// splitImageTo decodes the image into a raster under dir ("" for memory)
// and writes its tiles to data, as units with Stored set.
func splitImageTo(op string, in io.ReaderAt, size int64, cfg imageConfig, tw, th, halo int, params map[string]string, dir string, data io.WriterAt) ([]UnitSpec, int64, error) {
	r, err := decodeRaster(op, in, size, cfg, dir)
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	specs, n, err := cutTiles(r, tileRects(cfg.Width, cfg.Height, tw, th, halo), params, data)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: cut tiles: %w", op, err)
	}
	return specs, n, nil
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
func (o *imageOp) Assemble(params map[string]string, hint Hint, results [][]byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := o.AssembleStored(params, hint, MemResults(results), "", &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// AssembleStored implements Streamer: it reads the result tiles a band of
// rows at a time.
func (o *imageOp) AssembleStored(_ map[string]string, hint Hint, rs Results, _ string, w io.Writer) error {
	rs, err := firstCopyOf(o.name, rs, hint)
	if err != nil {
		return err
	}
	return assembleTilesTo(o.name, "assemble", rs, false, w)
}

// decodeImage decodes a PNG, JPEG or GIF into premultiplied RGBA with its
// origin at (0, 0).
func decodeImage(op string, r io.ReadSeeker) (*image.RGBA, error) {
	src, err := decodeSource(op, r)
	if err != nil {
		return nil, err
	}
	b := src.Bounds()
	if rgba, ok := src.(*image.RGBA); ok && b.Min == (image.Point{}) && rgba.Stride == 4*b.Dx() {
		return rgba, nil
	}
	dst := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(dst, dst.Rect, src, b.Min, draw.Src)
	return dst, nil
}

// decodeSource decodes a PNG, JPEG or GIF (its first frame) in the form
// its decoder gives, after checking its size.
func decodeSource(op string, r io.ReadSeeker) (image.Image, error) {
	cfg, err := decodeConfig(op, r)
	if err != nil {
		return nil, err
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("%s: read input: %w", op, err)
	}
	src, _, err := image.Decode(r)
	if err != nil {
		return nil, fmt.Errorf("%s: corrupt %s image: %v: %w", op, cfg.format, err, ErrBadInput)
	}
	return src, nil
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
	t, err := decodeTileHeader(op, b, int64(len(b))-int64(TileHeaderSize))
	if err != nil {
		return nil, err
	}
	t.pix = b[TileHeaderSize:]
	return t, nil
}

// decodeTileHeader parses the header of an encoded tile (hdr, at least
// TileHeaderSize bytes if the tile is sound) followed by pixLen bytes of
// pixels. The tile it returns has no pix.
func decodeTileHeader(op string, hdr []byte, pixLen int64) (*tile, error) {
	if len(hdr) < TileHeaderSize || string(hdr[:len(TileMagic)]) != TileMagic {
		return nil, fmt.Errorf("%s: tile: %d bytes, not an encoded tile: %w", op, int64(len(hdr))+max(pixLen, 0), ErrBadInput)
	}
	var v [10]int
	for i := range v {
		u := binary.LittleEndian.Uint32(hdr[len(TileMagic)+4*i:])
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
	if want := int64(t.data.Dx()) * int64(t.data.Dy()) * 4; pixLen != want {
		return nil, fmt.Errorf("%s: tile: %d bytes of pixels, want %d for %v: %w", op, pixLen, want, t.data, ErrBadInput)
	}
	return t, nil
}
