package examples

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math/rand/v2"
	"testing"

	"github.com/braid-hpc/braid/ops"
)

// TestBoxBlur: boxblur over tiles with a halo of at least the radius gives
// the whole image's box blur (checked against one made here); with a
// smaller halo the tile seams show, and only there.
func TestBoxBlur(t *testing.T) {
	mod := module(t, "boxblur")
	const w, h = 150, 97
	in := samplePNG(t, w, h)
	src := decode(t, in)
	whole := fmt.Sprintf("tiles:%dx%d", w, h)
	tiled := func(t *testing.T, split string, env map[string]string) *image.RGBA {
		t.Helper()
		out, err := ops.AssembleTiles("boxblur", runUnits(t, mod, "boxblur", in, split, env))
		if err != nil {
			t.Fatalf("merge tiles of split %s: %v", split, err)
		}
		return decode(t, out)
	}

	for _, r := range []int{0, 1, 2, 3, 9} {
		env := map[string]string{"RADIUS": fmt.Sprint(r)}
		if r == 2 {
			env = nil // the default
		}
		t.Run(fmt.Sprintf("radius=%d", r), func(t *testing.T) {
			want := viaPNG(t, boxBlur(src, r))
			samePixels(t, whole, tiled(t, whole, env), want)
			samePixels(t, fmt.Sprintf("tiles:37x23+%d", r), tiled(t, fmt.Sprintf("tiles:37x23+%d", r), env), want)
			samePixels(t, "tiles:37x23+16", tiled(t, "tiles:37x23+16", env), want)
		})
	}

	t.Run("halo=1 radius=3", func(t *testing.T) {
		const r, halo, tw, th = 3, 1, 37, 23
		got := tiled(t, fmt.Sprintf("tiles:%dx%d+%d", tw, th, halo), map[string]string{"RADIUS": fmt.Sprint(r)})
		want := viaPNG(t, boxBlur(src, r))
		// A pixel farther than r from every seam between tiles reads
		// only its own tile's core: it must be right. Some nearer ones
		// read clamped pixels instead of their neighbours': wrong.
		nearSeam := func(v, side, size int) bool {
			d := v % side
			return (v >= side && d < r) || (v+side-d < size && side-d <= r)
		}
		wrong := 0
		for y := range h {
			for x := range w {
				i := want.PixOffset(x, y)
				if bytes.Equal(got.Pix[i:i+4], want.Pix[i:i+4]) {
					continue
				}
				wrong++
				if !nearSeam(x, tw, w) && !nearSeam(y, th, h) {
					t.Errorf("(%d,%d), %d pixels from any seam, is %v, want %v", x, y, r+1, got.Pix[i:i+4], want.Pix[i:i+4])
				}
			}
		}
		if wrong == 0 {
			t.Errorf("a halo of %d with RADIUS=%d gave the whole image's result: the halo does not matter?", halo, r)
		}
	})
}

func TestBoxBlurErrors(t *testing.T) {
	mod := module(t, "boxblur")
	in := samplePNG(t, 20, 10)
	unit := firstTile(t, in, "tiles:8x8+2")
	for _, tc := range []struct {
		name  string
		env   map[string]string
		stdin []byte
		code  int
		want  []string
	}{
		{"RADIUS not a number", map[string]string{"RADIUS": "abc"}, unit, 2, []string{`RADIUS="abc"`, "0 to 64"}},
		{"RADIUS too large", map[string]string{"RADIUS": "65"}, unit, 2, []string{`RADIUS="65"`}},
		{"RADIUS negative", map[string]string{"RADIUS": "-1"}, unit, 2, []string{`RADIUS="-1"`}},
		{"no input", nil, nil, 1, []string{"0 bytes", "not a BRT1 tile", "tiles:WxH+HALO"}},
		{"not a tile", nil, in, 1, []string{"does not start with BRT1"}},
		{"pixels missing", nil, unit[:len(unit)-1], 1, []string{"bytes of pixels, want"}},
		{"pixels extra", nil, append(bytes.Clone(unit), 0), 1, []string{"bytes of pixels, want"}},
		{"core outside data", nil, withField(unit, 8, 30), 1, []string{"inside data"}},
		{"data outside image", nil, withField(unit, 4, 21), 1, []string{"inside data"}},
		{"inverted rectangle", nil, withField(unit, 2, 11), 1, []string{"inverted"}},
		{"empty image", nil, withField(unit, 0, 0), 1, []string{"image size 0x10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, mod, "boxblur", tc.stdin, tc.env)
			wantExit(t, err, tc.code, tc.want...)
		})
	}
}

