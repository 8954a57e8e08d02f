package ops

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/draw"
	"image/png"
	"io"
)

// This file reads and writes PNG images a band of rows at a time, so an
// image of MaxPixels needs megabytes, not gigabytes. The pixels it gives
// and the bytes it writes are those of image/png: the decoder hands each
// band of rows, unfiltered, to png.Decode as a small PNG of its own, and
// the encoder is image/png's encoder for an *image.RGBA at BestSpeed,
// row by row.

const pngSignature = "\x89PNG\r\n\x1a\n"

// bandBytes is about the size of the RGBA rows the decoder converts at
// once.
var bandBytes = 4 << 20

// errNotRows says a PNG is not decoded row by row: it is interlaced (its
// rows arrive in seven passes), or its rows are wider than maxRowBytes.
var errNotRows = errors.New("interlaced PNG, or rows too wide to stream")

// maxRowBytes bounds the encoded rows decodePNGRows takes: a band holds
// at least one row in several forms, so an image of one very long row
// (which MaxPixels allows) is cheaper decoded whole, as before.
const maxRowBytes = 16 << 20

// pngHeader is what decodePNGRows needs of the IHDR chunk.
type pngHeader struct {
	w, h              int
	depth, colorType  int
	interlace         byte
	bitsPerPixel, bpp int // bpp: whole bytes per pixel for the filters, at least 1
}

// chunkReader reads a PNG's chunks, checking their CRCs.
type chunkReader struct {
	r   *bufio.Reader
	crc uint32
	// left is what remains unread of the current chunk's data.
	left uint32
	typ  string
}

// next reads the header of the next chunk, after checking the CRC of the
// current one (whose data must all be read).
func (c *chunkReader) next() error {
	var hdr [8]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return unexpected(err)
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n > 0x7fffffff {
		return errors.New("png: invalid format: chunk length too large")
	}
	c.left, c.typ = n, string(hdr[4:])
	c.crc = crc32.Update(0, crc32.IEEETable, hdr[4:])
	return nil
}

// Read reads the current chunk's data.
func (c *chunkReader) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	p = p[:min(uint32(len(p)), c.left)]
	n, err := c.r.Read(p)
	c.crc = crc32.Update(c.crc, crc32.IEEETable, p[:n])
	c.left -= uint32(n)
	if err == io.EOF && c.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// end reads the rest of the current chunk and checks its CRC.
