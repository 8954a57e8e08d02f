package ops

import (
	"bufio"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"io"
	"os"
	"slices"
)

// spill holds a large intermediate: an unlinked temporary file under a
// directory, or memory when there is none.
type spill interface {
	io.ReaderAt
	io.WriterAt
	io.Writer
	Close() error
}

// newScratch returns a spill for size bytes: a temporary file under dir
// (removed from the directory at once, so a crash leaves nothing), or
// memory if dir is "".
func newScratch(dir string, size int64) (spill, error) {
	if dir == "" {
		return &memScratch{b: make([]byte, size)}, nil
	}
	f, err := os.CreateTemp(dir, "braid-scratch-*")
	if err != nil {
		return nil, fmt.Errorf("scratch file: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		// Systems that cannot remove an open file: remove it at Close.
		return &namedScratch{File: f}, nil
	}
	return f, nil
}

// namedScratch is a scratch file removed when closed.
type namedScratch struct{ *os.File }

func (n *namedScratch) Close() error {
	err := n.File.Close()
	if rerr := os.Remove(n.Name()); err == nil {
		err = rerr
	}
	return err
}

// memScratch is a scratch of fixed size in memory.
type memScratch struct {
	b   []byte
	off int64 // where Write writes
}

func (m *memScratch) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memScratch) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(m.b)) {
		return 0, errors.New("ops: write past the end of a scratch buffer")
	}
	return copy(m.b[off:], p), nil
}

func (m *memScratch) Write(p []byte) (int, error) {
	n, err := m.WriteAt(p, m.off)
	m.off += int64(n)
	return n, err
}

func (m *memScratch) Close() error { return nil }

// raster is a decoded image in premultiplied RGBA, 4*w bytes a row, top
// to bottom, in a scratch.
type raster struct {
	w, h int
	px   spill
}

func (r *raster) Close() error { return r.px.Close() }

// wholeDecodes admits one decode of a whole image at a time: images that
// cannot be decoded row by row (JPEG, GIF, interlaced PNG) are decoded
// into memory, and this bounds how many such images memory holds.
var wholeDecodes = make(chan struct{}, 1)

// decodeRaster decodes the image (size bytes in in, checked by
// decodeConfig) into a raster under dir ("" for memory). A PNG that is not
// interlaced is decoded a band of rows at a time; other images whole,
// one at a time.
func decodeRaster(op string, in io.ReaderAt, size int64, cfg imageConfig, dir string) (*raster, error) {
	px, err := newScratch(dir, int64(cfg.Width)*int64(cfg.Height)*4)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	r := &raster{w: cfg.Width, h: cfg.Height, px: px}
	bw := bufio.NewWriterSize(px, 1<<20)
	if cfg.format == "png" {
		var werr error // the scratch's, not the image's fault
		err = decodePNGRows(io.NewSectionReader(in, 0, size), func(rows []byte) error {
			_, werr = bw.Write(rows)
			return werr
		})
		if err == nil {
			werr = bw.Flush()
			err = werr
		}
		switch {
		case err == nil:
			return r, nil
		case werr != nil:
			px.Close()
			return nil, fmt.Errorf("%s: write the decoded image: %w", op, werr)
		case !errors.Is(err, errNotRows):
			px.Close()
			return nil, fmt.Errorf("%s: corrupt png image: %v: %w", op, err, ErrBadInput)
		}
	}
	wholeDecodes <- struct{}{}
	src, err := decodeSource(op, io.NewSectionReader(in, 0, size))
	if err == nil {
		err = writeRGBA(bw, src)
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			err = fmt.Errorf("%s: write the decoded image: %w", op, err)
		}
	}
	<-wholeDecodes
	if err != nil {
		px.Close()
		return nil, err
	}
	return r, nil
}

