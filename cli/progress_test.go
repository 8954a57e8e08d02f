package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/braid-hpc/braid/internal/testenv"
)

// slowRelay relays TCP connections to addr on loopback, moving about
// chunk bytes each way per tick, so that a transfer takes long enough
// for a progress bar to be redrawn.
func slowRelay(t *testing.T, addr string, chunk int, tick time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	pace := func(dst, src net.Conn) {
		buf := make([]byte, chunk)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
				time.Sleep(tick * time.Duration(n) / time.Duration(chunk))
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Go(func() { pace(s, c) })
			wg.Go(func() { pace(c, s) })
		}
	})
	return ln.Addr().String()
}

// onTerminal runs braid with args in this process with its standard
// error on a pseudo-terminal, as a user at a terminal runs it, and returns
// the exit code, standard output and what the terminal showed.
func onTerminal(t *testing.T, d time.Duration, args ...string) (int, string, string) {
	t.Helper()
	ptm, tty, err := pty.Open()
	if err != nil {
		testenv.Missing(t, testenv.PTY, fmt.Sprintf("no pseudo-terminal on this system: %v", err))
	}
	defer ptm.Close()
	if err := pty.Setsize(ptm, &pty.Winsize{Rows: 24, Cols: 160}); err != nil {
		t.Fatal(err)
	}
	shown := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		io.Copy(&b, ptm) // until the terminal is closed (EIO)
		shown <- b.Bytes()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out syncBuffer
	code := Run(ctx, args, &out, tty)
	if ctx.Err() != nil {
		t.Fatalf("braid %s: still running after %v", strings.Join(args, " "), d)
	}
	tty.Close()
	select {
	case b := <-shown:
		return code, out.String(), string(b)
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal's output did not end within 10s of the command")
		return 0, "", ""
	}
}

// barFrame is one drawing of the progress bar.
type barFrame struct {
	done, total string
	pct         int
	rate        float64
	rest        string
}

// frameRE reads a drawing of the bar: bytes done / total, percent, rate,
// and what follows (per-path rates, ETA or the elapsed time).
var frameRE = regexp.MustCompile(`^\s*(\d+(?:\.\d)? [KMGT]?i?B)(?: / (\d+(?:\.\d)? [KMGT]?i?B)\s+(\d+)%)?\s+(\d+\.\d) MB/s(.*)$`)

// frames splits what a terminal showed into the bar's drawings: each
// starts with a carriage return and ends with an erase to the end of the
// line.
func frames(t *testing.T, shown string) []barFrame {
	t.Helper()
	var out []barFrame
	for _, f := range strings.Split(shown, "\r") {
		f = strings.TrimRight(f, "\n")
		body, ok := strings.CutSuffix(f, "\033[K")
		if !ok {
			if strings.TrimSpace(f) != "" && strings.Contains(f, "MB/s") {
				t.Errorf("a drawing of the bar does not erase the rest of the line: %q", f)
			}
			continue
		}
		m := frameRE.FindStringSubmatch(body)
		if m == nil {
			t.Errorf("a drawing of the bar does not read as bytes, percent and rate: %q", body)
			continue
		}
		fr := barFrame{done: m[1], total: m[2], pct: -1, rest: m[5]}
		if m[3] != "" {
			fr.pct, _ = strconv.Atoi(m[3])
		}
		fr.rate, _ = strconv.ParseFloat(m[4], 64)
		out = append(out, fr)
	}
	return out
}