func (c *chunkReader) end() error {
	if _, err := io.Copy(io.Discard, c); err != nil {
		return unexpected(err)
	}
	var sum [4]byte
	if _, err := io.ReadFull(c.r, sum[:]); err != nil {
		return unexpected(err)
	}
	if binary.BigEndian.Uint32(sum[:]) != c.crc {
		return errors.New("png: invalid format: invalid checksum")
	}
	return nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// idatReader reads the data of consecutive IDAT chunks as one stream.
type idatReader struct {
	c    *chunkReader
	done bool // the chunk after the last IDAT is current
}

func (d *idatReader) Read(p []byte) (int, error) {
	for {
		if d.done {
			return 0, io.EOF
		}
		if d.c.left > 0 {
			return d.c.Read(p)
		}
		if err := d.c.end(); err != nil {
			return 0, err
		}
		if err := d.c.next(); err != nil {
			return 0, err
		}
		d.done = d.c.typ != "IDAT"
	}
}

// decodePNGRows decodes a non-interlaced PNG read from r a band of rows at
// a time, converting each to premultiplied RGBA as decodeImage does, and
// calls emit with the band: 4*w bytes a row, top to bottom. It returns
// errNotRows, before calling emit, for an interlaced PNG or one with rows
// of more than maxRowBytes; other
// errors say the PNG is corrupt or could not be read, or come from emit.
func decodePNGRows(r io.Reader, emit func(rows []byte) error) error {
	c := &chunkReader{r: bufio.NewReaderSize(r, 64<<10)}
	var sig [len(pngSignature)]byte
	if _, err := io.ReadFull(c.r, sig[:]); err != nil || string(sig[:]) != pngSignature {
		return errors.New("png: invalid format: not a PNG file")
	}
	var hd pngHeader
	var ihdr []byte
	var aux bytes.Buffer // PLTE and tRNS, as they were
	for {
		if err := c.next(); err != nil {
			return err
		}
		if ihdr == nil && c.typ != "IHDR" {
			return errors.New("png: invalid format: chunk out of order")
		}
		switch c.typ {
		case "IHDR":
			if ihdr != nil || c.left != 13 {
				return errors.New("png: invalid format: bad IHDR")
			}
			ihdr = make([]byte, 13)
			if _, err := io.ReadFull(c, ihdr); err != nil {
				return unexpected(err)
			}
			var err error
			if hd, err = parseIHDR(ihdr); err != nil {
				return err
			}
			if hd.interlace != 0 || (hd.bitsPerPixel*hd.w+7)/8 > maxRowBytes {
				return errNotRows
			}
		case "PLTE", "tRNS":
			if c.left > 3*256 {
				return fmt.Errorf("png: invalid format: bad %s length", c.typ)
			}
			b := make([]byte, c.left)
			if _, err := io.ReadFull(c, b); err != nil {
				return unexpected(err)
			}
			writeChunk(&aux, c.typ, b)
		case "IDAT":
			if err := decodeIDAT(c, hd, ihdr, aux.Bytes(), emit); err != nil {
				return err
			}
			return readToIEND(c)
		case "IEND":
			return errors.New("png: invalid format: no image data")
		}
		if err := c.end(); err != nil {
			return err
		}
	}
}

// readToIEND reads the chunks after the image data, as png.Decode does,
// up to IEND.
func readToIEND(c *chunkReader) error {
	for c.typ != "IEND" {
		if c.typ == "IDAT" {
			return errors.New("png: invalid format: chunk out of order")
		}
		if err := c.end(); err != nil {
			return err
		}
		if err := c.next(); err != nil {
			return err
		}
	}
	return c.end()
}

func parseIHDR(b []byte) (pngHeader, error) {
	w, h := binary.BigEndian.Uint32(b[0:]), binary.BigEndian.Uint32(b[4:])
	if w == 0 || h == 0 || w > MaxPixels || h > MaxPixels || uint64(w)*uint64(h) > MaxPixels {
		return pngHeader{}, fmt.Errorf("png: %dx%d pixels: want at least 1x1 and at most %d pixels", w, h, MaxPixels)
	}
	hd := pngHeader{w: int(w), h: int(h), depth: int(b[8]), colorType: int(b[9]), interlace: b[12]}
	channels := map[int]int{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[hd.colorType]
	if channels == 0 || b[10] != 0 || b[11] != 0 || b[12] > 1 {
		return pngHeader{}, errors.New("png: invalid format: bad IHDR")
	}
	switch hd.depth {
	case 1, 2, 4, 8, 16:
	default:
		return pngHeader{}, errors.New("png: invalid format: bad bit depth")
	}
	hd.bitsPerPixel = hd.depth * channels
	hd.bpp = (hd.bitsPerPixel + 7) / 8
	return hd, nil
}

// decodeIDAT inflates and unfilters the rows and converts them band by
// band: each band goes to png.Decode as a PNG of its own with the same
// header (but its height), palette and transparency, and rows filtered
// with ftNone.
func decodeIDAT(c *chunkReader, hd pngHeader, ihdr, aux []byte, emit func([]byte) error) error {
	ir := &idatReader{c: c}
	zr, err := zlib.NewReader(ir)
	if err != nil {
		return fmt.Errorf("png: invalid format: %v", unexpected(err))
	}
	rowSize := 1 + (hd.bitsPerPixel*hd.w+7)/8
	cr, pr := make([]byte, rowSize), make([]byte, rowSize)
	per := max(1, bandBytes/(4*hd.w))
	band := make([]byte, 0, min(per, hd.h)*rowSize)
	var small bytes.Buffer
	rgba := image.NewRGBA(image.Rect(0, 0, hd.w, min(per, hd.h)))
	for y := 0; y < hd.h; {
		rows := min(per, hd.h-y)
		band = band[:0]
		for range rows {
			if _, err := io.ReadFull(zr, cr); err != nil {
				if err == io.EOF || err == io.ErrUnexpectedEOF {
					return errors.New("png: invalid format: not enough pixel data")
				}
				return fmt.Errorf("png: invalid format: %v", err)
			}
			if err := unfilter(cr, pr, hd.bpp); err != nil {
				return err
			}
			band = append(band, 0)
			band = append(band, cr[1:]...)
			cr, pr = pr, cr
		}
		img, err := decodeBand(&small, ihdr, aux, rows, band)
		if err != nil {
			return err
		}
		dst := rgba
		if rows < rgba.Rect.Dy() {
			dst = rgba.SubImage(image.Rect(0, 0, hd.w, rows)).(*image.RGBA)
		}
		if src, ok := img.(*image.RGBA); ok {
			copy(dst.Pix, src.Pix)
		} else {
			draw.Draw(dst, dst.Rect, img, image.Point{}, draw.Src)
		}
		if err := emit(dst.Pix[:rows*4*hd.w]); err != nil {
			return err
		}
		y += rows
	}
	// As png.Decode: the zlib stream must end with the pixels, and its
	// checksum hold.
	var one [1]byte
	n, err := 0, error(nil)
	for i := 0; n == 0 && err == nil; i++ {
		if i == 100 {
			return io.ErrNoProgress
		}
		n, err = zr.Read(one[:])
	}
	if err != nil && err != io.EOF {
		return fmt.Errorf("png: invalid format: %v", err)
	}
	if n != 0 || (!ir.done && c.left != 0) {
		return errors.New("png: invalid format: too much pixel data")
	}
	// Skip the IDAT chunks after the image data, as png.Decode does.
	if _, err := io.Copy(io.Discard, ir); err != nil {
		return err
	}
	return nil
}

// decodeBand decodes rows unfiltered rows (each with its ftNone byte) as
// a PNG with the header ihdr, but rows high, and the chunks aux.
func decodeBand(buf *bytes.Buffer, ihdr, aux []byte, rows int, band []byte) (image.Image, error) {
	buf.Reset()
	buf.WriteString(pngSignature)
	h := append([]byte(nil), ihdr...)
	binary.BigEndian.PutUint32(h[4:], uint32(rows))
	writeChunk(buf, "IHDR", h)
	buf.Write(aux)
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.NoCompression)
	zw.Write(band)
	zw.Close()
	writeChunk(buf, "IDAT", z.Bytes())
	writeChunk(buf, "IEND", nil)
	img, err := png.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		return nil, err
	}
	return img, nil
}

