package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/ops"
)

// TestNoSilentOverwrite: get -o, sample -o, op run -o and local -o leave
// an existing file alone, say so and how to replace it, and replace it
// with --force; local replaces its own default output from run to run.
func TestNoSilentOverwrite(t *testing.T) {
	dir := t.TempDir()
	mine := []byte("the user's own file\n")
	keep := func(name string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, mine, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kept := func(p string) {
		t.Helper()
		if got, _ := os.ReadFile(p); !bytes.Equal(got, mine) {
			t.Errorf("%s was replaced", p)
		}
	}
	refused := func(cmd, p string, args ...string) {
		t.Helper()
		code, _, stderr := runBraid(t, 60*time.Second, args...)
		want := p + " exists; nothing was replaced (braid " + cmd + " --force replaces it)"
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("braid %s over an existing file: exit %d, stderr %q; want exit 1 and %q", strings.Join(args, " "), code, stderr, want)
		}
		kept(p)
	}

	png := keep("sample.png")
	refused("sample", png, "sample", "--size", "16", "-o", png)
	if code, _, stderr := runBraid(t, 10*time.Second, "sample", "--size", "16", "-o", png, "--force"); code != 0 {
		t.Fatalf("sample --force: exit %d: %s", code, stderr)
	}
	if got, _ := os.ReadFile(png); !bytes.Equal(got, ops.SamplePNG(16, 16)) {
		t.Error("sample --force did not replace the file")
	}

	t.Setenv("BRAID_KEY", "")
	out := keep("local.png")
	refused("local", out, "local", "--size", "64", "--tile", "32x32", "-o", out)

	// The default output is local's own: a second run replaces it.
	t.Chdir(dir)
	for i := range 2 {
		if code, _, stderr := runBraid(t, 60*time.Second, "local", "--size", "64", "--tile", "32x32"); code != 0 {
			t.Fatalf("local, run %d: exit %d: %s", i+1, code, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "braid-local-out.png")); err != nil {
		t.Error(err)
	}

	t.Setenv("BRAID_KEY", "overwrite-test-key-0123456789")
	srv := startBraid(t, "server", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--heartbeat", "100ms")
	t.Setenv("BRAID_SERVER", srv.waitOutput(t, regexp.MustCompile(`listening on (https?://\S+)`)))
	var id string
	if !testwait.Until(10*time.Second, func() bool {
		code, o, _ := runBraid(t, 10*time.Second, "put", png)
		id = strings.TrimSpace(o)
		return code == 0
	}) {
		t.Fatal("put did not succeed within 10s")
	}
	got := keep("got.png")
	refused("get", got, "get", id, "-o", got)
	if code, _, stderr := runBraid(t, 10*time.Second, "get", id, "-o", got, "--force"); code != 0 {
		t.Fatalf("get --force: exit %d: %s", code, stderr)
	}
	if b, _ := os.ReadFile(got); !bytes.Equal(b, ops.SamplePNG(16, 16)) {
		t.Error("get --force did not replace the file")
	}
	// A dataset's member files likewise.
	ds := filepath.Join(dir, "ds")
	if err := os.MkdirAll(ds, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ds, "a.txt"), []byte("a\n"), 0o644)
	code, o, stderr := runBraid(t, 10*time.Second, "put", ds)
	if code != 0 {
		t.Fatalf("put %s: exit %d: %s", ds, code, stderr)
	}
	dsID := strings.TrimSpace(o)
	into := filepath.Join(dir, "into")
	os.MkdirAll(into, 0o755)
	member := filepath.Join(into, "a.txt")
	if err := os.WriteFile(member, mine, 0o644); err != nil {
		t.Fatal(err)
	}
	refused("get", member, "get", dsID, "-o", into)
}

// TestOutputIntoDevice: -o naming a device or a named pipe (-o /dev/null)
// writes into it, as the shell's > would, and never replaces it with a
// file: renaming over /dev/null made it a regular file when run as root.
// A named pipe stands in for the device here.
func TestOutputIntoDevice(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(fifo) // opens when the writer does; EOF when it closes
		got <- b
	}()
	if code, _, stderr := runBraid(t, 30*time.Second, "sample", "--size", "16", "-o", fifo); code != 0 {
		t.Fatalf("sample -o %s: exit %d: %s", fifo, code, stderr)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, ops.SamplePNG(16, 16)) {
			t.Errorf("the pipe's reader got %d bytes, want the 16x16 sample", len(b))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing came out of the pipe within 10s")
	}
	fi, err := os.Lstat(fifo)
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("%s is no longer a named pipe: %v, %v", fifo, fi.Mode(), err)
	}
}
