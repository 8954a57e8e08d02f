package ops

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseSplit(t *testing.T) {
	good := []struct {
		in    string
		want  Split
		canon string
	}{
		{"whole", Split{Kind: SplitWhole}, "whole"},
		{"WHOLE", Split{Kind: SplitWhole}, "whole"},
		{"bytes:1", Split{Kind: SplitBytes, Size: 1}, "bytes:1"},
		{"bytes:1536", Split{Kind: SplitBytes, Size: 1536}, "bytes:1536"},
		{"bytes:4096", Split{Kind: SplitBytes, Size: 4096}, "bytes:4K"},
		{"bytes:2g", Split{Kind: SplitBytes, Size: 2 << 30}, "bytes:2G"},
		{"bytes:8GiB", Split{Kind: SplitBytes, Size: 8 << 30}, "bytes:8G"},
		{"bytes:2048G", Split{Kind: SplitBytes, Size: 2048 << 30}, "bytes:2048G"},
		{"lines:4k", Split{Kind: SplitLines, Size: 4 << 10}, "lines:4K"},
		{"lines:4KiB", Split{Kind: SplitLines, Size: 4 << 10}, "lines:4K"},
		{"lines:3kb", Split{Kind: SplitLines, Size: 3 << 10}, "lines:3K"},
		{"Lines:1024K", Split{Kind: SplitLines, Size: 1 << 20}, "lines:1M"},
		{"lines:16MB", Split{Kind: SplitLines, Size: 16 << 20}, "lines:16M"},
		{"lines:5mib", Split{Kind: SplitLines, Size: 5 << 20}, "lines:5M"},
		{"lines:007", Split{Kind: SplitLines, Size: 7}, "lines:7"},
		{" lines:1M\n", Split{Kind: SplitLines, Size: 1 << 20}, "lines:1M"},
		{"tiles:256x256", Split{Kind: SplitTiles, TileW: 256, TileH: 256}, "tiles:256x256"},
		{"tiles:37x23+3", Split{Kind: SplitTiles, TileW: 37, TileH: 23, Halo: 3}, "tiles:37x23+3"},
		{"tiles:5X5+0", Split{Kind: SplitTiles, TileW: 5, TileH: 5}, "tiles:5x5"},
		{"tiles:1x65536+1024", Split{Kind: SplitTiles, TileW: 1, TileH: 65536, Halo: 1024}, "tiles:1x65536+1024"},
	}
	for _, tt := range good {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSplit(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || got.IsZero() {
				t.Fatalf("ParseSplit = %+v, want %+v", got, tt.want)
			}
			if s := got.String(); s != tt.canon {
				t.Errorf("String = %q, want %q", s, tt.canon)
			}
			if back, err := ParseSplit(got.String()); err != nil || back != got {
				t.Errorf("ParseSplit(String()) = %+v, %v; want %+v", back, err, got)
			}
		})
	}

	bad := []struct{ in, msg string }{
		{"lines", "lines needs a size"},
		{"lines:", "lines needs a size"},
		{"lines:0", `"0" is less than 1 byte`},
		{"lines:0K", `"0K" is less than 1 byte`},
		{"lines:-3", `"-3" does not start with a digit`},
		{"bytes:+3", `"+3" does not start with a digit`},
		{"bytes:1X", `unknown suffix "X"`},
		{"bytes:1.5M", `unknown suffix ".5M"`},
		{"bytes:4 K", `unknown suffix " K"`},
		{"bytes:9999999999G", "too large"},
		{"bytes:99999999999999999999", "too large"},
		{"tiles:0x5", "tile width 0: want 1 to 65536"},
		{"tiles:5x0", "tile height 0: want 1 to 65536"},
		{"tiles:65537x5", "tile width 65537"},
		{"tiles:5", `tile size "5" is not WxH`},
		{"tiles", "tiles needs a tile size"},
		{"tiles:ax5", `tile width "a" is not a whole number`},
		{"tiles:5x5+", `halo "" is not a whole number`},
		{"tiles:5x5+-1", "halo -1: want 0 to 1024"},
		{"tiles:5x5+2000", "halo 2000: want 0 to 1024"},
		{"whole:1", "whole takes no argument"},
		{"split:3", `unknown kind "split"`},
		{"", "empty"},
		{"   ", "empty"},
	}
	for _, tt := range bad {
		t.Run("bad/"+tt.in, func(t *testing.T) {
			sp, err := ParseSplit(tt.in)
			if err == nil {
				t.Fatalf("ParseSplit(%q) = %+v, want an error", tt.in, sp)
			}
			if !errors.Is(err, ErrBadParam) {
				t.Errorf("error %v does not wrap ErrBadParam", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.msg) {
				t.Errorf("error %q does not say %q", msg, tt.msg)
			}
			if !strings.Contains(msg, fmt.Sprintf("%q", tt.in)) {
				t.Errorf("error %q does not quote the input", msg)
			}
			if !strings.Contains(msg, "as in ") && !strings.Contains(msg, "write ") {
				t.Errorf("error %q shows no example of the right form", msg)
			}
		})
	}
}