// unfilter undoes the PNG filter of row cr (its type at cr[0]), given
// the previous row pr, as image/png does.
func unfilter(cr, pr []byte, bpp int) error {
	cdat, pdat := cr[1:], pr[1:]
	switch cr[0] {
	case 0:
	case 1: // sub
		for i := bpp; i < len(cdat); i++ {
			cdat[i] += cdat[i-bpp]
		}
	case 2: // up
		for i, p := range pdat {
			cdat[i] += p
		}
	case 3: // average
		for i := 0; i < bpp && i < len(cdat); i++ {
			cdat[i] += pdat[i] / 2
		}
		for i := bpp; i < len(cdat); i++ {
			cdat[i] += uint8((int(cdat[i-bpp]) + int(pdat[i])) / 2)
		}
	case 4: // Paeth
		for i := range cdat {
			var a, c uint8
			if i >= bpp {
				a, c = cdat[i-bpp], pdat[i-bpp]
			}
			cdat[i] += paeth(a, pdat[i], c)
		}
	default:
		return errors.New("png: invalid format: bad filter type")
	}
	return nil
}

// paeth is the Paeth predictor of a (left), b (above) and c (above left).
func paeth(a, b, c uint8) uint8 {
	pc := int(c)
	pa := int(b) - pc
	pb := int(a) - pc
	pc = abs(pa + pb)
	pa = abs(pa)
	pb = abs(pb)
	if pa <= pb && pa <= pc {
		return a
	} else if pb <= pc {
		return b
	}
	return c
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// writeChunk appends a PNG chunk to w.
func writeChunk(w io.Writer, typ string, data []byte) error {
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(data)))
	copy(hdr[4:], typ)
	crc := crc32.Update(0, crc32.IEEETable, hdr[4:])
	crc = crc32.Update(crc, crc32.IEEETable, data)
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc)
	for _, b := range [][]byte{hdr[:], data, sum[:]} {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// pngEncoder writes an RGBA image as PNG row by row, byte for byte as
// png.Encoder{CompressionLevel: png.BestSpeed} encodes an *image.RGBA:
// truecolor if every pixel is opaque, else truecolor with alpha (not
// premultiplied); each row with the filter that minimizes the sum of
// absolute differences; IDAT chunks of 32 KiB.
type pngEncoder struct {
	w      io.Writer
	bw     *bufio.Writer // feeds idatWriter
	zw     *zlib.Writer
	opaque bool
	bpp    int
	cr     [5][]byte
	pr     []byte
	err    error
}

// idatWriter writes each Write as an IDAT chunk.
type idatWriter struct{ w io.Writer }

func (d idatWriter) Write(p []byte) (int, error) {
	if err := writeChunk(d.w, "IDAT", p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// newPNGEncoder writes the signature and header of a w x h image;
// opaque says every pixel's alpha is 255.
func newPNGEncoder(out io.Writer, w, h int, opaque bool) (*pngEncoder, error) {
	e := &pngEncoder{w: out, opaque: opaque, bpp: 4}
	ct := byte(6)
	if opaque {
		ct, e.bpp = 2, 3
	}
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 8, ct
	if _, err := io.WriteString(out, pngSignature); err != nil {
		return nil, err
	}
	if err := writeChunk(out, "IHDR", ihdr[:]); err != nil {
		return nil, err
	}
	e.bw = bufio.NewWriterSize(idatWriter{out}, 1<<15)
	zw, err := zlib.NewWriterLevel(e.bw, zlib.BestSpeed)
	if err != nil {
		return nil, err
	}
	e.zw = zw
	sz := 1 + e.bpp*w
	for i := range e.cr {
		e.cr[i] = make([]byte, sz)
		e.cr[i][0] = byte(i)
	}
	e.pr = make([]byte, sz)
	return e, nil
}

// writeRow encodes one row of premultiplied RGBA pixels.
func (e *pngEncoder) writeRow(src []byte) error {
	if e.err != nil {
		return e.err
	}
	dst := e.cr[0][1:]
	if e.opaque {
		for ; len(src) >= 4; dst, src = dst[3:], src[4:] {
			dst[0], dst[1], dst[2] = src[0], src[1], src[2]
		}
	} else {
		for ; len(src) >= 4; dst, src = dst[4:], src[4:] {
			d, s := (*[4]byte)(dst), (*[4]byte)(src)
			switch s[3] {
			case 0:
				*d = [4]byte{}
			case 0xff:
				*d = *s
			default:
				const m = 0x101 * 0xffff
				a := uint32(s[3]) * 0x101
				d[0] = uint8((uint32(s[0]) * m / a) >> 8)
				d[1] = uint8((uint32(s[1]) * m / a) >> 8)
				d[2] = uint8((uint32(s[2]) * m / a) >> 8)
				d[3] = s[3]
			}
		}
	}
	f := pngFilter(&e.cr, e.pr, e.bpp)
	if _, err := e.zw.Write(e.cr[f]); err != nil {
		e.err = err
		return err
	}
	e.pr, e.cr[0] = e.cr[0], e.pr
	return nil
}

// close ends the image data and writes IEND.
func (e *pngEncoder) close() error {
	if e.err != nil {
		return e.err
	}
	if err := e.zw.Close(); err != nil {
		return err
	}
	if err := e.bw.Flush(); err != nil {
		return err
	}
	return writeChunk(e.w, "IEND", nil)
}

func abs8(d uint8) int {
	if d < 128 {
		return int(d)
	}
	return 256 - int(d)
}

// pngFilter is image/png's choice of filter: it fills cr[1:] with the
// filtered rows and returns the type whose bytes have the least sum of
// absolute values, trying up, Paeth, none, sub and average in turn.
func pngFilter(cr *[5][]byte, pr []byte, bpp int) int {
	cdat0, cdat1, cdat2, cdat3, cdat4 := cr[0][1:], cr[1][1:], cr[2][1:], cr[3][1:], cr[4][1:]
	pdat := pr[1:]
	n := len(cdat0)

	sum := 0
	for i := 0; i < n; i++ {
		cdat2[i] = cdat0[i] - pdat[i]
		sum += abs8(cdat2[i])
	}
	best := sum
	filter := 2

	sum = 0
	for i := 0; i < bpp; i++ {
		cdat4[i] = cdat0[i] - pdat[i]
		sum += abs8(cdat4[i])
	}
	for i := bpp; i < n; i++ {
		cdat4[i] = cdat0[i] - paeth(cdat0[i-bpp], pdat[i], pdat[i-bpp])
		sum += abs8(cdat4[i])
		if sum >= best {
			break
		}
	}
	if sum < best {
		best = sum
		filter = 4
	}

	sum = 0
	for i := 0; i < n; i++ {
		sum += abs8(cdat0[i])
		if sum >= best {
			break
		}
	}
	if sum < best {
		best = sum
		filter = 0
	}

	sum = 0
	for i := 0; i < bpp; i++ {
		cdat1[i] = cdat0[i]
		sum += abs8(cdat1[i])
	}
	for i := bpp; i < n; i++ {
		cdat1[i] = cdat0[i] - cdat0[i-bpp]
		sum += abs8(cdat1[i])
		if sum >= best {
			break
		}
	}
	if sum < best {
		best = sum
		filter = 1
	}

	sum = 0
	for i := 0; i < bpp; i++ {
		cdat3[i] = cdat0[i] - pdat[i]/2
		sum += abs8(cdat3[i])
	}
	for i := bpp; i < n; i++ {
		cdat3[i] = cdat0[i] - uint8((int(cdat0[i-bpp])+int(pdat[i]))/2)
		sum += abs8(cdat3[i])
		if sum >= best {
			break
		}
	}
	if sum < best {
		filter = 3
	}
	return filter
}
