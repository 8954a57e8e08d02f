package ops

import (
	"bytes"
	"image"
	"image/color"
	"image/gif"
	"image/png"
)

// SampleImage draws a deterministic w x h test picture: colour gradients,
// discs, stripes and a checkerboard, with sharp edges and smooth areas
// alike so every filter has something to do. It is opaque.
func SampleImage(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	discs := []struct {
		cx, cy, r int // in 1/1000 of the image size
		c         color.RGBA
	}{
		{300, 350, 180, color.RGBA{230, 40, 40, 255}},
		{650, 300, 140, color.RGBA{40, 200, 60, 255}},
		{500, 700, 220, color.RGBA{40, 60, 220, 255}},
		{820, 780, 90, color.RGBA{250, 220, 30, 255}},
	}
	for y := range h {
		for x := range w {
			// Background: a diagonal gradient with a soft wave.
			fx, fy := x*255/max(w-1, 1), y*255/max(h-1, 1)
			c := color.RGBA{uint8(fx), uint8(fy), uint8(255 - (fx+fy)/2), 255}
			// Stripes on the left, a checkerboard on the right.
			if x < w/8 && (y/max(h/40, 1))%2 == 0 {
				c = color.RGBA{20, 20, 20, 255}
			}
			if x >= w*7/8 && ((x/max(w/32, 1))+(y/max(h/32, 1)))%2 == 0 {
				c = color.RGBA{240, 240, 240, 255}
			}
			for _, d := range discs {
				dx, dy := x*1000/max(w, 1)-d.cx, y*1000/max(h, 1)-d.cy
				if dx*dx+dy*dy <= d.r*d.r {
					// A ring pattern inside each disc.
					if (dx*dx+dy*dy)/(d.r*d.r/8+1)%2 == 0 {
						c = d.c
					} else {
						c = color.RGBA{d.c.R / 2, d.c.G / 2, d.c.B / 2, 255}
					}
				}
			}
			img.SetRGBA(x, y, c)
		}
	}
	return img
}

// SamplePNG returns SampleImage(w, h) encoded as PNG.
func SamplePNG(w, h int) []byte {
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&buf, SampleImage(w, h)); err != nil {
		panic(err) // encoding to memory cannot fail
	}
	return buf.Bytes()
}

// SampleGIFSize is the width and height of SampleGIF's picture.
const SampleGIFSize = 224

// SampleGIF returns a deterministic GIF of about 19 KB, like the image the
// original SCTP job-system experiments blurred many times over.
func SampleGIF() []byte {
	var buf bytes.Buffer
	img := SampleImage(SampleGIFSize, SampleGIFSize*3/4)
	if err := gif.Encode(&buf, img, &gif.Options{NumColors: 256}); err != nil {
		panic(err) // encoding to memory cannot fail
	}
	return buf.Bytes()
}
