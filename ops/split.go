package ops

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Split says how a job's input is cut into units, for any operation:
// built-in or a user's WebAssembly module. The zero Split means "the
// operation's own way" (its Op.Split with the job's Hint).
type Split struct {
	// Kind is SplitWhole, SplitBytes, SplitLines or SplitTiles; "" is
	// the zero Split.
	Kind string
	// Size is the bytes per unit for SplitBytes and SplitLines, at least
	// 1; 0 for the other kinds.
	Size int64
	// TileW and TileH are the tile size in pixels for SplitTiles, 1 to
	// 65536 each, and Halo the pixels each tile carries around its core,
	// 0 to 1024; all 0 for the other kinds.
	TileW, TileH, Halo int
}

// The kinds of Split.
const (
	// SplitWhole makes one unit: the whole input.
	SplitWhole = "whole"
	// SplitBytes cuts the input into ranges of Size bytes.
	SplitBytes = "bytes"
	// SplitLines cuts the input into ranges of about Size bytes that end
	// at the end of a line.
	SplitLines = "lines"
	// SplitTiles decodes an image and cuts it into encoded tiles (see
	// TileMagic).
	SplitTiles = "tiles"
)

const (
	// maxTileSide bounds a tile's width and height.
	maxTileSide = 1 << 16
	// maxHalo bounds a tile's halo.
	maxHalo = 1024
	// lineBuffer is the read buffer of the lines split, and lineFirstRead
	// the size of its first read at each place it starts reading: lines
	// are mostly short, and the read size doubles for long ones.
	lineBuffer    = 64 << 10
	lineFirstRead = 4 << 10
)

// splitForms lists the forms ParseSplit takes, for error messages.
const splitForms = "want whole, bytes:SIZE, lines:SIZE, tiles:WxH or tiles:WxH+HALO, as in lines:4M or tiles:256x256+3"

// ParseSplit parses "whole", "bytes:SIZE", "lines:SIZE", "tiles:WxH" or
// "tiles:WxH+HALO". SIZE is a number of bytes, at least 1, with an
// optional suffix K, M or G (KiB, MiB, GiB; KB, KiB, MB, MiB, GB and GiB
// mean the same), in any case. For tiles, W and H are 1 to 65536 pixels
// and HALO is 0 to 1024 pixels (0 if omitted). The empty string is an
// error: a caller with no split to give uses the zero Split. Errors wrap
// ErrBadParam and show the right form.
func ParseSplit(s string) (Split, error) {
	text := strings.TrimSpace(s)
	kind, arg, hasArg := strings.Cut(text, ":")
	kind = strings.ToLower(kind)
	bad := func(format string, args ...any) (Split, error) {
		return Split{}, fmt.Errorf("ops: split %q: %s: %w", s, fmt.Sprintf(format, args...), ErrBadParam)
	}
	var sp Split
	switch kind {
	case SplitWhole:
		if hasArg {
			return bad("whole takes no argument; write whole")
		}
		sp = Split{Kind: SplitWhole}
	case SplitBytes, SplitLines:
		if !hasArg || arg == "" {
			return bad("%s needs a size, the bytes per unit, as in %s:4M", kind, kind)
		}
		n, err := parseSize(arg)
		if err != nil {
			return bad("SIZE %v; want a number of bytes, at least 1, with an optional K, M or G, as in %s:4M", err, kind)
		}
		sp = Split{Kind: kind, Size: n}
	case SplitTiles:
		if !hasArg || arg == "" {
			return bad("tiles needs a tile size WxH in pixels, as in tiles:256x256 or tiles:256x256+3 with a halo of 3")
		}
		dims, halo, hasHalo := strings.Cut(arg, "+")
		ws, hs, ok := strings.Cut(strings.ToLower(dims), "x")
		if !ok {
			return bad("tile size %q is not WxH, as in tiles:256x256", dims)
		}
		var err error
		if sp.TileW, err = parseInt("tile width", ws); err != nil {
			return bad("%v", err)
		}
		if sp.TileH, err = parseInt("tile height", hs); err != nil {
			return bad("%v", err)
		}
		if hasHalo {
			if sp.Halo, err = parseInt("halo", halo); err != nil {
				return bad("%v", err)
			}
		}
		sp.Kind = SplitTiles
	case "":
		return bad("empty; %s", splitForms)
	default:
		return bad("unknown kind %q; %s", kind, splitForms)
	}
	if err := sp.check(fmt.Sprintf("ops: split %q", s)); err != nil {
		return Split{}, err
	}
	return sp, nil
}

