package ops

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"testing"
)

// TestWriteRGBA: converting band by band gives the bytes a whole-image
// conversion gives, for each form a decoder returns, with bands that do
// not divide the height and bounds that do not start at (0, 0).
func TestWriteRGBA(t *testing.T) {
	r := image.Rect(3, 5, 3+700, 5+1601) // 1 MiB / (4*700) = 374 rows a band: 5 bands, the last short
	fill := func(set func(x, y int, c color.Color)) {
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				set(x, y, color.NRGBA{uint8(x * 7), uint8(y * 3), uint8(x ^ y), uint8(128 + x%128)})
			}
		}
	}
	ycc := image.NewYCbCr(r, image.YCbCrSubsampleRatio420)
	for i := range ycc.Y {
		ycc.Y[i] = uint8(i * 13)
	}
	for i := range ycc.Cb {
		ycc.Cb[i], ycc.Cr[i] = uint8(i*5), uint8(i*11)
	}
	pal := image.NewPaletted(r, color.Palette{color.Black, color.White, color.RGBA{200, 10, 10, 255}, color.NRGBA{0, 0, 255, 100}})
	nrgba := image.NewNRGBA(r)
	gray := image.NewGray(r)
	rgba := image.NewRGBA(r)
	fill(pal.Set)
	fill(nrgba.Set)
	fill(gray.Set)
	fill(rgba.Set)
	for name, img := range map[string]image.Image{"ycbcr": ycc, "paletted": pal, "nrgba": nrgba, "gray": gray, "rgba": rgba} {
		want := image.NewRGBA(image.Rect(0, 0, r.Dx(), r.Dy()))
		draw.Draw(want, want.Rect, img, r.Min, draw.Src)
		var got bytes.Buffer
		if err := writeRGBA(&got, img); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got.Bytes(), want.Pix) {
			t.Errorf("%s: %d bytes written differ from the whole-image conversion (%d bytes)", name, got.Len(), len(want.Pix))
		}
	}
}