// TestBlur: the C port of braid's gaussian blur gives exactly the
// built-in's pixels, tiled the same way.
func TestBlur(t *testing.T) {
	mod := module(t, "blur")
	in := samplePNG(t, 200, 150)
	for _, tc := range []struct {
		name    string
		env     map[string]string // the module's parameters
		builtin map[string]string // the built-in's
		halo    int
		side    int // the tiles' width; 0 is 64
	}{
		{"radius=5", map[string]string{"RADIUS": "5"}, map[string]string{"radius": "5"}, 5, 0},
		{"default", nil, nil, 5, 0},
		{"radius=3 sigma=1.2", map[string]string{"RADIUS": "3", "SIGMA": "1.2"}, map[string]string{"radius": "3", "sigma": "1.2"}, 3, 0},
		{"sigma=0.8", map[string]string{"SIGMA": "0.8"}, map[string]string{"sigma": "0.8"}, 3, 0}, // radius ceil(3*0.8)
		// Tiles 61 and 200 mod 61 = 17 pixels wide: rows that are not whole
		// groups of 4 pixels on blur.c's SIMD path.
		{"radius=5 tiles 61 wide", map[string]string{"RADIUS": "5"}, map[string]string{"radius": "5"}, 5, 61},
		{"radius=7 tiles 3 wide", map[string]string{"RADIUS": "7"}, map[string]string{"radius": "7"}, 7, 3},
		// A centre weight of 1 << 15 or more: blur.c's scalar path.
		{"sigma=0.5", map[string]string{"SIGMA": "0.5"}, map[string]string{"sigma": "0.5"}, 2, 0}, // radius ceil(3*0.5)
	} {
		t.Run(tc.name, func(t *testing.T) {
			side := cmp.Or(tc.side, 64)
			split := fmt.Sprintf("tiles:%dx64+%d", side, tc.halo)
			out, err := ops.AssembleTiles("blur", runUnits(t, mod, "blur", in, split, tc.env))
			if err != nil {
				t.Fatalf("merge tiles of split %s: %v", split, err)
			}
			want, err := ops.Execute(t.Context(), ops.Blur(), bytes.NewReader(in), int64(len(in)), tc.builtin,
				ops.Hint{TileW: side, TileH: 64}, 0)
			if err != nil {
				t.Fatalf("built-in blur: %v", err)
			}
			samePixels(t, split, decode(t, out), decode(t, want))
		})
	}
}

func TestBlurErrors(t *testing.T) {
	mod := module(t, "blur")
	in := samplePNG(t, 20, 10)
	unit := firstTile(t, in, "tiles:8x8+5")
	for _, tc := range []struct {
		name  string
		env   map[string]string
		stdin []byte
		code  int
		want  []string
	}{
		{"RADIUS=0", map[string]string{"RADIUS": "0"}, unit, 2, []string{`RADIUS="0"`, "1 to 200"}},
		{"RADIUS=201", map[string]string{"RADIUS": "201"}, unit, 2, []string{`RADIUS="201"`}},
		{"RADIUS not a number", map[string]string{"RADIUS": "5px"}, unit, 2, []string{`RADIUS="5px"`}},
		{"SIGMA=0", map[string]string{"SIGMA": "0"}, unit, 2, []string{`SIGMA="0"`, "above 0"}},
		{"SIGMA=nan", map[string]string{"SIGMA": "nan"}, unit, 2, []string{`SIGMA="nan"`}},
		{"SIGMA needs too large a radius", map[string]string{"SIGMA": "70"}, unit, 2, []string{"RADIUS=210"}},
		{"halo smaller than the radius", map[string]string{"RADIUS": "6"}, unit, 1, []string{"tiles:WxH+6"}},
		{"not a tile", nil, in, 1, []string{"does not start with BRT1"}},
		{"pixels missing", nil, unit[:len(unit)-4], 1, []string{"bytes of pixels, want"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, mod, "blur", tc.stdin, tc.env)
			wantExit(t, err, tc.code, tc.want...)
		})
	}
}