// String returns s in the canonical form ParseSplit takes, as in
// "lines:4M" or "tiles:256x256+3"; the zero Split gives "".
func (s Split) String() string {
	switch s.Kind {
	case SplitBytes, SplitLines:
		return s.Kind + ":" + formatSize(s.Size)
	case SplitTiles:
		t := fmt.Sprintf("%s:%dx%d", s.Kind, s.TileW, s.TileH)
		if s.Halo != 0 {
			t += "+" + strconv.Itoa(s.Halo)
		}
		return t
	}
	return s.Kind
}

// IsZero reports whether s is the zero Split, which leaves the splitting
// to the operation.
func (s Split) IsZero() bool { return s == Split{} }

// check validates s; errors start with prefix and wrap ErrBadParam.
func (s Split) check(prefix string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s: %w", prefix, fmt.Sprintf(format, args...), ErrBadParam)
	}
	noTile := s.TileW == 0 && s.TileH == 0 && s.Halo == 0
	switch s.Kind {
	case SplitWhole:
		if s.Size != 0 || !noTile {
			return bad("whole takes no size or tile")
		}
	case SplitBytes, SplitLines:
		switch {
		case s.Size < 1:
			return bad("SIZE %d: want at least 1 byte, as in %s:4M", s.Size, s.Kind)
		case !noTile:
			return bad("%s takes no tile size", s.Kind)
		}
	case SplitTiles:
		switch {
		case s.TileW < 1 || s.TileW > maxTileSide:
			return bad("tile width %d: want 1 to %d pixels, as in tiles:256x256", s.TileW, maxTileSide)
		case s.TileH < 1 || s.TileH > maxTileSide:
			return bad("tile height %d: want 1 to %d pixels, as in tiles:256x256", s.TileH, maxTileSide)
		case s.Halo < 0 || s.Halo > maxHalo:
			return bad("halo %d: want 0 to %d pixels, as in tiles:256x256+3", s.Halo, maxHalo)
		case s.Size != 0:
			return bad("tiles takes no SIZE")
		}
	case "":
		return bad("no split given; the zero Split leaves it to the operation's own Split")
	default:
		return bad("unknown kind %q; %s", s.Kind, splitForms)
	}
	return nil
}

// parseSize parses a SIZE: digits and an optional binary suffix.
func parseSize(s string) (int64, error) {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%q does not start with a digit", s)
	}
	var mult int64
	switch strings.ToLower(s[i:]) {
	case "":
		mult = 1
	case "k", "kb", "kib":
		mult = 1 << 10
	case "m", "mb", "mib":
		mult = 1 << 20
	case "g", "gb", "gib":
		mult = 1 << 30
	default:
		return 0, fmt.Errorf("%q has an unknown suffix %q", s, s[i:])
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	if n < 1 {
		return 0, fmt.Errorf("%q is less than 1 byte", s)
	}
	return n * mult, nil
}

// formatSize writes n with the largest suffix that divides it.
func formatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// parseInt parses a whole number for the field what.
func parseInt(what, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q is not a whole number; want tiles:WxH or tiles:WxH+HALO, as in tiles:256x256+3", what, s)
	}
	return n, nil
}

