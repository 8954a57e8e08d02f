package ops

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestParseMerge(t *testing.T) {
	good := []struct {
		in    string
		want  Merge
		canon string
	}{
		{"concat", Merge{Kind: MergeConcat}, "concat"},
		{"tiles", Merge{Kind: MergeTiles}, "tiles"},
		{" Tiles ", Merge{Kind: MergeTiles}, "tiles"},
		{"reduce:sum", Merge{Kind: MergeReduce, Op: "sum"}, "reduce:sum"},
		{"REDUCE:Word-Count_2", Merge{Kind: MergeReduce, Op: "Word-Count_2"}, "reduce:Word-Count_2"},
	}
	for _, tt := range good {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMerge(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || got.IsZero() {
				t.Fatalf("ParseMerge = %+v, want %+v", got, tt.want)
			}
			if s := got.String(); s != tt.canon {
				t.Errorf("String = %q, want %q", s, tt.canon)
			}
			if back, err := ParseMerge(got.String()); err != nil || back != got {
				t.Errorf("ParseMerge(String()) = %+v, %v; want %+v", back, err, got)
			}
		})
	}

	bad := []struct{ in, msg string }{
		{"", "empty"},
		{"reduce", "reduce needs the name of the operation"},
		{"reduce:", "reduce needs the name of the operation"},
		{"reduce:a b", `operation name "a b": want one word without spaces`},
		{"reduce:a,b", `operation name "a,b"`},
		{"reduce:a:b", `operation name "a:b"`},
		{"reduce:a\tb", `operation name "a\tb"`},
		{"concat:x", "concat takes no argument"},
		{"tiles:3", "tiles takes no argument"},
		{"sum", `unknown kind "sum"`},
		{"whole", `unknown kind "whole"`},
	}
	for _, tt := range bad {
		t.Run("bad/"+tt.in, func(t *testing.T) {
			m, err := ParseMerge(tt.in)
			if err == nil {
				t.Fatalf("ParseMerge(%q) = %+v, want an error", tt.in, m)
			}
			if !errors.Is(err, ErrBadParam) {
				t.Errorf("error %v does not wrap ErrBadParam", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.msg) || !strings.Contains(msg, fmt.Sprintf("%q", tt.in)) {
				t.Errorf("error %q does not quote the input and say %q", msg, tt.msg)
			}
			if !strings.Contains(msg, "as in ") && !strings.Contains(msg, "write ") {
				t.Errorf("error %q shows no example of the right form", msg)
			}
		})
	}

	var z Merge
	if !z.IsZero() || z.String() != "" {
		t.Errorf("zero Merge: IsZero %v, String %q", z.IsZero(), z.String())
	}
}

func TestConcat(t *testing.T) {
	for _, results := range [][][]byte{
		nil,
		{nil, {}},
		{[]byte("a")},
		{[]byte("ab"), nil, []byte("c"), []byte("def")},
	} {
		got := Concat(results)
		want := bytes.Join(results, nil)
		if !bytes.Equal(got, want) || got == nil || cap(got) != len(want) {
			t.Errorf("Concat(%q) = %q (cap %d), want %q", results, got, cap(got), want)
		}
	}
	// The output is new: changing it leaves the results alone.
	in := [][]byte{[]byte("xy")}
	Concat(in)[0] = 'z'
	if string(in[0]) != "xy" {
		t.Error("Concat aliases its input")
	}
}