func TestSplitZero(t *testing.T) {
	var z Split
	if !z.IsZero() || z.String() != "" {
		t.Errorf("zero Split: IsZero %v, String %q", z.IsZero(), z.String())
	}
	_, err := SplitInput("wc", strings.NewReader("x"), 1, z, nil)
	if !errors.Is(err, ErrBadParam) || !strings.Contains(err.Error(), "wc: split: no split given") {
		t.Errorf("SplitInput with the zero Split: %v", err)
	}
}

// TestSplitInputChecks: a Split made in code rather than parsed is
// checked as well.
func TestSplitInputChecks(t *testing.T) {
	for _, tt := range []struct {
		sp  Split
		msg string
	}{
		{Split{Kind: "chunks", Size: 4}, `unknown kind "chunks"`},
		{Split{Kind: SplitBytes}, "SIZE 0: want at least 1 byte"},
		{Split{Kind: SplitLines, Size: -5}, "SIZE -5"},
		{Split{Kind: SplitLines, Size: 5, Halo: 1}, "lines takes no tile size"},
		{Split{Kind: SplitWhole, Size: 5}, "whole takes no size or tile"},
		{Split{Kind: SplitTiles, TileW: 4}, "tile height 0"},
		{Split{Kind: SplitTiles, TileW: 4, TileH: 4, Halo: -1}, "halo -1"},
		{Split{Kind: SplitTiles, TileW: 4, TileH: 4, Size: 9}, "tiles takes no SIZE"},
	} {
		_, err := SplitInput("wc", strings.NewReader("abc"), 3, tt.sp, nil)
		if !errors.Is(err, ErrBadParam) || !strings.Contains(err.Error(), tt.msg) || !strings.HasPrefix(err.Error(), "wc: split ") {
			t.Errorf("SplitInput(%+v) = %v, want an error saying %q", tt.sp, err, tt.msg)
		}
	}
}

// span is a unit's input range.
type span struct{ off, len int64 }

func spans(t testing.TB, specs []UnitSpec, params map[string]string) []span {
	t.Helper()
	out := make([]span, len(specs))
	for i, s := range specs {
		if !s.FromInput || s.Data != nil || s.Deps != nil {
			t.Fatalf("unit %d = %+v, want an input range and nothing else", i, s)
		}
		if !maps.Equal(s.Params, params) {
			t.Fatalf("unit %d params %v, want %v", i, s.Params, params)
		}
		out[i] = span{s.Off, s.Len}
	}
	return out
}

