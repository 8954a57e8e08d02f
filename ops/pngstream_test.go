package ops

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math/rand/v2"
	"testing"
)

// smallBands makes the streaming decoder and assembler work a few rows
// at a time, so small images cross many bands.
func smallBands(t testing.TB, n int) {
	old := bandBytes
	bandBytes = n
	t.Cleanup(func() { bandBytes = old })
}

// testImages are images of every kind image/png writes, with sizes that
// cross band edges and odd bit packings.
func testImages() map[string]image.Image {
	r := rand.New(rand.NewPCG(1, 2))
	rect := image.Rect(0, 0, 37, 29)
	imgs := map[string]image.Image{}
	rgba, nrgba := image.NewRGBA(rect), image.NewNRGBA(rect)
	opaque := image.NewRGBA(rect)
	gray, gray16 := image.NewGray(rect), image.NewGray16(rect)
	rgba64, nrgba64 := image.NewRGBA64(rect), image.NewNRGBA64(rect)
	for y := range rect.Dy() {
		for x := range rect.Dx() {
			v := r.Uint32()
			a := uint8(v >> 24)
			if x%5 == 0 {
				a = 0xff
			} else if x%7 == 0 {
				a = 0
			}
			rgba.Set(x, y, color.RGBA{min(uint8(v), a), min(uint8(v>>8), a), min(uint8(v>>16), a), a})
			nrgba.Set(x, y, color.NRGBA{uint8(v), uint8(v >> 8), uint8(v >> 16), a})
			opaque.Set(x, y, color.RGBA{uint8(v), uint8(v >> 8), uint8(v >> 16), 0xff})
			gray.Set(x, y, color.Gray{uint8(v)})
			gray16.Set(x, y, color.Gray16{uint16(v)})
			rgba64.Set(x, y, color.RGBA64{uint16(v), uint16(v), uint16(v), 0xffff})
			nrgba64.Set(x, y, color.NRGBA64{uint16(v), uint16(v >> 3), uint16(v >> 5), uint16(v>>16) | 1})
		}
	}
	imgs["rgba"], imgs["nrgba"], imgs["opaque"] = rgba, nrgba, opaque
	imgs["gray"], imgs["gray16"], imgs["rgb16"], imgs["nrgba64"] = gray, gray16, rgba64, nrgba64
	for _, n := range []int{2, 4, 16, 256} {
		pal := make(color.Palette, n)
		for i := range pal {
			pal[i] = color.NRGBA{uint8(i * 7), uint8(i * 13), uint8(i * 29), uint8(255 - i%3*60)}
		}
		p := image.NewPaletted(rect, pal)
		for i := range p.Pix {
			p.Pix[i] = uint8(r.IntN(n))
		}
		imgs["paletted"+string(rune('0'+len(imgs)%10))+"-"+itoa(n)] = p
	}
	return imgs
}