// TestProgressTerminal runs put and get with standard error on a
// pseudo-terminal against a server that takes about a second to move
// the blob: the bar shows the bytes, the percent (put knows the file's
// size, get the blob's from the server) and the rate, is redrawn in place as the transfer goes, and ends with
// the whole size, 100% and the time it took, on a line of its own. With
// standard error on a pipe instead, nothing of it is printed.
func TestProgressTerminal(t *testing.T) {
	t.Setenv("BRAID_KEY", "progress-test-key-0123456789")
	blob := make([]byte, 12<<20)
	rand.NewChaCha8([32]byte{1}).Read(blob)
	sum := sha256.Sum256(blob)
	id := hex.EncodeToString(sum[:])
	dir := t.TempDir()
	srv := startBraid(t, "server", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"))
	u, err := url.Parse(srv.waitOutput(t, regexp.MustCompile(`listening on (https?://\S+)`)))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = slowRelay(t, u.Host, 256<<10, 25*time.Millisecond) // 10 MiB/s
	server := u.String()
	file := filepath.Join(dir, "blob")
	if err := os.WriteFile(file, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	size := formatBytes(int64(len(blob)))

	check := func(t *testing.T, shown string, percent bool) {
		t.Helper()
		fs := frames(t, shown)
		if len(fs) < 3 {
			t.Fatalf("the bar was drawn %d times, want it redrawn as the transfer went; the terminal showed %q", len(fs), shown)
		}
		last := fs[len(fs)-1]
		t.Logf("%d drawings; the last: %+v", len(fs), last)
		if last.done != size || !strings.Contains(last.rest, " in 0:0") || last.rate <= 0 {
			t.Errorf("the last drawing is %+v, want %s done at a rate, and the time it took", last, size)
		}
		if !strings.HasSuffix(shown, "\033[K\r\n") {
			t.Errorf("the bar's last line is not ended: %q", shown[max(0, len(shown)-40):])
		}
		midway := 0
		for i, f := range fs {
			if percent {
				if f.total != size || f.pct < 0 || f.pct > 100 {
					t.Errorf("drawing %d: %+v, want a percent of %s", i, f, size)
				}
				if i > 0 && f.pct < fs[i-1].pct {
					t.Errorf("drawing %d went back from %d%% to %d%%", i, fs[i-1].pct, f.pct)
				}
			}
			if f.done != size && f.done != "0 B" {
				midway++
			}
		}
		if percent && last.pct != 100 {
			t.Errorf("the last drawing is at %d%%, want 100%%", last.pct)
		}
		if midway == 0 {
			t.Errorf("no drawing showed the transfer under way: %+v", fs)
		}
		if strings.Count(shown, "\n") != 1 {
			t.Errorf("the bar took %d lines, want it redrawn on one: %q", strings.Count(shown, "\n"), shown)
		}
	}

	t.Run("put", func(t *testing.T) {
		code, out, shown := onTerminal(t, time.Minute, "put", file, "--server", server)
		if code != 0 || strings.TrimSpace(out) != id {
			t.Fatalf("put: exit %d, stdout %q, terminal %q", code, out, shown)
		}
		check(t, shown, true)
	})
	t.Run("get", func(t *testing.T) {
		copyTo := filepath.Join(dir, "copy")
		code, out, shown := onTerminal(t, time.Minute, "get", id, "-o", copyTo, "--server", server)
		if code != 0 || out != "" {
			t.Fatalf("get: exit %d, stdout %q, terminal %q", code, out, shown)
		}
		// After the bar, get says what it wrote.
		bar, said, _ := strings.Cut(shown, "\r\nbraid: wrote ")
		if !strings.HasPrefix(said, copyTo) {
			t.Errorf("get did not say it wrote %s after the bar: %q", copyTo, shown)
		}
		check(t, bar+"\r\n", true) // the server sends the size: a percent too
		if got, err := os.ReadFile(copyTo); err != nil || !bytes.Equal(got, blob) {
			t.Errorf("the copy differs from the blob (%v)", err)
		}
	})
	t.Run("no terminal", func(t *testing.T) {
		for _, args := range [][]string{{"put", file}, {"get", id, "-o", filepath.Join(dir, "copy2")}} {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			read := make(chan []byte, 1)
			go func() {
				b, _ := io.ReadAll(r)
				read <- b
			}()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			var out syncBuffer
			code := Run(ctx, append(args, "--server", server), &out, w)
			cancel()
			w.Close()
			stderr := string(<-read)
			r.Close()
			if code != 0 {
				t.Fatalf("%s: exit %d: %s", args[0], code, stderr)
			}
			if strings.Contains(stderr, "MB/s") || strings.Contains(stderr, "%") || strings.Contains(stderr, "\r") {
				t.Errorf("%s drew progress on a pipe: %q", args[0], stderr)
			}
			if args[0] == "put" && stderr != "" {
				t.Errorf("put wrote on a stderr that is not a terminal: %q", stderr)
			}
		}
	})
}
