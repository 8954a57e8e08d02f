package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/xfer"
)

// writeFiles creates files of the given sizes (random content) in dir and
// returns their paths.
func writeFiles(t testing.TB, dir string, sizes map[string]int) []string {
	t.Helper()
	var paths []string
	for name, n := range sizes {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o640); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

func fileSHA(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// dirNames lists dir.
func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestSendRecv(t *testing.T) {
	checkLeaks(t)
	t.Setenv("BRAID_KEY", testKey)
	src, dst := t.TempDir(), t.TempDir()
	files := writeFiles(t, src, map[string]int{"empty": 0, "small.txt": 1000, "big.bin": 20 << 20, "odd.bin": 5<<20 + 17})
	if err := os.Chmod(filepath.Join(src, "small.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	rx := start(t, "recv", "--listen", "127.0.0.1:0,127.0.0.2:0,127.0.0.3:0", "--dir", dst, "--once")
	addrs := rx.listening(t)

	args := append([]string{"send"}, files...)
	args = append(args, "--to", addrs, "--json", "--parallel", "3")
	code, out, errs := runCmd(t, 60*time.Second, args...)
	if code != 0 {
		t.Fatalf("send: exit %d: %s", code, errs)
	}
	if code := rx.wait(t, 10*time.Second); code != 0 {
		t.Errorf("recv --once: exit %d: %s", code, rx.err.String())
	}
	for _, f := range files {
		name := filepath.Base(f)
		if got, want := fileSHA(t, filepath.Join(dst, name)), fileSHA(t, f); got != want {
			t.Errorf("%s: sha256 %s, want %s", name, got, want)
		}
		if !strings.Contains(rx.out.String(), "received "+name+" ") {
			t.Errorf("recv printed no line for %s:\n%s", name, rx.out.String())
		}
	}
	if fi, err := os.Stat(filepath.Join(dst, "small.txt")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("small.txt mode %v (%v), want 0600", fi.Mode(), err)
	}
	if names := dirNames(t, dst); len(names) != len(files) {
		t.Errorf("receiver directory holds %v", names)
	}
	var rep sendReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("send --json: %v\n%s", err, out)
	}
	if rep.FilesOK != len(files) || rep.FilesFailed != 0 || rep.Bytes != 25<<20+17+1000 || rep.Paths != 3 || len(rep.PerPath) != 3 {
		t.Errorf("summary %+v", rep)
	}
	for _, p := range rep.PerPath {
		if p.Bytes <= 0 {
			t.Errorf("path %d carried nothing: %+v", p.ID, p)
		}
	}
	for _, f := range rep.Files {
		if !f.OK || f.SHA256 != fileSHA(t, f.Path) {
			t.Errorf("file %+v", f)
		}
	}
}

// rawFile sends a file by hand on a new session to addr and returns the
// receiver's verdict: a sender that does what braid send would not.
func rawFile(t testing.TB, addr string, h xfer.Header, content []byte, trailer *xfer.Trailer) (xfer.Verdict, *transport.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := transport.Dial(ctx, []transport.Path{{Remote: addr}}, &transport.Config{Key: []byte(testKey), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	st, err := sess.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.WriteJSON(ctx, st, h); err != nil {
		t.Fatal(err)
	}
	if len(content) > 0 {
		if err := st.WriteMessage(ctx, content); err != nil {
			t.Fatal(err)
		}
	}
	if trailer == nil {
		// Leave the file unfinished; the caller ends the session.
		if err := sess.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		return xfer.Verdict{}, sess
	}
	if err := ctl.WriteJSON(ctx, st, trailer); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	var v xfer.Verdict
	if err := ctl.ReadJSON(ctx, st, 10*time.Second, &v); err != nil {
		t.Fatal(err)
	}
	return v, sess
}

func TestRecvRefuses(t *testing.T) {
	checkLeaks(t)
	t.Setenv("BRAID_KEY", testKey)
	parent := t.TempDir()
	dst := filepath.Join(parent, "in")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dst, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	taken := []byte("a file already here\n")
	if err := os.WriteFile(filepath.Join(dst, "taken"), taken, 0o644); err != nil {
		t.Fatal(err)
	}
	rx := start(t, "recv", "--listen", "127.0.0.1:0", "--dir", dst)
	addr := rx.listening(t)
	content := []byte("evil content")
	sum := sha256.Sum256(content)
	good := &xfer.Trailer{SHA256: hex.EncodeToString(sum[:])}

	tests := []struct {
		name    string
		h       xfer.Header
		trailer *xfer.Trailer
		want    string
	}{
		{"dot dot slash", xfer.Header{Name: "../evil"}, good, "refusing file name"},
		{"dot dot", xfer.Header{Name: ".."}, good, "refusing file name"},
		{"absolute", xfer.Header{Name: "/tmp/evil"}, good, "refusing file name"},
		{"subdirectory", xfer.Header{Name: "a/evil"}, good, "refusing file name"},
		{"backslash", xfer.Header{Name: `..\evil`}, good, "refusing file name"},
		{"empty", xfer.Header{Name: ""}, good, "refusing file name"},
		{"checksum", xfer.Header{Name: "evil"}, &xfer.Trailer{SHA256: strings.Repeat("0", 64)}, "SHA-256 mismatch"},
		{"over directory", xfer.Header{Name: "adir"}, good, "not a regular file"},
		{"over a file", xfer.Header{Name: "taken"}, good, "taken already exists"},
		{"version", xfer.Header{Name: "evil", Version: 99}, good, "version 99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.h
			if h.Version == 0 {
				h.Version = xfer.Version
			}
			h.Size, h.Mode = int64(len(content)), 0o644
			v, _ := rawFile(t, addr, h, content, tt.trailer)
			if v.OK || !strings.Contains(v.Error, tt.want) {
				t.Errorf("verdict %+v, want an error with %q", v, tt.want)
			}
		})
	}
	if names := dirNames(t, dst); len(names) != 2 || names[0] != "adir" || names[1] != "taken" {
		t.Errorf("receiver directory holds %v, want only adir and taken", names)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "taken")); !bytes.Equal(b, taken) {
		t.Errorf("the existing file became %q: recv replaced it without --force", b)
	}
	if names := dirNames(t, parent); len(names) != 1 {
		t.Errorf("parent directory holds %v", names)
	}
	if _, err := os.Stat("/tmp/evil"); err == nil {
		t.Errorf("/tmp/evil exists")
	}

	// A sender that goes away mid-file leaves nothing behind.
	h := xfer.Header{Version: xfer.Version, Name: "partial", Size: 1 << 20, Mode: 0o644}
	_, sess := rawFile(t, addr, h, make([]byte, 300<<10), nil)
	// Both waits share one 5s budget.
	deadline := time.Now().Add(5 * time.Second)
	testwait.Until(time.Until(deadline), func() bool { return len(dirNames(t, dst)) == 3 })
	if names := dirNames(t, dst); len(names) != 3 {
		t.Fatalf("no temporary file while receiving: %v", names)
	}
	sess.Close()
	testwait.Until(time.Until(deadline), func() bool { return len(dirNames(t, dst)) == 2 })
	if names := dirNames(t, dst); len(names) != 2 {
		t.Errorf("after the sender went away the directory holds %v", names)
	}
	if !strings.Contains(rx.err.String(), "partial:") {
		t.Errorf("recv did not report the partial file:\n%s", rx.err.String())
	}
}

func TestSendFails(t *testing.T) {
	checkLeaks(t)
	t.Setenv("BRAID_KEY", testKey)
	src, dst := t.TempDir(), t.TempDir()
	files := writeFiles(t, src, map[string]int{"f": 1000})
	if err := os.Mkdir(filepath.Join(dst, "f"), 0o755); err != nil {
		t.Fatal(err)
	}
	rx := start(t, "recv", "--listen", "127.0.0.1:0,127.0.0.2:0", "--dir", dst)
	addrs := rx.listening(t)

	// A port where nobody listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	wrongKey := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(wrongKey, []byte("not-the-cluster-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		args []string
		key  string
		code int
		want string
	}{
		{"wrong key", []string{files[0], "--to", addrs, "--key-file", wrongKey}, testKey, 1, "authentication failed"},
		{"no key", []string{files[0], "--to", addrs}, "", 2, "BRAID_KEY"},
		{"closed port", []string{files[0], "--to", closed}, testKey, 1, "connection refused"},
		{"receiver refuses", []string{files[0], "--to", addrs}, testKey, 1, "not a regular file"},
		{"missing file", []string{filepath.Join(src, "nope"), "--to", addrs}, testKey, 1, "no such file"},
		{"directory", []string{src, "--to", addrs}, testKey, 1, "not a regular file"},
		{"no files", []string{"--to", addrs}, testKey, 2, "no files"},
		{"same name", []string{files[0], files[0], "--to", addrs}, testKey, 2, "same name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("BRAID_KEY", tt.key)
			begin := time.Now()
			code, _, errs := runCmd(t, 20*time.Second, append([]string{"send"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errs, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errs, tt.code, tt.want)
			}
			if d := time.Since(begin); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
	if names := dirNames(t, dst); len(names) != 1 {
		t.Errorf("receiver directory holds %v", names)
	}
}

func TestRecvUsage(t *testing.T) {
	t.Setenv("BRAID_KEY", testKey)
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"recv", "--dir", dir}, "--listen"},
		{[]string{"recv", "--listen", "127.0.0.1:0"}, "--dir is required"},
		{[]string{"recv", "--listen", "127.0.0.1:0", "--dir", filepath.Join(dir, "nope")}, "not a directory"},
		{[]string{"recv", "--listen", "127.0.0.1:0", "--dir", dir, "--lanes", "65"}, "--lanes 65"},
	} {
		if code, _, errs := runCmd(t, 5*time.Second, tt.args...); code != 2 || !strings.Contains(errs, tt.want) {
			t.Errorf("%v: exit %d, %q", tt.args, code, errs)
		}
	}
	if code, out, _ := runCmd(t, 5*time.Second, "recv", "--help"); code != 0 || !strings.Contains(out, "SHA-256") {
		t.Errorf("recv --help: exit %d: %s", code, out)
	}
}

func TestParseInterspersed(t *testing.T) {
	env := &Env{Stdout: &syncBuffer{}, Stderr: &syncBuffer{}}
	fs := newFlags(env, "x", "", "")
	to := fs.String("to", "", "")
	v := fs.BoolP("verbose", "v", false, "")
	pos, code := parseInterspersed(env, fs, []string{"a", "--to", "h", "b", "-v", "--", "-c", "--to"})
	if code >= 0 || *to != "h" || !*v || strings.Join(pos, " ") != "a b -c --to" {
		t.Errorf("pos %q to %q v %v code %d", pos, *to, *v, code)
	}
}

// recv --json prints one JSON object per event; --progress draws the
// files' bytes on stderr, which it does not when stderr is no terminal.
func TestRecvJSON(t *testing.T) {
	checkLeaks(t)
	t.Setenv("BRAID_KEY", testKey)
	src, dst := t.TempDir(), t.TempDir()
	files := writeFiles(t, src, map[string]int{"a.bin": 3 << 20, "b.txt": 100})
	rx := start(t, "recv", "--listen", "127.0.0.1:0", "--dir", dst, "-1", "-J", "--progress")
	var listening recvEvent
	if !testwait.Until(10*time.Second, func() bool {
		if line, _, ok := strings.Cut(rx.out.String(), "\n"); ok {
			if err := json.Unmarshal([]byte(line), &listening); err != nil {
				t.Fatalf("first line %q: %v", line, err)
			}
		}
		return listening.Event != ""
	}) {
		t.Fatalf("recv -J printed nothing: %s", rx.err.String())
	}
	if listening.Event != "listening" || len(listening.Addrs) != 1 || listening.Dir != dst {
		t.Fatalf("first event %+v", listening)
	}
	code, _, errs := runCmd(t, 30*time.Second, append(append([]string{"send"}, files...), "--to", listening.Addrs[0])...)
	if code != 0 {
		t.Fatalf("send: exit %d: %s", code, errs)
	}
	if errs != "" {
		t.Errorf("send drew on a stderr that is not a terminal: %q", errs)
	}
	if code := rx.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("recv -1: exit %d: %s", code, rx.err.String())
	}
	got := map[string]recvEvent{}
	for _, line := range strings.Split(strings.TrimSpace(rx.out.String()), "\n")[1:] {
		var e recvEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got[e.Name] = e
	}
	for _, f := range files {
		e := got[filepath.Base(f)]
		fi, _ := os.Stat(f)
		if e.Event != "received" || e.Size != fi.Size() || e.SHA256 != fileSHA(t, f) || e.Peer == "" {
			t.Errorf("%s: event %+v", f, e)
		}
	}
	if total := formatBytes(3<<20 + 100); !strings.Contains(rx.err.String(), total+" / "+total) {
		t.Errorf("recv --progress drew no final %s / %s:\n%s", total, total, rx.err.String())
	}
}