// writeRGBA writes img's pixels as premultiplied RGBA rows, converting a
// band of rows at a time: memory holds the decoded image in its own
// form (a JPEG's YCbCr planes, a GIF's palette indexes) and one band,
// never a second, RGBA copy of the whole.
func writeRGBA(w io.Writer, img image.Image) error {
	b := img.Bounds()
	if rgba, ok := img.(*image.RGBA); ok {
		for y := b.Min.Y; y < b.Max.Y; y++ {
			i := rgba.PixOffset(b.Min.X, y)
			if _, err := w.Write(rgba.Pix[i : i+4*b.Dx()]); err != nil {
				return err
			}
		}
		return nil
	}
	rows := max(1, min(b.Dy(), (1<<20)/(4*b.Dx())))
	band := image.NewRGBA(image.Rect(0, 0, b.Dx(), rows))
	for y := b.Min.Y; y < b.Max.Y; y += rows {
		n := min(rows, b.Max.Y-y)
		dst := band.SubImage(image.Rect(0, 0, b.Dx(), n)).(*image.RGBA)
		draw.Draw(dst, dst.Rect, img, image.Pt(b.Min.X, y), draw.Src)
		if _, err := w.Write(band.Pix[:4*b.Dx()*n]); err != nil {
			return err
		}
	}
	return nil
}

// tileRect is a tile's place in the image: the pixels it carries (data)
// and those its unit computes (core).
type tileRect struct {
	data, core image.Rectangle
}

// tileRects lays out tw x th tiles over a w x h image, row by row, each
// with a halo of halo pixels around its core, clipped at the image edge.
func tileRects(w, h, tw, th, halo int) []tileRect {
	full := image.Rect(0, 0, w, h)
	rs := make([]tileRect, 0, ceilDiv(w, tw)*ceilDiv(h, th))
	for y := 0; y < h; y += th {
		for x := 0; x < w; x += tw {
			core := image.Rect(x, y, min(x+tw, w), min(y+th, h))
			rs = append(rs, tileRect{data: core.Inset(-halo).Intersect(full), core: core})
		}
	}
	return rs
}

// cutTiles writes the tiles of rects, encoded (see TileMagic), one after
// the other from offset 0 of out, reading the raster a band of rows at a
// time. It returns units with Stored set, in the order of rects, each
// with params, and the bytes written.
func cutTiles(r *raster, rects []tileRect, params map[string]string, out io.WriterAt) ([]UnitSpec, int64, error) {
	specs := make([]UnitSpec, len(rects))
	var off int64
	for i, t := range rects {
		tl := tile{w: r.w, h: r.h, data: t.data, core: t.core}
		n := int64(TileHeaderSize) + int64(t.data.Dx())*int64(t.data.Dy())*4
		if _, err := out.WriteAt(tl.appendHeader(nil), off); err != nil {
			return nil, 0, err
		}
		specs[i] = UnitSpec{Params: params, Stored: true, Off: off, Len: n}
		off += n
	}
	stride := 4 * r.w
	per := max(1, bandBytes/stride)
	band := make([]byte, min(per, r.h)*stride)
	var seg []byte
	for y0 := 0; y0 < r.h; y0 += per {
		y1 := min(y0+per, r.h)
		rows := band[:(y1-y0)*stride]
		if _, err := r.px.ReadAt(rows, int64(y0)*int64(stride)); err != nil {
			return nil, 0, fmt.Errorf("read decoded image: %w", err)
		}
		for i, t := range rects {
			ya, yb := max(y0, t.data.Min.Y), min(y1, t.data.Max.Y)
			if ya >= yb {
				continue
			}
			rowLen := 4 * t.data.Dx()
			seg = slices.Grow(seg[:0], (yb-ya)*rowLen)
			for y := ya; y < yb; y++ {
				i := (y-y0)*stride + 4*t.data.Min.X
				seg = append(seg, rows[i:i+rowLen]...)
			}
			at := specs[i].Off + int64(TileHeaderSize) + int64(ya-t.data.Min.Y)*int64(rowLen)
			if _, err := out.WriteAt(seg, at); err != nil {
				return nil, 0, err
			}
		}
	}
	return specs, off, nil
}
