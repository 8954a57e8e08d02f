package ops

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// execute runs op on input in-process.
func execute(t testing.TB, op Op, input []byte, params map[string]string, hint Hint) []byte {
	t.Helper()
	out, err := Execute(t.Context(), op, bytes.NewReader(input), int64(len(input)), params, hint, 2)
	if err != nil {
		t.Fatalf("%s %v %+v: %v", op.Name(), params, hint, err)
	}
	return out
}

func encodePNG(t testing.TB, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func decodePNG(t testing.TB, b []byte) *image.RGBA {
	t.Helper()
	img, err := decodeImage("test", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// noisy returns a w x h image of random colours with random alpha, in
// non-premultiplied form, so premultiplication and clamping get exercised.
func noisy(w, h int, seed uint64) *image.NRGBA {
	rng := rand.New(rand.NewPCG(seed, 7))
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = uint8(rng.IntN(256))
	}
	return img
}

func TestRegistry(t *testing.T) {
	r := Builtin()
	want := []string{"blur", "checksum", "edges", "grayscale", "noop", "sharpen", "sleep"}
	if got := r.Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, name := range want {
		op, err := r.Lookup(name)
		if err != nil || op.Name() != name || op.Info().Doc == "" {
			t.Errorf("Lookup(%q) = %v, %v", name, op, err)
		}
	}
	_, err := r.Lookup("bluur")
	if !errors.Is(err, ErrUnknownOp) || !strings.Contains(err.Error(), `"bluur"`) || !strings.Contains(err.Error(), "blur, checksum") {
		t.Errorf("unknown op error = %v; want it to name the op and list the known ones", err)
	}
	if err := r.Register(Blur()); err == nil {
		t.Error("duplicate Register succeeded")
	}
	sub, err := r.Subset("blur", "noop")
	if err != nil || !slices.Equal(sub.Names(), []string{"blur", "noop"}) {
		t.Errorf("Subset = %v, %v", sub, err)
	}
	if _, err := r.Subset("nope"); !errors.Is(err, ErrUnknownOp) {
		t.Errorf("Subset(nope) = %v", err)
	}
}

// TestTilingIsPixelIdentical checks, for every image operation, that any
// tiling assembles to exactly the bytes of the whole-image run.
func TestTilingIsPixelIdentical(t *testing.T) {
	images := map[string][]byte{
		"sample37x23": encodePNG(t, SampleImage(37, 23)),
		"noisy16x16":  encodePNG(t, noisy(16, 16, 1)),
		"noisy1x1":    encodePNG(t, noisy(1, 1, 2)),
		"noisy1x9":    encodePNG(t, noisy(1, 9, 3)),
		"noisy9x1":    encodePNG(t, noisy(9, 1, 4)),
		"gif":         SampleGIF(),
	}
	ops := []struct {
		op     Op
		params map[string]string
	}{
		{Blur(), nil},
		{Blur(), map[string]string{"radius": "1"}},
		{Blur(), map[string]string{"radius": "7", "sigma": "2.5"}},
		{Blur(), map[string]string{"sigma": "0.6"}},
		{Grayscale(), nil},
		{Sharpen(), nil},
		{Sharpen(), map[string]string{"amount": "2.5"}},
		{Edges(), nil},
	}
	hints := []Hint{
		{TileW: 1, TileH: 1},
		{TileW: 3, TileH: 5},
		{TileW: 7, TileH: 7},
		{TileW: 16, TileH: 2},
		{TileW: 500, TileH: 500},
		{Units: 3},
		{Units: 1000},
		{Units: 1, Repeat: 3},
		{TileW: 5, TileH: 4, Repeat: 2},
	}
	for name, input := range images {
		for _, o := range ops {
			t.Run(name+"/"+o.op.Name()+paramString(o.params), func(t *testing.T) {
				t.Parallel()
				whole := execute(t, o.op, input, o.params, Hint{})
				for _, h := range hints {
					if h.tiled() && h.TileW*h.TileH < 40 && len(input) > 4000 {
						continue // tiny tiles of a big image only take time
					}
					if got := execute(t, o.op, input, o.params, h); !bytes.Equal(got, whole) {
						t.Errorf("hint %+v: output differs from the whole-image run", h)
					}
				}
			})
		}
	}
}

func paramString(p map[string]string) string {
	var s []string
	for k, v := range p {
		s = append(s, k+"="+v)
	}
	slices.Sort(s)
	if len(s) == 0 {
		return ""
	}
	return "/" + strings.Join(s, ",")
}

// TestBlurMatchesReference checks the two-lane arithmetic against a plain
// per-channel implementation of the same integer gaussian.
func TestBlurMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		w, h, radius int
		sigma        float64
	}{{23, 17, 3, 1.5}, {5, 40, 6, 3}, {1, 1, 2, 1}, {9, 9, 1, 0.1}} {
		src := image.NewRGBA(image.Rect(0, 0, tc.w, tc.h))
		draw := noisy(tc.w, tc.h, 9)
		for y := range tc.h {
			for x := range tc.w {
				src.Set(x, y, draw.At(x, y))
			}
		}
		k := gaussKernel(tc.radius, tc.sigma)
		var sum uint64
		for _, w := range k {
			sum += w
		}
		if sum != 1<<weightBits {
			t.Fatalf("kernel sums to %d", sum)
		}
		tl := &tile{w: tc.w, h: tc.h, data: src.Rect, core: src.Rect, pix: src.Pix}
		got := make([]byte, len(src.Pix))
		if err := blurTile(t.Context(), tl, k, got); err != nil {
			t.Fatal(err)
		}
		want := referenceBlur(src, k)
		if !bytes.Equal(got, want) {
			t.Errorf("%+v: blur differs from the reference", tc)
		}
	}
}