// splitImage splits img, encoded as PNG, by sp.
func splitImage(t testing.TB, img image.Image, sp string) []UnitSpec {
	t.Helper()
	s, err := ParseSplit(sp)
	if err != nil {
		t.Fatal(err)
	}
	in := encodePNG(t, img)
	specs, err := SplitInput("mod", bytes.NewReader(in), int64(len(in)), s, map[string]string{"p": "1"})
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

// runTiles applies run to every unit's tile.
func runTiles(t testing.TB, specs []UnitSpec, run func(t *tile) []byte) [][]byte {
	t.Helper()
	results := make([][]byte, len(specs))
	for i, s := range specs {
		if s.FromInput || s.Deps != nil || s.Params["p"] != "1" {
			t.Fatalf("unit %d = %+v, want a tile in Data with the job's params", i, s)
		}
		tl, err := decodeTile("test", s.Data)
		if err != nil {
			t.Fatalf("unit %d: %v", i, err)
		}
		results[i] = run(tl)
	}
	return results
}

// coreOnly returns t cropped to its core, encoded.
func coreOnly(t *tile) []byte {
	img := &image.RGBA{Pix: t.pix, Stride: t.data.Dx() * 4, Rect: t.data}
	c := &tile{w: t.w, h: t.h, data: t.core, core: t.core, pix: cropPix(img, t.core)}
	return c.encode()
}

// mergeTiles merges results and decodes the PNG.
func mergeTiles(t testing.TB, results [][]byte) *image.RGBA {
	t.Helper()
	out, err := AssembleTiles("mod", results)
	if err != nil {
		t.Fatal(err)
	}
	return decodePNG(t, out)
}

func TestSplitMergeTilesRoundTrip(t *testing.T) {
	src := SampleImage(200, 150)
	specs := splitImage(t, src, "tiles:37x23+3")
	if len(specs) != 6*7 {
		t.Fatalf("%d tiles, want 6x7", len(specs))
	}
	full := src.Rect
	i := 0
	for y := 0; y < 150; y += 23 {
		for x := 0; x < 200; x += 37 {
			tl, err := decodeTile("test", specs[i].Data)
			if err != nil {
				t.Fatal(err)
			}
			core := image.Rect(x, y, x+37, y+23).Intersect(full)
			if tl.w != 200 || tl.h != 150 || tl.core != core || tl.data != core.Inset(-3).Intersect(full) {
				t.Fatalf("tile %d: %dx%d image, core %v, data %v; want core %v with a halo of 3", i, tl.w, tl.h, tl.core, tl.data, core)
			}
			if want := cropPix(src, tl.data); !bytes.Equal(tl.pix, want) {
				t.Fatalf("tile %d: pixels differ from the image's", i)
			}
			i++
		}
	}

	identity := runTiles(t, specs, func(t *tile) []byte { return t.encode() })
	cores := runTiles(t, specs, coreOnly)
	// Results in any order, and mixed forms.
	rng := rand.New(rand.NewPCG(3, 4))
	mixed := slices.Clone(identity)
	for i := range mixed {
		if rng.IntN(2) == 0 {
			mixed[i] = cores[i]
		}
	}
	rng.Shuffle(len(mixed), func(i, j int) { mixed[i], mixed[j] = mixed[j], mixed[i] })
	for name, results := range map[string][][]byte{"identity": identity, "cores": cores, "mixed": mixed} {
		if got := mergeTiles(t, results); !bytes.Equal(got.Pix, src.Pix) || got.Rect != src.Rect {
			t.Errorf("%s: merged image differs from the original", name)
		}
	}

	// One tile bigger than the image, and 1x1 tiles.
	for _, sp := range []string{"tiles:500x500+7", "tiles:1x1", "tiles:1x1+1"} {
		small := SampleImage(13, 9)
		results := runTiles(t, splitImage(t, small, sp), func(t *tile) []byte { return t.encode() })
		if got := mergeTiles(t, results); !bytes.Equal(got.Pix, small.Pix) {
			t.Errorf("%s: merged image differs from the original", sp)
		}
	}
}

// boxFilter returns a 3x3 box blur of t's core: the mean of each pixel's
// neighbours, clamped at the image edge. It reads them from t's data, so
// without a halo a tile's edge comes out different.
func boxFilter(t *tile) []byte {
	out := &tile{w: t.w, h: t.h, data: t.core, core: t.core, pix: make([]byte, 0, t.core.Dx()*t.core.Dy()*4)}
	for y := t.core.Min.Y; y < t.core.Max.Y; y++ {
		for x := t.core.Min.X; x < t.core.Max.X; x++ {
			var sum [4]int
			for dy := -1; dy <= 1; dy++ {
				for dx := -1; dx <= 1; dx++ {
					px := min(max(x+dx, 0), t.w-1)
					py := min(max(y+dy, 0), t.h-1)
					p := t.clampedRow(py)[t.clampX(px)*4:]
					for c := range sum {
						sum[c] += int(p[c])
					}
				}
			}
			for c := range sum {
				out.pix = append(out.pix, byte((sum[c]+4)/9))
			}
		}
	}
	return out.encode()
}

// TestMergeTilesFilterWithHalo: a filter reading one pixel around each
// pixel gives the same image tiled with a halo of 1 or more as in one
// tile; without a halo it does not.
func TestMergeTilesFilterWithHalo(t *testing.T) {
	src := SampleImage(100, 75)
	whole := mergeTiles(t, runTiles(t, splitImage(t, src, "tiles:100x75"), boxFilter))
	if bytes.Equal(whole.Pix, src.Pix) {
		t.Fatal("the box filter changed nothing")
	}
	for _, sp := range []string{"tiles:37x23+1", "tiles:37x23+3", "tiles:1x75+1", "tiles:7x5+2"} {
		if got := mergeTiles(t, runTiles(t, splitImage(t, src, sp), boxFilter)); !bytes.Equal(got.Pix, whole.Pix) {
			t.Errorf("%s: output differs from the one-tile run", sp)
		}
	}
	if got := mergeTiles(t, runTiles(t, splitImage(t, src, "tiles:37x23"), boxFilter)); bytes.Equal(got.Pix, whole.Pix) {
		t.Error("tiles without a halo gave the one-tile output; the test filter does not read the halo")
	}
}

func TestMergeTilesErrors(t *testing.T) {
	src := SampleImage(40, 30)
	results := runTiles(t, splitImage(t, src, "tiles:16x16+2"), func(t *tile) []byte { return t.encode() })
	other := runTiles(t, splitImage(t, SampleImage(41, 30), "tiles:16x16+2"), func(t *tile) []byte { return t.encode() })
	if len(results) != 6 {
		t.Fatalf("%d tiles, want 6", len(results))
	}
	with := func(i int, b []byte) [][]byte {
		r := slices.Clone(results)
		r[i] = b
		return r
	}
	shrunk := func(b []byte) []byte { // a result whose core lies outside its data
		tl, _ := decodeTile("test", b)
		tl.core = tl.core.Add(image.Pt(1, 0))
		tl.data, tl.pix = tl.core, make([]byte, tl.core.Dx()*tl.core.Dy()*4)
		return tl.encode()
	}
	for _, tt := range []struct {
		name    string
		results [][]byte
		msg     string
	}{
		{"none", nil, "mod: merge tiles: no results"},
		{"missing", results[1:], "mod: merge tiles: results cover 944 of 1200 pixels"},
		{"duplicate", append(slices.Clone(results), results[4]), "mod: merge tiles: result 6 overlaps another at (16,16)"},
		{"overlapping", with(5, shrunk(results[4])), "mod: merge tiles: result 5 overlaps another at (17,16)"},
		{"other image", with(3, other[3]), "mod: merge tiles: result 3 is a tile of a 41x30 image, but result 0 is of a 40x30 image"},
		{"garbage", with(2, []byte("not a tile at all, but longer than a header")), "mod: merge tiles: result 2: mod: tile: 43 bytes, not an encoded tile"},
		{"empty", with(1, nil), "mod: merge tiles: result 1: mod: tile: 0 bytes"},
		{"short", with(4, results[4][:len(results[4])-4]), "mod: merge tiles: result 4: mod: tile: "},
		{"a PNG", with(0, SamplePNG(40, 30)), "mod: merge tiles: result 0: mod: tile:"},
	} {
		_, err := AssembleTiles("mod", tt.results)
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.msg)
		}
	}
}

// FuzzAssembleTiles: whatever the results, AssembleTiles fails cleanly or
// returns a PNG.
func FuzzAssembleTiles(f *testing.F) {
	specs := splitImage(f, SampleImage(9, 7), "tiles:4x4+1")
	for _, s := range specs {
		f.Add(s.Data, specs[0].Data)
		f.Add(coreOnly(mustTile(f, s.Data)), s.Data)
	}
	f.Add([]byte("BRT1"), []byte{})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		out, err := AssembleTiles("mod", [][]byte{a, b})
		if err != nil {
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("error %v does not wrap ErrBadInput", err)
			}
			return
		}
		decodePNG(t, out)
	})
}

func mustTile(t testing.TB, b []byte) *tile {
	t.Helper()
	tl, err := decodeTile("test", b)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}