// samplePNG returns a w x h PNG: colour gradients with noise, and an alpha
// channel that varies too, so premultiplication matters.
func samplePNG(t testing.TB, w, h int) []byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(w), uint64(h)))
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	noise := func(v int) uint8 { return uint8(min(max(v+rng.IntN(61)-30, 0), 255)) }
	for y := range h {
		for x := range w {
			img.SetNRGBA(x, y, color.NRGBA{
				R: noise(255 * x / w),
				G: noise(255 * y / h),
				B: noise(255 * (x + y) / (w + h)),
				A: noise(255 - 128*x/w),
			})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// decode decodes a PNG into premultiplied RGBA at (0, 0), as braid does.
func decode(t testing.TB, b []byte) *image.RGBA {
	t.Helper()
	src, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	dst := image.NewRGBA(image.Rect(0, 0, src.Bounds().Dx(), src.Bounds().Dy()))
	draw.Draw(dst, dst.Rect, src, src.Bounds().Min, draw.Src)
	return dst
}

// viaPNG returns img encoded as PNG and decoded, as the tiles merge's
// output is: PNG stores colours not premultiplied, so where alpha is
// below 255 the round trip may change a colour by one.
func viaPNG(t testing.TB, img *image.RGBA) *image.RGBA {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return decode(t, buf.Bytes())
}

// boxBlur is boxblur's result for the whole image: each pixel the mean,
// rounded half up, of the (2r+1)^2 pixels around it, reading beyond the
// edge as the edge pixel.
func boxBlur(src *image.RGBA, r int) *image.RGBA {
	b := src.Rect
	dst := image.NewRGBA(b)
	n := (2*r + 1) * (2*r + 1)
	for y := range b.Dy() {
		for x := range b.Dx() {
			var sum [4]int
			for dy := -r; dy <= r; dy++ {
				for dx := -r; dx <= r; dx++ {
					i := src.PixOffset(min(max(x+dx, 0), b.Dx()-1), min(max(y+dy, 0), b.Dy()-1))
					for c := range sum {
						sum[c] += int(src.Pix[i+c])
					}
				}
			}
			o := dst.PixOffset(x, y)
			for c := range sum {
				dst.Pix[o+c] = uint8((sum[c] + n/2) / n)
			}
		}
	}
	return dst
}

// samePixels fails t if got and want differ, naming the first pixel that
// does and how many do.
func samePixels(t testing.TB, what string, got, want *image.RGBA) {
	t.Helper()
	if got.Rect != want.Rect {
		t.Fatalf("%s: image %v, want %v", what, got.Rect, want.Rect)
	}
	first, n := image.Point{-1, -1}, 0
	for y := range want.Rect.Dy() {
		for x := range want.Rect.Dx() {
			i := want.PixOffset(x, y)
			if !bytes.Equal(got.Pix[i:i+4], want.Pix[i:i+4]) {
				if n == 0 {
					first = image.Pt(x, y)
				}
				n++
			}
		}
	}
	if n > 0 {
		i := want.PixOffset(first.X, first.Y)
		t.Errorf("%s: %d pixels differ; the first at %v is %v, want %v", what, n, first, got.Pix[i:i+4], want.Pix[i:i+4])
	}
}

// firstTile returns the first unit of split over in: an encoded tile
// to feed a module directly.
func firstTile(t testing.TB, in []byte, split string) []byte {
	t.Helper()
	sp, err := ops.ParseSplit(split)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := ops.SplitInput("test", bytes.NewReader(in), int64(len(in)), sp, nil)
	if err != nil {
		t.Fatal(err)
	}
	return specs[0].Data
}

// withField returns a copy of the encoded tile with header field i (0 is
// the image width, 2 to 5 the data rectangle, 6 to 9 the core) set to v.
func withField(tile []byte, i int, v uint32) []byte {
	b := bytes.Clone(tile)
	binary.LittleEndian.PutUint32(b[4+4*i:], v)
	return b
}
