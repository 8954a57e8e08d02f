package ops

import (
	"bytes"
	"fmt"
	"image"
	"io"
	"slices"
	"sort"
)

// Streamer is an Op that can split and assemble a job without holding
// its data in memory: a server splitting a large image for several jobs
// at once uses it. Split and Assemble give the same units and output.
type Streamer interface {
	Op
	// SplitStored is Split keeping large intermediates in temporary files
	// under dir, which must exist. The units' own data that the split
	// makes is written to data from offset 0: those units have Stored
	// set, and Off and Len locate their data there. It returns the units
	// and the bytes written to data.
	SplitStored(in io.ReaderAt, size int64, params map[string]string, hint Hint, dir string, data io.WriterAt) ([]UnitSpec, int64, error)
	// AssembleStored is Assemble reading the results from rs as it needs
	// them and writing the output to w.
	AssembleStored(params map[string]string, hint Hint, rs Results, dir string, w io.Writer) error
}

// Results are the results of a job's units, in unit order, read as
// AssembleStored needs them.
type Results interface {
	// Len is the number of results.
	Len() int
	// ID names result i: results with the same non-empty ID hold the
	// same bytes. "" means unknown.
	ID(i int) string
	// Open opens result i for reading; the caller closes it.
	Open(i int) (Result, error)
}

// Result is one opened result.
type Result interface {
	io.ReaderAt
	io.Closer
	// Size is the result's length in bytes.
	Size() int64
}

// MemResults are results held in memory.
type MemResults [][]byte

// Len implements Results.
func (m MemResults) Len() int { return len(m) }

// ID implements Results: unknown.
func (m MemResults) ID(int) string { return "" }

// Open implements Results.
func (m MemResults) Open(i int) (Result, error) { return memResult{bytes.NewReader(m[i])}, nil }

type memResult struct{ *bytes.Reader }

func (memResult) Close() error { return nil }

// subResults are the results of rs at the indexes idx.
type subResults struct {
	rs  Results
	idx []int
}

func (s subResults) Len() int                   { return len(s.idx) }
func (s subResults) ID(i int) string            { return s.rs.ID(s.idx[i]) }
func (s subResults) Open(i int) (Result, error) { return s.rs.Open(s.idx[i]) }

// firstCopyOf checks, reading them in pieces, that the results of a
// repeated job agree copy by copy, and returns the first copy's.
func firstCopyOf(op string, rs Results, hint Hint) (Results, error) {
	n := hint.copies()
	if rs.Len()%n != 0 {
		return nil, fmt.Errorf("%s: assemble: %d results do not split into %d copies: %w", op, rs.Len(), n, ErrBadInput)
	}
	per := rs.Len() / n
	if n == 1 {
		return rs, nil
	}
	for c := 1; c < n; c++ {
		for i := range per {
			j := c*per + i
			same, err := sameResult(rs, i, j)
			if err != nil {
				return nil, fmt.Errorf("%s: assemble: %w", op, err)
			}
			if !same {
				return nil, fmt.Errorf("%s: assemble: copy %d of unit %d differs from copy 1 (unit %d); a worker computed a wrong result: %w",
					op, c+1, j, i, ErrBadInput)
			}
		}
	}
	idx := make([]int, per)
	for i := range idx {
		idx[i] = i
	}
	return subResults{rs, idx}, nil
}

// sameResult reports whether results i and j hold the same bytes.
func sameResult(rs Results, i, j int) (bool, error) {
	if id := rs.ID(i); id != "" && id == rs.ID(j) {
		return true, nil
	}
	a, err := rs.Open(i)
	if err != nil {
		return false, fmt.Errorf("result %d: %w", i, err)
	}
	defer a.Close()
	b, err := rs.Open(j)
	if err != nil {
		return false, fmt.Errorf("result %d: %w", j, err)
	}
	defer b.Close()
	if a.Size() != b.Size() {
		return false, nil
	}
	const piece = 256 << 10
	pa, pb := make([]byte, min(piece, a.Size())), make([]byte, min(piece, a.Size()))
	for off := int64(0); off < a.Size(); off += piece {
		n := min(piece, a.Size()-off)
		if err := readAt(a, pa[:n], off); err != nil {
			return false, fmt.Errorf("result %d: %w", i, err)
		}
		if err := readAt(b, pb[:n], off); err != nil {
			return false, fmt.Errorf("result %d: %w", j, err)
		}
		if !bytes.Equal(pa[:n], pb[:n]) {
			return false, nil
		}
	}
	return true, nil
}