func TestSplitWholeAndBytes(t *testing.T) {
	params := map[string]string{"k": "v"}
	for _, tt := range []struct {
		sp   string
		size int64
		want []span
	}{
		{"whole", 0, []span{{0, 0}}},
		{"whole", 12345, []span{{0, 12345}}},
		{"bytes:4", 0, []span{{0, 0}}},
		{"bytes:4", 3, []span{{0, 3}}},
		{"bytes:4", 4, []span{{0, 4}}},
		{"bytes:4", 8, []span{{0, 4}, {4, 4}}},
		{"bytes:4", 10, []span{{0, 4}, {4, 4}, {8, 2}}},
		{"bytes:1", 3, []span{{0, 1}, {1, 1}, {2, 1}}},
		{"bytes:1K", 2500, []span{{0, 1024}, {1024, 1024}, {2048, 452}}},
		{"bytes:2048G", 5 << 40, []span{{0, 2 << 40}, {2 << 40, 2 << 40}, {4 << 40, 1 << 40}}},
	} {
		sp, err := ParseSplit(tt.sp)
		if err != nil {
			t.Fatal(err)
		}
		// The input is never read for these.
		specs, err := SplitInput("noop", failingReader{}, tt.size, sp, params)
		if err != nil {
			t.Fatalf("%s over %d bytes: %v", tt.sp, tt.size, err)
		}
		if got := spans(t, specs, params); fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s over %d bytes = %v, want %v", tt.sp, tt.size, got, tt.want)
		}
	}
	// A split with a huge Size does not overflow.
	specs, err := SplitInput("noop", failingReader{}, 1<<62+1, Split{Kind: SplitBytes, Size: 1<<62 - 1}, nil)
	if got := fmt.Sprint(spans(t, specs, nil)); err != nil || got != fmt.Sprint([]span{{0, 1<<62 - 1}, {1<<62 - 1, 2}}) {
		t.Errorf("huge size: %v, %v", got, err)
	}
}

// failingReader fails every read.
type failingReader struct{}

var errDisk = errors.New("disk on fire")

func (failingReader) ReadAt([]byte, int64) (int, error) { return 0, errDisk }

// patternReader is a virtual input of size bytes: lines of line bytes,
// each ending in '\n'. It counts what is read from it.
type patternReader struct {
	size    int64
	line    int64
	period  []byte // lines to copy from
	reads   int
	bytes   int64
	maxRead int
}

