package bench

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testwait"
)

// bigSide is the side of the big image: 11584 x 11584 is just under
// ops.MaxPixels, the largest image braid takes.
const bigSide = 11584

// TestBigImageRSS measures the memory a server needs for tiled jobs on
// the largest image braid takes: a braid server and a braid worker run as
// processes, three blurs of one 11584 x 11584 image are submitted at
// once, and the server's peak resident memory (VmHWM) must stay under
// 1 GiB. PNGs are decoded row by row; JPEG and GIF cannot be, so the
// server decodes them whole, one at a time, keeping the decoder's own
// form (YCbCr planes, palette indexes) and converting a band at a time.
// It needs about 4 GB of disk and several minutes a format, so it runs
// only with BRAID_BIG_IMAGE set to 1 (PNG), or to a comma-separated list
// of png, jpeg and gif:
//
//	BRAID_BIG_IMAGE=png,jpeg,gif go test -run TestBigImageRSS -v -timeout 2h ./bench
//
// BRAID_BIN=path runs that braid binary instead of building this tree.
func TestBigImageRSS(t *testing.T) {
	formats := os.Getenv("BRAID_BIG_IMAGE")
	if formats == "" {
		t.Skip("set BRAID_BIG_IMAGE=1 (or png,jpeg,gif) to run three blurs of an 11584 x 11584 image (4 GB of disk, minutes)")
	}
	if formats == "1" {
		formats = "png"
	}
	for _, format := range strings.Split(formats, ",") {
		t.Run(format, func(t *testing.T) { bigImageRSS(t, format) })
	}
}

func bigImageRSS(t *testing.T, format string) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("reads the server's peak memory from /proc")
	}
	// BRAID_BIN runs another build of braid, for comparison.
	bin := os.Getenv("BRAID_BIN")
	if bin == "" {
		bin = buildBraid(t)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
	defer cancel()
	dir := t.TempDir()
	img := filepath.Join(dir, "big."+format)
	var err error
	switch format {
	case "png":
		err = writeBigPNG(img, bigSide)
	case "jpeg":
		err = writeBigJPEG(img, bigSide)
	case "gif":
		err = writeBigGIF(img, bigSide)
	default:
		t.Fatalf("BRAID_BIG_IMAGE names format %q; want png, jpeg or gif", format)
	}
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC() // the test's own copy of the image is garbage
	debug.FreeOSMemory()
	fi, _ := os.Stat(img)

	key := "big-image-rss-test-key-0123456789"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	start := func(name string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "BRAID_KEY="+key)
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			logf.Close()
		})
		return cmd
	}
	srv := start("server", "server", "--listen", addr, "--data", filepath.Join(dir, "server"))
	url := "http://" + addr
	wrk := start("worker", "worker", "--server", url, "--threads", "2", "--name", "w1")
	c := client.New(url, client.WithKey([]byte(key)))
	if !testwait.Until(30*time.Second, func() bool {
		var h api.Health
		h, err = c.Health(ctx)
		return err == nil && h.Workers == 1
	}) {
		logTail(t, dir)
		t.Fatalf("no worker registered within 30s: %v", err)
	}
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.Put(ctx, f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	base := peakRSS(t, srv.Process.Pid)

	const jobs = 3
	began := time.Now()
	var wg sync.WaitGroup
	sts := make([]api.JobStatus, jobs)
	errs := make([]error, jobs)
	for i := range jobs {
		wg.Go(func() {
			st, err := c.Submit(ctx, api.JobRequest{Op: "blur", Input: in, Params: map[string]string{"radius": "3"},
				Tile: api.Tile{W: 1024, H: 1024}})
			if err == nil {
				st, err = c.Wait(ctx, st.Job, nil)
			}
			sts[i], errs[i] = st, err
		})
	}
	wg.Wait()
	took := time.Since(began)
	for i := range jobs {
		if errs[i] != nil || sts[i].State != api.JobDone {
			logTail(t, dir)
			t.Fatalf("job %d: %v (status %+v)", i, errs[i], sts[i])
		}
		if sts[i].Output != sts[0].Output {
			t.Errorf("job %d output %s differs from job 0's %s", i, sts[i].Output, sts[0].Output)
		}
	}
	peak := peakRSS(t, srv.Process.Pid)
	workerPeak := peakRSS(t, wrk.Process.Pid)

	t.Logf("%s input %d bytes, %d x %d; %d tiled blurs at once (1024x1024 tiles, %d units each) in %v; output blob %s",
		format, fi.Size(), bigSide, bigSide, jobs, sts[0].Units.Total, took.Round(time.Second), sts[0].Output)
	t.Logf("server peak RSS (VmHWM): %d MiB before the jobs, %d MiB after; worker peak RSS %d MiB", base>>20, peak>>20, workerPeak>>20)

	// The output is an 11584 x 11584 PNG: its header says so.
	var head bytes.Buffer
	if _, err := c.Get(ctx, sts[0].Output, &limitWriter{w: &head, n: 4096}); err != nil && head.Len() < 4096 {
		t.Fatalf("get output: %v", err)
	}
	if cfg, err := png.DecodeConfig(&head); err != nil || cfg.Width != bigSide || cfg.Height != bigSide {
		t.Errorf("output %+v, %v; want an %d x %d PNG", cfg, err, bigSide, bigSide)
	}
	if peak > 1<<30 {
		t.Errorf("server peak RSS %d MiB, want at most 1024 MiB", peak>>20)
	}
}