func referenceBlur(src *image.RGBA, k []uint64) []byte {
	w, h, r := src.Rect.Dx(), src.Rect.Dy(), len(k)/2
	clamp := func(v, n int) int { return min(max(v, 0), n-1) }
	mid := make([]uint64, w*h*4)
	for y := range h {
		for x := range w {
			for c := range 4 {
				var s uint64
				for i, wt := range k {
					s += wt * uint64(src.Pix[src.PixOffset(clamp(x-r+i, w), y)+c])
				}
				mid[(y*w+x)*4+c] = (s + 128) >> 8
			}
		}
	}
	out := make([]byte, w*h*4)
	for y := range h {
		for x := range w {
			for c := range 4 {
				var s uint64
				for i, wt := range k {
					s += wt * mid[(clamp(y-r+i, h)*w+x)*4+c]
				}
				out[(y*w+x)*4+c] = byte((s + 1<<23) >> 24)
			}
		}
	}
	return out
}

func TestFilterProperties(t *testing.T) {
	flat := image.NewRGBA(image.Rect(0, 0, 20, 10))
	for i := range flat.Pix {
		flat.Pix[i] = []byte{200, 100, 50, 255}[i%4]
	}
	in := encodePNG(t, flat)
	for _, op := range []Op{Blur(), Sharpen()} {
		if got := decodePNG(t, execute(t, op, in, nil, Hint{TileW: 6, TileH: 3})); !bytes.Equal(got.Pix, flat.Pix) {
			t.Errorf("%s of a flat image changed it", op.Name())
		}
	}
	edges := decodePNG(t, execute(t, Edges(), in, nil, Hint{}))
	for i := 0; i < len(edges.Pix); i += 4 {
		if !bytes.Equal(edges.Pix[i:i+4], []byte{0, 0, 0, 255}) {
			t.Fatalf("edges of a flat image: pixel %d = %v", i/4, edges.Pix[i:i+4])
		}
	}
	gray := decodePNG(t, execute(t, Grayscale(), encodePNG(t, SampleImage(30, 30)), nil, Hint{}))
	for i := 0; i < len(gray.Pix); i += 4 {
		if p := gray.Pix[i : i+4]; p[0] != p[1] || p[1] != p[2] {
			t.Fatalf("grayscale pixel %d = %v", i/4, p)
		}
	}
	// A vertical step has strong edges at the step and none elsewhere.
	step := image.NewRGBA(image.Rect(0, 0, 10, 4))
	for y := range 4 {
		for x := range 10 {
			v := uint8(0)
			if x >= 5 {
				v = 255
			}
			step.SetRGBA(x, y, color.RGBA{v, v, v, 255})
		}
	}
	e := decodePNG(t, execute(t, Edges(), encodePNG(t, step), nil, Hint{}))
	if e.RGBAAt(4, 2).R != 255 || e.RGBAAt(5, 2).R != 255 || e.RGBAAt(1, 2).R != 0 || e.RGBAAt(8, 2).R != 0 {
		t.Errorf("edges of a step: row = %v", e.Pix[e.PixOffset(0, 2):e.PixOffset(10, 2)])
	}
}