func (r *patternReader) ReadAt(p []byte, off int64) (int, error) {
	r.reads++
	r.maxRead = max(r.maxRead, len(p))
	if off >= r.size {
		return 0, io.EOF
	}
	if r.period == nil {
		l := bytes.Repeat([]byte{'a'}, int(r.line))
		l[len(l)-1] = '\n'
		r.period = bytes.Repeat(l, 1+(64<<10)/len(l))
	}
	n := int(min(int64(len(p)), r.size-off))
	for i := 0; i < n; {
		i += copy(p[i:n], r.period[(off+int64(i))%r.line:])
	}
	r.bytes += int64(n)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// TestSplitLinesStreams: a 64 GiB input cut into 1 GiB units is read
// only around the unit boundaries, 4 KiB for a short line.
func TestSplitLinesStreams(t *testing.T) {
	in := &patternReader{size: 64 << 30, line: 1000}
	specs, err := SplitInput("wc", in, in.size, Split{Kind: SplitLines, Size: 1 << 30}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 64 {
		t.Errorf("%d units, want 64", len(specs))
	}
	var off int64
	for i, s := range specs {
		if s.Off != off || s.Len < 1<<30 && i < len(specs)-1 {
			t.Fatalf("unit %d = [%d, +%d), want it to start at %d and hold at least 1 GiB", i, s.Off, s.Len, off)
		}
		off += s.Len
		if off%in.line != 0 && off != in.size {
			t.Fatalf("unit %d ends at %d, inside a line", i, off)
		}
	}
	if off != in.size {
		t.Errorf("units cover %d bytes, want %d", off, in.size)
	}
	if in.maxRead > lineFirstRead || in.bytes > int64(len(specs))*lineFirstRead {
		t.Errorf("read %d bytes in %d reads of up to %d bytes; want one 4 KiB read at each boundary", in.bytes, in.reads, in.maxRead)
	}
}

func TestSplitTooManyUnits(t *testing.T) {
	// bytes: the count is known at once.
	_, err := SplitInput("noop", failingReader{}, 1<<20, Split{Kind: SplitBytes, Size: 1}, nil)
	if !errors.Is(err, ErrBadParam) || !strings.Contains(err.Error(), "1048576 units, more than the limit 65536") ||
		!strings.Contains(err.Error(), "such as bytes:16") {
		t.Errorf("bytes:1 over 1 MiB: %v", err)
	}
	if _, err := SplitInput("noop", failingReader{}, MaxUnits, Split{Kind: SplitBytes, Size: 1}, nil); err != nil {
		t.Errorf("exactly MaxUnits units: %v", err)
	}

	// lines: it stops at the limit, so 10 GiB of short lines take no time.
	in := &patternReader{size: 10 << 30, line: 2}
	start := time.Now()
	_, err = SplitInput("wc", in, in.size, Split{Kind: SplitLines, Size: 1}, nil)
	if !errors.Is(err, ErrBadParam) || !strings.Contains(err.Error(), "more than 65536 units") ||
		!strings.Contains(err.Error(), "about 5368709120") || !strings.Contains(err.Error(), "such as lines:256K") {
		t.Errorf("lines:1 over 10 GiB: %v", err)
	}
	if in.bytes > 1<<20 || time.Since(start) > 5*time.Second {
		t.Errorf("lines:1 over 10 GiB read %d bytes in %v before failing", in.bytes, time.Since(start))
	}
	// The suggested size works.
	in = &patternReader{size: 10 << 30, line: 2}
	specs, err := SplitInput("wc", in, in.size, Split{Kind: SplitLines, Size: 256 << 10}, nil)
	if err != nil || len(specs) > MaxUnits || in.bytes > int64(len(specs))*lineFirstRead {
		t.Errorf("lines:256K over 10 GiB: %d units, %v, %d bytes read", len(specs), err, in.bytes)
	}

	// tiles: counted from the header, before the pixels are decoded.
	png := SamplePNG(300, 300)
	_, err = SplitInput("blur", bytes.NewReader(png), int64(len(png)), Split{Kind: SplitTiles, TileW: 1, TileH: 1}, nil)
	if !errors.Is(err, ErrBadParam) || !strings.Contains(err.Error(), "300x300 image makes 90000 tiles") ||
		!strings.Contains(err.Error(), "such as tiles:2x2") {
		t.Errorf("tiles:1x1 over 300x300: %v", err)
	}
}

func TestSplitLinesReadError(t *testing.T) {
	_, err := SplitInput("wc", failingReader{}, 100, Split{Kind: SplitLines, Size: 10}, nil)
	if !errors.Is(err, errDisk) || !strings.Contains(err.Error(), "wc: split lines:10: read input at byte") {
		t.Errorf("read error: %v", err)
	}
}

// wantLines is what the lines split of data by per must give, worked out
// in memory.
func wantLines(data []byte, per int64) []span {
	var out []span
	off := int64(0)
	for off < int64(len(data)) || len(out) == 0 {
		end := int64(len(data))
		if per < end-off {
			if i := bytes.IndexByte(data[off+per-1:], '\n'); i >= 0 {
				end = off + per + int64(i)
			}
		}
		out = append(out, span{off, end - off})
		off = end
	}
	return out
}

// checkLines splits data by per and checks the units' properties.
func checkLines(t *testing.T, data []byte, per int64) {
	t.Helper()
	specs, err := SplitInput("wc", bytes.NewReader(data), int64(len(data)), Split{Kind: SplitLines, Size: per}, nil)
	if err != nil {
		if n := len(wantLines(data, per)); n > MaxUnits && errors.Is(err, ErrBadParam) {
			return // too many units, rightly refused
		}
		t.Fatalf("lines:%d over %d bytes: %v", per, len(data), err)
	}
	got := spans(t, specs, nil)
	off := int64(0)
	for i, s := range got {
		last := i == len(got)-1
		switch {
		case s.off != off:
			t.Fatalf("lines:%d: unit %d starts at %d, want %d (contiguous)", per, i, s.off, off)
		case s.len == 0 && len(data) > 0:
			t.Fatalf("lines:%d: unit %d is empty", per, i)
		case !last && data[s.off+s.len-1] != '\n':
			t.Fatalf("lines:%d: unit %d [%d, +%d) does not end with a newline", per, i, s.off, s.len)
		case !last && s.len < per:
			t.Fatalf("lines:%d: unit %d [%d, +%d) is shorter than the size", per, i, s.off, s.len)
		case s.off > 0 && data[s.off-1] != '\n':
			t.Fatalf("lines:%d: unit %d starts inside a line", per, i)
		}
		off += s.len
	}
	if off != int64(len(data)) {
		t.Fatalf("lines:%d: units cover %d of %d bytes", per, off, len(data))
	}
	if want := wantLines(data, per); !slices.Equal(got, want) {
		t.Fatalf("lines:%d over %q:\n got %v\nwant %v", per, trim(data), got, want)
	}
}

func trim(b []byte) string {
	if len(b) > 80 {
		return fmt.Sprintf("%s...(%d bytes)", b[:80], len(b))
	}
	return string(b)
}

// randomLines returns text of random lines: empty, short, long and
// longer than the read buffer; with LF or CRLF; with or without a final
// newline.
func randomLines(rng *rand.Rand) []byte {
	var b []byte
	for range rng.IntN(40) {
		var n int
		switch rng.IntN(10) {
		case 0:
			n = 0
		case 1:
			n = lineBuffer + rng.IntN(3*lineBuffer)
		case 2, 3:
			n = rng.IntN(5000)
		default:
			n = rng.IntN(80)
		}
		b = append(b, bytes.Repeat([]byte{'a' + byte(rng.IntN(26))}, n)...)
		if rng.IntN(4) == 0 {
			b = append(b, '\r')
		}
		b = append(b, '\n')
	}
	if rng.IntN(3) == 0 {
		b = append(b, "no newline at the end"...)
	}
	return b
}

func TestSplitLinesProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	sizes := []int64{1, 2, 3, 79, 80, 81, 1000, lineBuffer - 1, lineBuffer, lineBuffer + 1, 3 * lineBuffer, 1 << 30}
	for range 150 {
		data := randomLines(rng)
		per := sizes[rng.IntN(len(sizes))]
		if rng.IntN(2) == 0 {
			per = 1 + rng.Int64N(int64(len(data))+2)
		}
		checkLines(t, data, per)
	}
}

func FuzzSplitLines(f *testing.F) {
	long := bytes.Repeat([]byte("x"), lineBuffer+17)
	for _, seed := range []struct {
		data string
		per  uint32
	}{
		{"", 1},
		{"", 100},
		{"\n", 1},
		{"\n\n\n\n\n", 1},
		{"\n\n\n\n\n", 2},
		{"\n\n\n\n\n", 100},
		{"one line without a newline", 5},
		{"a\nbb\nccc\ndddd\n", 1},
		{"a\nbb\nccc\ndddd\n", 3},
		{"a\nbb\nccc\ndddd", 4},
		{"crlf\r\nlines\r\nhere\r\n", 6},
		{"crlf\r\nlines\r\nno final", 7},
		{"short\n" + string(long) + "\nshort\n" + string(long), 10},
		{string(long) + "\n" + string(long) + "\n", lineBuffer},
		{"short\n" + string(long), lineBuffer + 1},
		{strings.Repeat("0123456789\n", 2000), 5000},
	} {
		f.Add([]byte(seed.data), seed.per)
	}
	f.Fuzz(func(t *testing.T, data []byte, per uint32) {
		checkLines(t, data, int64(per%(1<<20))+1)
	})
}

func TestSplitTilesBadImage(t *testing.T) {
	sp := Split{Kind: SplitTiles, TileW: 8, TileH: 8, Halo: 1}
	in := SamplePNG(40, 30)
	for _, tt := range []struct {
		name, input, msg string
	}{
		{"text", "hello, world", "wc: input is not a PNG, JPEG or GIF image"},
		{"empty", "", "not a PNG"},
		{"truncated", string(in[:len(in)/2]), "wc: corrupt png image"},
		{"bad header", "\x89PNG\r\n\x1a\n" + strings.Repeat("\x00", 30), "corrupt image header"},
	} {
		_, err := SplitInput("wc", strings.NewReader(tt.input), int64(len(tt.input)), sp, nil)
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.msg)
		}
	}
}

// TestSplitLinesLongLine: a line far longer than the buffer is read
// through in growing reads of at most 64 KiB and ends up in one unit.
func TestSplitLinesLongLine(t *testing.T) {
	in := &patternReader{size: 3 << 20, line: 1 << 20}
	specs, err := SplitInput("wc", in, in.size, Split{Kind: SplitLines, Size: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(spans(t, specs, nil)); got != fmt.Sprint([]span{{0, 1 << 20}, {1 << 20, 1 << 20}, {2 << 20, 1 << 20}}) {
		t.Errorf("units %s, want one per line", got)
	}
	if in.maxRead != lineBuffer || in.bytes != in.size-9 {
		t.Errorf("read %d bytes in reads of up to %d; want all but the first 9 bytes in 64 KiB reads", in.bytes, in.maxRead)
	}
}