func itoa(n int) string {
	b := []byte{}
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// withChunk inserts a chunk into an encoded PNG just before its first
// IDAT.
func withChunk(t testing.TB, b []byte, typ string, data []byte) []byte {
	t.Helper()
	i := bytes.Index(b, []byte("IDAT"))
	if i < 4 {
		t.Fatal("no IDAT")
	}
	var c bytes.Buffer
	writeChunk(&c, typ, data)
	return append(append(append([]byte(nil), b[:i-4]...), c.Bytes()...), b[i-4:]...)
}

// rowsOf decodes b with decodePNGRows.
func rowsOf(b []byte) ([]byte, error) {
	var out []byte
	err := decodePNGRows(bytes.NewReader(b), func(rows []byte) error {
		out = append(out, rows...)
		return nil
	})
	return out, err
}

// wholeOf decodes b as decodeImage does.
func wholeOf(b []byte) ([]byte, error) {
	img, err := decodeImage("test", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return img.Pix, nil
}

// TestDecodePNGRowsMatchesImagePNG: every kind of PNG decodes, band by
// band, to the pixels decodeImage gives.
func TestDecodePNGRowsMatchesImagePNG(t *testing.T) {
	files := map[string][]byte{}
	for name, img := range testImages() {
		for _, level := range []png.CompressionLevel{png.BestSpeed, png.BestCompression} {
			var buf bytes.Buffer
			if err := (&png.Encoder{CompressionLevel: level}).Encode(&buf, img); err != nil {
				t.Fatal(err)
			}
			files[name+"/"+itoa(int(-level))] = buf.Bytes()
		}
	}
	// Transparency by a color key, which image/png does not write.
	var g, rgb bytes.Buffer
	png.Encode(&g, testImages()["gray"])
	png.Encode(&rgb, testImages()["opaque"])
	files["gray+tRNS"] = withChunk(t, g.Bytes(), "tRNS", []byte{0, 0x40})
	files["rgb+tRNS"] = withChunk(t, rgb.Bytes(), "tRNS", []byte{0, 1, 0, 2, 0, 3})
	// Low bit depth gray, and gray with alpha, which it does not write.
	files["gray2"] = rawPNG(t, 13, 7, 2, 0, func(row []byte, y int) {
		for i := range row {
			row[i] = byte(y*31 + i*17)
		}
	})
	files["gray-alpha"] = rawPNG(t, 9, 5, 8, 4, func(row []byte, y int) {
		for i := range row {
			row[i] = byte(y*7 + i*3)
		}
	})
	for _, band := range []int{4 << 20, 1, 37 * 4 * 3} {
		smallBands(t, band)
		for name, b := range files {
			want, err := wholeOf(b)
			if err != nil {
				t.Fatalf("%s: image/png: %v", name, err)
			}
			got, err := rowsOf(b)
			if err != nil {
				t.Errorf("%s (band %d): %v", name, band, err)
				continue
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s (band %d): pixels differ from image/png's", name, band)
			}
		}
	}
}

// rawPNG writes a non-interlaced PNG of w x h with the given bit depth
// and color type, whose rows fill fills, each with a different filter.
func rawPNG(t testing.TB, w, h, depth, ct int, fill func(row []byte, y int)) []byte {
	t.Helper()
	channels := map[int]int{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ct]
	rowLen := (w*depth*channels + 7) / 8
	var raw bytes.Buffer
	for y := range h {
		row := make([]byte, rowLen)
		fill(row, y)
		raw.WriteByte(0)
		raw.Write(row)
	}
	return pngOf(w, h, depth, ct, 0, raw.Bytes())
}

// pngOf wraps image data (rows with their filter bytes, already in pass
// order for interlace 1) in a PNG.
func pngOf(w, h, depth, ct int, interlace byte, data []byte) []byte {
	var b bytes.Buffer
	b.WriteString(pngSignature)
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9], ihdr[12] = byte(depth), byte(ct), interlace
	writeChunk(&b, "IHDR", ihdr)
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(data)
	zw.Close()
	// Two IDAT chunks, as many encoders write.
	zb := z.Bytes()
	writeChunk(&b, "IDAT", zb[:len(zb)/2])
	writeChunk(&b, "IDAT", zb[len(zb)/2:])
	writeChunk(&b, "IEND", nil)
	return b.Bytes()
}

// TestInterlacedPNG: an interlaced PNG is refused by the row decoder and
// decoded whole by decodeRaster, to the same pixels.
func TestInterlacedPNG(t *testing.T) {
	const w, h = 11, 9
	pix := func(x, y int) [3]byte { return [3]byte{byte(x * 20), byte(y * 25), byte(x*y + 3)} }
	var data bytes.Buffer
	for _, p := range []struct{ x0, y0, dx, dy int }{{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}} {
		for y := p.y0; y < h; y += p.dy {
			if p.x0 >= w {
				break
			}
			data.WriteByte(0)
			for x := p.x0; x < w; x += p.dx {
				c := pix(x, y)
				data.Write(c[:])
			}
		}
	}
	b := pngOf(w, h, 8, 2, 1, data.Bytes())
	if _, err := rowsOf(b); !errors.Is(err, errNotRows) {
		t.Fatalf("decodePNGRows = %v, want errNotRows", err)
	}
	cfg, err := decodeConfig("test", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeRaster("test", bytes.NewReader(b), int64(len(b)), cfg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make([]byte, w*h*4)
	if _, err := r.px.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	for y := range h {
		for x := range w {
			c := pix(x, y)
			if want := []byte{c[0], c[1], c[2], 0xff}; !bytes.Equal(got[(y*w+x)*4:][:4], want) {
				t.Fatalf("pixel (%d,%d) = %v, want %v", x, y, got[(y*w+x)*4:][:4], want)
			}
		}
	}
}

// TestDecodePNGRowsRefusesCorrupt: damaged files fail with an error, as
// they do in image/png.
func TestDecodePNGRowsRefusesCorrupt(t *testing.T) {
	good := SamplePNG(40, 30)
	crc := append([]byte(nil), good...)
	crc[len(pngSignature)+8+5] ^= 1 // IHDR data
	idat := bytes.Index(good, []byte("IDAT"))
	flipped := append([]byte(nil), good...)
	flipped[idat+20] ^= 0x10
	for name, b := range map[string][]byte{
		"truncated":     good[:len(good)*2/3],
		"no IEND":       good[:len(good)-12],
		"ihdr crc":      crc,
		"idat bit flip": flipped,
		"empty":         nil,
		"signature":     append([]byte("\x89PNX"), good[4:]...),
		"no data":       append(append([]byte(nil), good[:idat-4]...), good[len(good)-12:]...),
	} {
		if _, err := rowsOf(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
		if _, err := wholeOf(b); err == nil && name != "no IEND" {
			t.Errorf("%s: image/png decodes it; the case tests nothing", name)
		}
	}
}

// FuzzDecodePNGRows: on any input the row decoder fails cleanly, or gives
// the pixels image/png gives.
func FuzzDecodePNGRows(f *testing.F) {
	for _, img := range testImages() {
		var buf bytes.Buffer
		png.Encode(&buf, img)
		if buf.Len() < 4000 {
			f.Add(buf.Bytes())
		}
	}
	f.Add(SamplePNG(5, 3))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := decodeConfig("fuzz", bytes.NewReader(b))
		if err != nil || cfg.format != "png" || cfg.Width*cfg.Height > 1<<16 {
			return
		}
		got, err := rowsOf(b)
		if errors.Is(err, errNotRows) {
			return
		}
		want, werr := wholeOf(b)
		if err == nil && werr == nil && !bytes.Equal(got, want) {
			t.Fatal("pixels differ from image/png's")
		}
		if err == nil && werr != nil {
			t.Fatalf("decoded what image/png refuses: %v", werr)
		}
	})
}

// TestPNGEncoderMatchesImagePNG: the row encoder writes the bytes
// png.Encoder writes at BestSpeed, for opaque and translucent images.
func TestPNGEncoderMatchesImagePNG(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, size := range []image.Point{{1, 1}, {3, 200}, {300, 7}, {257, 131}} {
		for _, kind := range []string{"opaque", "translucent", "smooth"} {
			img := image.NewRGBA(image.Rectangle{Max: size})
			for i := 0; i < len(img.Pix); i += 4 {
				v := r.Uint32()
				switch kind {
				case "opaque":
					img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = uint8(v), uint8(v>>8), uint8(v>>16), 0xff
				case "translucent":
					a := uint8(v >> 24)
					img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = min(uint8(v), a), min(uint8(v>>8), a), min(uint8(v>>16), a), a
				case "smooth":
					p := i / 4
					img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = uint8(p), uint8(p/size.X), uint8(v&3), 0xff
				}
			}
			var want bytes.Buffer
			if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&want, img); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			e, err := newPNGEncoder(&got, size.X, size.Y, img.Opaque())
			if err != nil {
				t.Fatal(err)
			}
			for y := range size.Y {
				if err := e.writeRow(img.Pix[y*img.Stride:][:4*size.X]); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.close(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Errorf("%v %s: %d bytes, png.Encoder writes %d different ones", size, kind, got.Len(), want.Len())
			}
		}
	}
}

// TestStoredMatchesMemory: SplitStored and AssembleStored give the units
// and output that Split and Assemble give, for a built-in operation and
// a tiles split and merge, across many bands.
func TestStoredMatchesMemory(t *testing.T) {
	smallBands(t, 300)
	src := SampleImage(97, 61)
	var in bytes.Buffer
	png.Encode(&in, src)
	blur := Blur()
	params := map[string]string{"radius": "2"}
	tiles, err := Planned(Noop(), Split{Kind: SplitTiles, TileW: 16, TileH: 9, Halo: 1}, Merge{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		op     Op
		params map[string]string
		hint   Hint
	}{
		{"blur", blur, params, Hint{TileW: 20, TileH: 13}},
		{"blur-repeat", blur, params, Hint{TileW: 50, TileH: 50, Repeat: 2}},
		{"tiles-split", tiles, nil, Hint{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.op.(Streamer)
			specs, err := tc.op.Split(bytes.NewReader(in.Bytes()), int64(in.Len()), tc.params, tc.hint)
			if err != nil {
				t.Fatal(err)
			}
			data := &memScratch{b: make([]byte, 1<<20)}
			stored, n, err := st.SplitStored(bytes.NewReader(in.Bytes()), int64(in.Len()), tc.params, tc.hint, t.TempDir(), data)
			if err != nil {
				t.Fatal(err)
			}
			if len(stored) != len(specs) {
				t.Fatalf("%d stored units, %d in memory", len(stored), len(specs))
			}
			var total int64
			for i, sp := range stored {
				if !sp.Stored || sp.Off+sp.Len > n || !bytes.Equal(data.b[sp.Off:sp.Off+sp.Len], specs[i].Data) {
					t.Fatalf("unit %d: stored data differs from Split's", i)
				}
				total += sp.Len
			}
			results, err := RunUnits(t.Context(), tc.op, bytes.NewReader(in.Bytes()), specs, 2)
			if err != nil {
				t.Fatal(err)
			}
			want, err := tc.op.Assemble(tc.params, tc.hint, results)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := st.AssembleStored(tc.params, tc.hint, MemResults(results), t.TempDir(), &got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Fatal("AssembleStored output differs from Assemble's")
			}
			// And both are the image the tiles make, as image/png
			// encodes it.
			img, err := png.Decode(bytes.NewReader(want))
			if err != nil {
				t.Fatal(err)
			}
			rgba := image.NewRGBA(img.Bounds())
			draw.Draw(rgba, rgba.Rect, img, image.Point{}, draw.Src)
			var enc bytes.Buffer
			(&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&enc, rgba)
			if !bytes.Equal(enc.Bytes(), want) {
				t.Error("output is not png.Encoder's encoding of its pixels")
			}
		})
	}
}

// TestDecodePNGRowsTrailingData: data after the image's zlib stream in its
// last IDAT chunk, past what zlib reads ahead, is refused, as png.Decode
// refuses it; IDAT chunks after that one are ignored, as png.Decode
// ignores them.
func TestDecodePNGRowsTrailingData(t *testing.T) {
	var raw bytes.Buffer
	for y := range 4 {
		raw.WriteByte(0)
		raw.Write([]byte{byte(y), 1, 2, 3, 4, 5})
	}
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(raw.Bytes())
	zw.Close()
	build := func(idats ...[]byte) []byte {
		var b bytes.Buffer
		b.WriteString(pngSignature)
		ihdr := make([]byte, 13)
		binary.BigEndian.PutUint32(ihdr[0:], 2)
		binary.BigEndian.PutUint32(ihdr[4:], 4)
		ihdr[8], ihdr[9] = 8, 2
		writeChunk(&b, "IHDR", ihdr)
		for _, d := range idats {
			writeChunk(&b, "IDAT", d)
		}
		writeChunk(&b, "IEND", nil)
		return b.Bytes()
	}
	for name, tc := range map[string]struct {
		b  []byte
		ok bool
	}{
		"plain":            {build(z.Bytes()), true},
		"garbage in chunk": {build(append(append([]byte(nil), z.Bytes()...), make([]byte, 10000)...)), false},
		"a little garbage": {build(append(append([]byte(nil), z.Bytes()...), 1, 2, 3)), true}, // read ahead by zlib, as in image/png
		"trailing chunk":   {build(z.Bytes(), []byte{9, 9, 9}), true},
	} {
		_, werr := wholeOf(tc.b)
		if (werr == nil) != tc.ok {
			t.Fatalf("%s: image/png says %v; the case is wrong", name, werr)
		}
		got, err := rowsOf(tc.b)
		if (err == nil) != tc.ok {
			t.Errorf("%s: decodePNGRows = %v, want ok=%v", name, err, tc.ok)
		}
		if tc.ok {
			if want, _ := wholeOf(tc.b); !bytes.Equal(got, want) {
				t.Errorf("%s: pixels differ", name)
			}
		}
	}
}

// TestWideRowsDecodeWhole: a PNG of one row wider than maxRowBytes is
// not streamed (a band would hold that row several times over) but
// decoded whole, to the same pixels.
func TestWideRowsDecodeWhole(t *testing.T) {
	w := maxRowBytes/4 + 1
	img := image.NewNRGBA(image.Rect(0, 0, w, 1))
	for i := range img.Pix {
		img.Pix[i] = byte(i / 4096)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if _, err := rowsOf(b); !errors.Is(err, errNotRows) {
		t.Fatalf("decodePNGRows = %v, want errNotRows", err)
	}
	cfg, err := decodeConfig("test", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeRaster("test", bytes.NewReader(b), int64(len(b)), cfg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want, err := wholeOf(b)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := r.px.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("raster differs from decodeImage's pixels (%v)", err)
	}
}