// SplitInput cuts the input (size bytes readable from in) into units by
// sp, for the operation op (named in errors). Every unit gets params as
// its Params; they are not checked. Units have no Deps.
//
//   - whole: one unit, the whole input, read from the input (even if it
//     is empty).
//   - bytes: input ranges of Size bytes, the last one shorter; an empty
//     input gives one empty unit.
//   - lines: input ranges of at least Size bytes (the last one may be
//     shorter) that end just after a '\n' or at the end of the input: a
//     unit reaching into a line extends to its end, so no line is cut and
//     a line longer than Size is in one unit. An empty input gives one
//     empty unit. It reads only from each boundary to the end of its
//     line, in reads of 4 KiB growing to 64 KiB, so any input size works
//     in bounded memory.
//   - tiles: decodes the image (PNG, JPEG or GIF, at most MaxPixels) and
//     cuts it into TileW x TileH tiles, row by row, each an encoded tile
//     (see TileMagic) in the unit's Data, with Halo pixels around its
//     core, clipped at the image edge.
//
// More than MaxUnits units is an error wrapping ErrBadParam that
// suggests a bigger size; so is an invalid or zero sp. An input that is
// not an image for tiles is an error wrapping ErrBadInput.
func SplitInput(op string, in io.ReaderAt, size int64, sp Split, params map[string]string) ([]UnitSpec, error) {
	specs, _, err := splitInput(op, in, size, sp, params, "", nil)
	return specs, err
}

// SplitInputStored is SplitInput keeping the decoded image of a tiles
// split in a temporary file under dir and writing the tiles to data from
// offset 0, as units with Stored set (see Streamer). It returns the units
// and the bytes written to data.
func SplitInputStored(op string, in io.ReaderAt, size int64, sp Split, params map[string]string, dir string, data io.WriterAt) ([]UnitSpec, int64, error) {
	return splitInput(op, in, size, sp, params, dir, data)
}

// splitInput is SplitInput, and SplitInputStored if data is not nil.
func splitInput(op string, in io.ReaderAt, size int64, sp Split, params map[string]string, dir string, data io.WriterAt) ([]UnitSpec, int64, error) {
	prefix := fmt.Sprintf("%s: split %s", op, sp)
	if sp.IsZero() {
		prefix = op + ": split"
	}
	if err := sp.check(prefix); err != nil {
		return nil, 0, err
	}
	if size < 0 {
		return nil, 0, fmt.Errorf("%s: input size %d: %w", prefix, size, ErrBadInput)
	}
	switch sp.Kind {
	case SplitWhole:
		return []UnitSpec{{Params: params, FromInput: true, Len: size}}, 0, nil
	case SplitBytes:
		n := size / sp.Size
		if size%sp.Size != 0 || n == 0 {
			n++
		}
		if n > MaxUnits {
			return nil, 0, fmt.Errorf("%s: %d bytes make %d units, more than the limit %d; use a bigger SIZE, such as %s: %w",
				prefix, size, n, MaxUnits, Split{Kind: sp.Kind, Size: sizeFor(size)}, ErrBadParam)
		}
		specs := make([]UnitSpec, 0, n)
		for i := range n {
			off := i * sp.Size
			specs = append(specs, UnitSpec{Params: params, FromInput: true, Off: off, Len: min(sp.Size, size-off)})
		}
		return specs, 0, nil
	case SplitLines:
		specs, err := splitLines(prefix, in, size, sp.Size, params)
		return specs, 0, err
	default: // SplitTiles, as check passed
		return splitTiles(op, prefix, in, size, sp, params, dir, data)
	}
}

// sizeFor returns a power-of-two unit size that cuts size bytes into at
// most MaxUnits units.
func sizeFor(size int64) int64 {
	s := int64(1)
	for s < 1<<62 && size/s+min(size%s, 1) > MaxUnits {
		s *= 2
	}
	return s
}