// peakRSS reads VmHWM of process pid, in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// limitWriter takes the first n bytes, then fails.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("have enough")
	}
	p = p[:min(len(p), l.n)]
	l.n -= len(p)
	return l.w.Write(p)
}

func logTail(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{"server", "worker"} {
		b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		t.Logf("%s log:\n%s", name, b)
	}
}

// writeBigPNG writes a side x side opaque PNG, row by row: smooth
// gradients and a checkerboard of 32-pixel squares, which compress well
// (about 400 KB, like the image of the report).
func writeBigPNG(path string, side int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	chunk := func(typ string, data []byte) {
		var hdr [8]byte
		binary.BigEndian.PutUint32(hdr[:4], uint32(len(data)))
		copy(hdr[4:], typ)
		crc := crc32.Update(crc32.Update(0, crc32.IEEETable, hdr[4:]), crc32.IEEETable, data)
		w.Write(hdr[:])
		w.Write(data)
		binary.Write(w, binary.BigEndian, crc)
	}
	w.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(side))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(side))
	ihdr[8], ihdr[9] = 8, 2
	chunk("IHDR", ihdr)
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	row := make([]byte, 1+3*side)
	flush := func() {
		for z.Len() > 0 {
			n := min(z.Len(), 1<<20)
			chunk("IDAT", z.Next(n))
		}
	}
	for y := range side {
		row[0] = 2 // up: rows repeat within a square
		if y%32 == 0 {
			row[0] = 0
		}
		for x := range side {
			v := [3]byte{byte(x * 255 / side), byte(y * 255 / side), 0}
			if (x/32+y/32)%2 == 0 {
				v[2] = 200
			}
			if row[0] == 2 {
				v = [3]byte{}
			}
			copy(row[1+3*x:], v[:])
		}
		if row[0] == 2 && y%32 != 0 && (y*255/side) != ((y-1)*255/side) {
			// The green gradient steps on this row.
			row[0] = 0
			for x := range side {
				v := [3]byte{byte(x * 255 / side), byte(y * 255 / side), 0}
				if (x/32+y/32)%2 == 0 {
					v[2] = 200
				}
				copy(row[1+3*x:], v[:])
			}
		}
		zw.Write(row)
		if z.Len() > 1<<20 {
			flush()
		}
	}
	zw.Close()
	flush()
	chunk("IEND", nil)
	return w.Flush()
}

// writeBigJPEG writes a side x side JPEG of gradients and squares, the
// content of writeBigPNG.
func writeBigJPEG(path string, side int) error {
	img := image.NewYCbCr(image.Rect(0, 0, side, side), image.YCbCrSubsampleRatio420)
	for y := range side {
		for x := range side {
			b := uint8(0)
			if (x/32+y/32)%2 == 0 {
				b = 200
			}
			yy, cb, cr := color.RGBToYCbCr(uint8(x*255/side), uint8(y*255/side), b)
			img.Y[img.YOffset(x, y)] = yy
			if x%2 == 0 && y%2 == 0 {
				i := img.COffset(x, y)
				img.Cb[i], img.Cr[i] = cb, cr
			}
		}
	}
	return writeImage(path, func(w io.Writer) error { return jpeg.Encode(w, img, &jpeg.Options{Quality: 85}) })
}

// writeBigGIF writes a side x side GIF of 256 colours in bands and squares.
func writeBigGIF(path string, side int) error {
	pal := make(color.Palette, 256)
	for i := range pal {
		pal[i] = color.RGBA{uint8(i), uint8(255 - i), uint8(i * 7), 255}
	}
	img := image.NewPaletted(image.Rect(0, 0, side, side), pal)
	for y := range side {
		row := img.Pix[y*img.Stride : y*img.Stride+side]
		for x := range row {
			v := uint8(y * 128 / side)
			if (x/32+y/32)%2 == 0 {
				v += 128
			}
			row[x] = v
		}
	}
	return writeImage(path, func(w io.Writer) error { return gif.Encode(w, img, &gif.Options{NumColors: 256}) })
}

func writeImage(path string, encode func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := encode(w); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