func TestInputFormats(t *testing.T) {
	src := SampleImage(40, 30)
	var jp bytes.Buffer
	if err := jpeg.Encode(&jp, src, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string][]byte{"png": encodePNG(t, src), "jpeg": jp.Bytes(), "gif": SampleGIF()} {
		out := execute(t, Blur(), in, nil, Hint{TileW: 16, TileH: 16})
		if !bytes.HasPrefix(out, []byte("\x89PNG")) {
			t.Errorf("%s: output is not PNG", name)
		}
	}

	// A GIF's first frame is what gets processed.
	pal := color.Palette{color.RGBA{0, 0, 0, 255}, color.RGBA{255, 255, 255, 255}}
	f1 := image.NewPaletted(image.Rect(0, 0, 8, 8), pal)
	f2 := image.NewPaletted(image.Rect(0, 0, 8, 8), pal)
	for i := range f2.Pix {
		f2.Pix[i] = 1
	}
	var anim bytes.Buffer
	if err := gif.EncodeAll(&anim, &gif.GIF{Image: []*image.Paletted{f1, f2}, Delay: []int{10, 10}}); err != nil {
		t.Fatal(err)
	}
	got := decodePNG(t, execute(t, Grayscale(), anim.Bytes(), nil, Hint{}))
	if got.RGBAAt(3, 3) != (color.RGBA{0, 0, 0, 255}) {
		t.Errorf("animated GIF: got %v, want the black first frame", got.RGBAAt(3, 3))
	}
}

func TestSampleGIF(t *testing.T) {
	a, b := SampleGIF(), SampleGIF()
	if !bytes.Equal(a, b) {
		t.Fatal("SampleGIF is not deterministic")
	}
	if len(a) < 17<<10 || len(a) > 21<<10 {
		t.Errorf("SampleGIF is %d bytes, want about 19 KB", len(a))
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(a))
	if err != nil || format != "gif" || cfg.Width != SampleGIFSize {
		t.Errorf("SampleGIF decodes as %v %s %v", cfg, format, err)
	}
}