// splitLines cuts [0, size) into ranges of at least per bytes that end
// just after a '\n' or at size. From each range's start it skips per-1
// bytes unread, then reads to the end of the line there: a bufio.Reader
// goes on reading where the next boundary is near and starts anew at it
// where it is farther than its buffer. So it reads about
// min(size, units*4 KiB) bytes for lines under 4 KiB, in reads of at most
// 64 KiB.
func splitLines(prefix string, in io.ReaderAt, size, per int64, params map[string]string) ([]UnitSpec, error) {
	var specs []UnitSpec
	var br *bufio.Reader
	pos := int64(0) // the input offset br reads next
	for off := int64(0); off < size || len(specs) == 0; {
		if len(specs) == MaxUnits {
			about := int64(float64(size) / float64(off) * MaxUnits)
			return nil, fmt.Errorf("%s: %d bytes make more than %d units, the limit (about %d, judging by the first %d); use a bigger SIZE, such as %s: %w",
				prefix, size, MaxUnits, about, MaxUnits, Split{Kind: SplitLines, Size: sizeFor(size)}, ErrBadParam)
		}
		end := size
		if per < size-off {
			// The unit's last byte if it ends a line: scan from there to
			// the end of the line.
			at := off + per - 1
			switch {
			case br == nil || at < pos || at-pos > lineBuffer:
				r := &growingReader{r: io.NewSectionReader(in, at, size-at), n: lineFirstRead}
				if br == nil {
					br = bufio.NewReaderSize(r, lineBuffer)
				} else {
					br.Reset(r)
				}
				pos = at
			case at > pos:
				n, err := br.Discard(int(at - pos))
				pos += int64(n)
				if err != nil {
					return nil, readError(prefix, pos, err)
				}
			}
			n, err := lineLen(br)
			pos += n
			switch {
			case err == nil:
				end = pos
			case !errors.Is(err, io.EOF):
				return nil, readError(prefix, pos, err)
			}
		}
		specs = append(specs, UnitSpec{Params: params, FromInput: true, Off: off, Len: end - off})
		off = end
	}
	return specs, nil
}

// lineLen reads through the next '\n' and returns the bytes read; at the
// end of the input without one, it returns them and io.EOF.
func lineLen(br *bufio.Reader) (int64, error) {
	var n int64
	for {
		b, err := br.ReadSlice('\n')
		n += int64(len(b))
		if err != bufio.ErrBufferFull {
			return n, err
		}
	}
}

// growingReader reads at most n bytes at a time from r, doubling n at
// each read.
type growingReader struct {
	r io.Reader
	n int
}

func (g *growingReader) Read(p []byte) (int, error) {
	p = p[:min(len(p), g.n)]
	g.n = min(2*g.n, lineBuffer)
	return g.r.Read(p)
}

// readError reports a failed read of the input.
func readError(prefix string, off int64, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF // the input is shorter than its size
	}
	return fmt.Errorf("%s: read input at byte %d: %w", prefix, off, err)
}

// splitTiles decodes the image and cuts it into encoded tiles: in memory
// as units' Data if data is nil, else written to data (see
// SplitInputStored).
func splitTiles(op, prefix string, in io.ReaderAt, size int64, sp Split, params map[string]string, dir string, data io.WriterAt) ([]UnitSpec, int64, error) {
	cfg, err := decodeConfig(op, io.NewSectionReader(in, 0, size))
	if err != nil {
		return nil, 0, err
	}
	count := func(tw, th int) int { return ceilDiv(cfg.Width, tw) * ceilDiv(cfg.Height, th) }
	if n := count(sp.TileW, sp.TileH); n > MaxUnits {
		bigger := sp
		for k := 2; count(bigger.TileW, bigger.TileH) > MaxUnits; k++ {
			bigger.TileW, bigger.TileH = min(sp.TileW*k, maxTileSide), min(sp.TileH*k, maxTileSide)
		}
		return nil, 0, fmt.Errorf("%s: a %dx%d image makes %d tiles, more than the limit %d; use bigger tiles, such as %s: %w",
			prefix, cfg.Width, cfg.Height, n, MaxUnits, bigger, ErrBadParam)
	}
	if data == nil {
		specs, err := splitTiled(op, in, size, cfg, sp.TileW, sp.TileH, sp.Halo, params)
		return specs, 0, err
	}
	return splitImageTo(op, in, size, cfg, sp.TileW, sp.TileH, sp.Halo, params, dir, data)
}