// readAt fills p from r at off.
func readAt(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// readResults reads every result into memory.
func readResults(rs Results) ([][]byte, error) {
	out := make([][]byte, rs.Len())
	for i := range out {
		r, err := rs.Open(i)
		if err != nil {
			return nil, fmt.Errorf("result %d: %w", i, err)
		}
		b := make([]byte, r.Size())
		err = readAt(r, b, 0)
		r.Close()
		if err != nil {
			return nil, fmt.Errorf("result %d: %w", i, err)
		}
		out[i] = b
	}
	return out, nil
}

// concatTo writes the results in order to w: the output of MergeConcat.
func concatTo(rs Results, w io.Writer) error {
	for i := range rs.Len() {
		r, err := rs.Open(i)
		if err != nil {
			return fmt.Errorf("result %d: %w", i, err)
		}
		_, err = io.Copy(w, io.NewSectionReader(r, 0, r.Size()))
		r.Close()
		if err != nil {
			return fmt.Errorf("result %d: %w", i, err)
		}
	}
	return nil
}

// placedTile is a result tile, by its header: which result, and where.
type placedTile struct {
	i          int
	data, core image.Rectangle
}

// assembleTilesTo places the cores of the result tiles rs into one image
// and writes it to w as PNG, as placeTiles and encodePNGOutput do, a band
// of rows at a time: it holds a band, a bit per pixel and a row of PNG.
// With crop, a tile's data may be any rectangle holding its core;
// without, it must be the core. Errors start with op and step and name
// the result.
func assembleTilesTo(op, step string, rs Results, crop bool, w io.Writer) error {
	prefix := op + ": " + step
	if rs.Len() == 0 {
		return fmt.Errorf("%s: no results: %w", prefix, ErrBadInput)
	}
	tiles := make([]placedTile, rs.Len())
	var full image.Rectangle
	area := 0
	hdr := make([]byte, TileHeaderSize)
	for i := range rs.Len() {
		r, err := rs.Open(i)
		if err != nil {
			return fmt.Errorf("%s: result %d: %w", prefix, i, err)
		}
		size := r.Size()
		err = readAt(r, hdr[:min(int64(len(hdr)), size)], 0)
		r.Close()
		if err != nil {
			return fmt.Errorf("%s: result %d: %w", prefix, i, err)
		}
		t, err := decodeTileHeader(op, hdr[:min(int64(len(hdr)), size)], size-int64(TileHeaderSize))
		if err != nil {
			return fmt.Errorf("%s: result %d: %w", prefix, i, err)
		}
		if i == 0 {
			full = t.full()
		}
		switch {
		case crop && t.full() != full:
			return fmt.Errorf("%s: result %d is a tile of a %dx%d image, but result 0 is of a %dx%d image: %w",
				prefix, i, t.w, t.h, full.Dx(), full.Dy(), ErrBadInput)
		case !crop && (t.full() != full || t.data != t.core):
			return fmt.Errorf("%s: result %d is a %v tile of a %dx%d image, want a result tile of %v: %w",
				prefix, i, t.data, t.w, t.h, full, ErrBadInput)
		}
		tiles[i] = placedTile{i: i, data: t.data, core: t.core}
		area += t.core.Dx() * t.core.Dy()
	}
	if area < full.Dx()*full.Dy() {
		return fmt.Errorf("%s: results cover %d of %d pixels: %w", prefix, area, full.Dx()*full.Dy(), ErrBadInput)
	}
	// The cores' areas add up to at least the image's, so the cores
	// cover it exactly once unless two overlap.
	W := full.Dx()
	covered := make([]uint64, (W*full.Dy()+63)/64)
	for _, t := range tiles {
		for y := t.core.Min.Y; y < t.core.Max.Y; y++ {
			for x := t.core.Min.X; x < t.core.Max.X; x++ {
				k := y*W + x
				if covered[k/64]&(1<<(k%64)) != 0 {
					return fmt.Errorf("%s: result %d overlaps another at (%d,%d): %w", prefix, t.i, x, y, ErrBadInput)
				}
				covered[k/64] |= 1 << (k % 64)
			}
		}
	}
	covered = nil
	sort.SliceStable(tiles, func(a, b int) bool { return tiles[a].core.Min.Y < tiles[b].core.Min.Y })

	b := &bander{rs: rs, tiles: tiles, w: W, h: full.Dy(), prefix: prefix}
	defer b.closeAll()
	opaque := true
	for y0 := 0; y0 < b.h && opaque; {
		rows, err := b.band(y0)
		if err != nil {
			return err
		}
		for k := 3; k < len(rows); k += 4 {
			if rows[k] != 0xff {
				opaque = false
				break
			}
		}
		y0 += len(rows) / (4 * W)
	}
	b.closeAll()
	enc, err := newPNGEncoder(w, W, b.h, opaque)
	if err != nil {
		return fmt.Errorf("%s: encode PNG: %w", op, err)
	}
	for y0 := 0; y0 < b.h; {
		rows, err := b.band(y0)
		if err != nil {
			return err
		}
		for ; len(rows) > 0; rows = rows[4*W:] {
			if err := enc.writeRow(rows[:4*W]); err != nil {
				return fmt.Errorf("%s: encode PNG: %w", op, err)
			}
			y0++
		}
	}
	if err := enc.close(); err != nil {
		return fmt.Errorf("%s: encode PNG: %w", op, err)
	}
	return nil
}

// bander fills bands of the output image's rows from the result tiles,
// sorted by their cores' top rows. It keeps a few results open between
// bands.
type bander struct {
	rs     Results
	tiles  []placedTile
	w, h   int
	prefix string
	buf    []byte
	seg    []byte
	open   map[int]Result
}

// maxOpen bounds the results a bander keeps open.
const maxOpen = 64

// band returns the rows from y0 of the image, as many as fit in
// bandBytes (at least one), 4*w bytes a row.
func (b *bander) band(y0 int) ([]byte, error) {
	stride := 4 * b.w
	y1 := min(b.h, y0+max(1, bandBytes/stride))
	if b.buf == nil {
		b.buf = make([]byte, (y1-y0)*stride)
	}
	rows := b.buf[:(y1-y0)*stride]
	// Tiles are sorted by their cores' tops: those that start below the
	// band end the search.
	last := sort.Search(len(b.tiles), func(k int) bool { return b.tiles[k].core.Min.Y >= y1 })
	for _, t := range b.tiles[:last] {
		ya, yb := max(y0, t.core.Min.Y), min(y1, t.core.Max.Y)
		if ya >= yb {
			continue
		}
		r, err := b.result(t.i)
		if err != nil {
			return nil, err
		}
		dataRow := 4 * t.data.Dx()
		b.seg = slices.Grow(b.seg[:0], (yb-ya)*dataRow)[:(yb-ya)*dataRow]
		off := int64(TileHeaderSize) + int64(ya-t.data.Min.Y)*int64(dataRow)
		err = readAt(r, b.seg, off)
		if _, kept := b.open[t.i]; !kept {
			r.Close()
		} else if yb == t.core.Max.Y {
			r.Close()
			delete(b.open, t.i)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: result %d: %w", b.prefix, t.i, err)
		}
		cx, cw := 4*(t.core.Min.X-t.data.Min.X), 4*t.core.Dx()
		for y := ya; y < yb; y++ {
			src := b.seg[(y-ya)*dataRow+cx:][:cw]
			copy(rows[(y-y0)*stride+4*t.core.Min.X:], src)
		}
	}
	return rows, nil
}

// result returns result i, opened; it stays open (in b.open) if few are.
func (b *bander) result(i int) (Result, error) {
	if r, ok := b.open[i]; ok {
		return r, nil
	}
	r, err := b.rs.Open(i)
	if err != nil {
		return nil, fmt.Errorf("%s: result %d: %w", b.prefix, i, err)
	}
	if b.open == nil {
		b.open = map[int]Result{}
	}
	if len(b.open) < maxOpen {
		b.open[i] = r
	}
	return r, nil
}

func (b *bander) closeAll() {
	for i, r := range b.open {
		r.Close()
		delete(b.open, i)
	}
}