func TestBadInput(t *testing.T) {
	pngIn := encodePNG(t, SampleImage(20, 20))
	tests := []struct {
		name   string
		op     Op
		input  []byte
		params map[string]string
		hint   Hint
		want   error
		msg    string
	}{
		{"not an image", Blur(), []byte("hello, world"), nil, Hint{}, ErrBadInput, "not a PNG, JPEG or GIF"},
		{"truncated png", Blur(), pngIn[:len(pngIn)/2], nil, Hint{}, ErrBadInput, "corrupt png image"},
		{"corrupt header", Grayscale(), append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 30)...), nil, Hint{}, ErrBadInput, "corrupt image header"},
		{"empty input", Edges(), nil, nil, Hint{}, ErrBadInput, "not a PNG"},
		{"tile width zero", Blur(), pngIn, nil, Hint{TileW: 0, TileH: 5}, ErrBadParam, "at least 1 pixel"},
		{"tile negative", Blur(), pngIn, nil, Hint{TileW: -1, TileH: -1}, ErrBadParam, "at least 1 pixel"},
		{"tile and units", Blur(), pngIn, nil, Hint{TileW: 4, TileH: 4, Units: 2}, ErrBadParam, "not both"},
		{"negative units", Blur(), pngIn, nil, Hint{Units: -2}, ErrBadParam, "units -2"},
		{"negative repeat", Noop(), pngIn, nil, Hint{Repeat: -1}, ErrBadParam, "repeat -1"},
		{"tile on checksum", Checksum(), pngIn, nil, Hint{TileW: 4, TileH: 4}, ErrBadParam, "does not take a tile"},
		{"too many units", Blur(), pngIn, nil, Hint{TileW: 1, TileH: 1, Repeat: 200}, ErrBadParam, "more than the limit"},
		{"unknown param", Blur(), pngIn, map[string]string{"radus": "3"}, Hint{}, ErrBadParam, `unknown parameter "radus" (known: radius, sigma)`},
		{"param on grayscale", Grayscale(), pngIn, map[string]string{"radius": "3"}, Hint{}, ErrBadParam, "it takes none"},
		{"radius zero", Blur(), pngIn, map[string]string{"radius": "0"}, Hint{}, ErrBadParam, "from 1 to 200"},
		{"radius text", Blur(), pngIn, map[string]string{"radius": "big"}, Hint{}, ErrBadParam, "radius=\"big\""},
		{"sigma huge", Blur(), pngIn, map[string]string{"sigma": "90"}, Hint{}, ErrBadParam, "needs radius 270"},
		{"sigma nan", Blur(), pngIn, map[string]string{"sigma": "NaN"}, Hint{}, ErrBadParam, "sigma"},
		{"amount zero", Sharpen(), pngIn, map[string]string{"amount": "0"}, Hint{}, ErrBadParam, "amount"},
		{"checksum block", Checksum(), pngIn, map[string]string{"block": "0"}, Hint{}, ErrBadParam, "block"},
		{"sleep fail list", Sleep(), nil, map[string]string{"fail": "x"}, Hint{}, ErrBadParam, "fail="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Execute(t.Context(), tt.op, bytes.NewReader(tt.input), int64(len(tt.input)), tt.params, tt.hint, 1)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %q, want it to say %q", err, tt.msg)
			}
		})
	}
}

func TestRunRejectsBadUnits(t *testing.T) {
	in := encodePNG(t, SampleImage(20, 20))
	specs, err := Blur().Split(bytes.NewReader(in), int64(len(in)), map[string]string{"radius": "1"}, Hint{TileW: 8, TileH: 8})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// A tile split for radius 1 lacks the halo radius 3 reads.
	_, err = Blur().Run(ctx, map[string]string{"radius": "3"}, [][]byte{specs[4].Data})
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "split with the same parameters") {
		t.Errorf("short halo: %v", err)
	}
	bad := bytes.Clone(specs[0].Data)
	bad = bad[:len(bad)-1]
	if _, err := Blur().Run(ctx, map[string]string{"radius": "1"}, [][]byte{bad}); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "bytes of pixels") {
		t.Errorf("short tile: %v", err)
	}
	if _, err := Blur().Run(ctx, nil, nil); !errors.Is(err, ErrBadInput) {
		t.Errorf("no inputs: %v", err)
	}
	// Results that do not cover the image, or overlap, do not assemble.
	var results [][]byte
	for _, s := range specs {
		r, err := Blur().Run(ctx, map[string]string{"radius": "1"}, [][]byte{s.Data})
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	if _, err := Blur().Assemble(nil, Hint{}, results[1:]); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "cover") {
		t.Errorf("missing tile: %v", err)
	}
	if _, err := Blur().Assemble(nil, Hint{}, append(results, results[0])); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("duplicate tile: %v", err)
	}
	// Copies of a repeated job must agree.
	other := slices.Clone(results)
	other[2] = results[3]
	if _, err := Blur().Assemble(nil, Hint{Repeat: 2}, append(slices.Clone(results), other...)); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "copy 2 of unit") {
		t.Errorf("disagreeing copies: %v", err)
	}
}

// FuzzTile feeds the tile decoder garbage: it must reject it cleanly, and
// whatever it accepts must be safe to filter and assemble.
func FuzzTile(f *testing.F) {
	good := (&tile{w: 3, h: 3, data: image.Rect(0, 0, 3, 3), core: image.Rect(1, 1, 2, 2), pix: make([]byte, 36)}).encode()
	f.Add(good)
	f.Add((&tile{w: 1, h: 1, data: image.Rect(0, 0, 1, 1), core: image.Rect(0, 0, 1, 1), pix: make([]byte, 4)}).encode())
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		b := bytes.Clone(good)
		b[rng.IntN(len(b))] = byte(rng.IntN(256))
		f.Add(b[:rng.IntN(len(b)+1)])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tl, err := decodeTile("t", b)
		if err != nil {
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("error %v does not wrap ErrBadInput", err)
			}
			return
		}
		dst := make([]byte, tl.core.Dx()*tl.core.Dy()*4)
		for _, apply := range []func() error{
			func() error { return blurTile(t.Context(), tl, gaussKernel(2, 1), dst) },
			func() error { return sharpenTile(t.Context(), tl, 256, dst) },
			func() error { return edgesTile(t.Context(), tl, dst) },
			func() error { return grayTile(t.Context(), tl, dst) },
		} {
			if err := apply(); err != nil {
				t.Fatal(err)
			}
		}
		_, _ = Blur().Assemble(nil, Hint{}, [][]byte{b})
	})
}

func TestChecksum(t *testing.T) {
	data := make([]byte, 1<<20+12345)
	for i := range data {
		data[i] = byte(i * 7 >> 3)
	}
	for _, block := range []int{1 << 16, 1000, 1} {
		in := data
		if block == 1 {
			in = data[:5000]
		}
		params := map[string]string{"block": strconv.Itoa(block)}
		want := ChecksumOf(in, block)
		for _, h := range []Hint{{}, {Units: 1}, {Units: 3}, {Units: 64}, {Units: 5, Repeat: 3}} {
			if got := string(execute(t, Checksum(), in, params, h)); got != want {
				t.Errorf("block %d hint %+v: got %q, want %q", block, h, got, want)
			}
		}
	}
	// The DAG: chunk units first, then one reduce unit on all of them.
	specs, err := Checksum().Split(bytes.NewReader(data), int64(len(data)), nil, Hint{Units: 4})
	if err != nil {
		t.Fatal(err)
	}
	last := specs[len(specs)-1]
	if len(specs) != 5 || !slices.Equal(last.Deps, []int{0, 1, 2, 3}) || last.Params["step"] != "reduce" {
		t.Errorf("specs: %d units, last %+v", len(specs), last)
	}
	for _, s := range specs[:4] {
		if !s.FromInput || s.Off%(64<<10) != 0 {
			t.Errorf("chunk %+v: not a block-aligned input range", s)
		}
	}
	if got := string(execute(t, Checksum(), nil, nil, Hint{Units: 3})); got != ChecksumOf(nil, 1) {
		t.Errorf("empty input: %q", got)
	}
	if _, err := Checksum().Run(t.Context(), map[string]string{"step": "reduce"}, [][]byte{nil, make([]byte, 31)}); !errors.Is(err, ErrBadInput) {
		t.Errorf("reduce of a short digest: %v", err)
	}
	if _, err := Checksum().Run(t.Context(), nil, [][]byte{nil}); !errors.Is(err, ErrBadParam) {
		t.Errorf("no step: %v", err)
	}
}

func TestNoop(t *testing.T) {
	data := []byte("the quick brown fox jumps over the lazy dog")
	for _, h := range []Hint{{}, {Units: 1}, {Units: 4}, {Units: 100}, {Units: 3, Repeat: 4}} {
		if got := execute(t, Noop(), data, nil, h); !bytes.Equal(got, data) {
			t.Errorf("hint %+v: got %q", h, got)
		}
	}
	if got := execute(t, Noop(), nil, nil, Hint{Units: 3}); len(got) != 0 {
		t.Errorf("empty input: got %q", got)
	}
	specs, _ := Noop().Split(bytes.NewReader(data), int64(len(data)), nil, Hint{Repeat: 5})
	for _, s := range specs {
		if !s.FromInput || s.Off != 0 || s.Len != int64(len(data)) {
			t.Errorf("repeat spec %+v: want the whole input by reference", s)
		}
	}
}

func TestSleepAndFailure(t *testing.T) {
	if _, err := Execute(t.Context(), Sleep(), nil, 0, map[string]string{"ms": "1"}, Hint{Units: 6}, 3); err != nil {
		t.Fatal(err)
	}
	_, err := Execute(t.Context(), Sleep(), nil, 0, map[string]string{"ms": "1", "fail": "4"}, Hint{Units: 6}, 3)
	if err == nil || !strings.Contains(err.Error(), "unit 4") {
		t.Errorf("failing unit: %v; want an error naming unit 4", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Execute(ctx, Sleep(), nil, 0, map[string]string{"ms": "10000"}, Hint{Units: 2}, 2); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
}

func TestRepeatShiftsDeps(t *testing.T) {
	specs := repeat([]UnitSpec{{}, {}, {Deps: []int{0, 1}}}, 3)
	if len(specs) != 9 || !slices.Equal(specs[5].Deps, []int{3, 4}) || !slices.Equal(specs[8].Deps, []int{6, 7}) || !slices.Equal(specs[2].Deps, []int{0, 1}) {
		t.Errorf("repeat: %+v", specs)
	}
}

// BenchmarkBlur blurs a 4096x4096 image cut into 256x256 tiles: the cost a
// set of workers pays for one job, on one core.
func BenchmarkBlur(b *testing.B) {
	in := SamplePNG(4096, 4096)
	for _, radius := range []string{"2", "5", "10"} {
		params := map[string]string{"radius": radius}
		specs, err := Blur().Split(bytes.NewReader(in), int64(len(in)), params, Hint{TileW: 256, TileH: 256})
		if err != nil {
			b.Fatal(err)
		}
		b.Run("size=4096/tile=256/radius="+radius, func(b *testing.B) {
			b.SetBytes(4096 * 4096 * 4)
			b.ReportAllocs()
			for b.Loop() {
				for _, s := range specs {
					if _, err := Blur().Run(b.Context(), params, [][]byte{s.Data}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(specs))/1e6, "ms/tile")
		})
	}
}

// BenchmarkSplitAssemble measures the server's share of a tiled blur job.
func BenchmarkSplitAssemble(b *testing.B) {
	in := SamplePNG(4096, 4096)
	hint := Hint{TileW: 256, TileH: 256}
	specs, _ := Blur().Split(bytes.NewReader(in), int64(len(in)), nil, hint)
	results := make([][]byte, len(specs))
	for i, s := range specs {
		results[i], _ = Blur().Run(b.Context(), nil, [][]byte{s.Data})
	}
	b.Run("split", func(b *testing.B) {
		b.SetBytes(4096 * 4096 * 4)
		for b.Loop() {
			if _, err := Blur().Split(bytes.NewReader(in), int64(len(in)), nil, hint); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("assemble", func(b *testing.B) {
		b.SetBytes(4096 * 4096 * 4)
		for b.Loop() {
			if _, err := Blur().Assemble(nil, hint, results); err != nil {
				b.Fatal(err)
			}
		}
	})
}
