package uml

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/syncbuf"
	"github.com/braid-hpc/braid/internal/testwait"
)

// The boot tests of this package (output, environment, working directory
// and exit status; modules on demand; a timeout killing the guest; a
// missing module) are internal/vmkernel's, which run them on each of its
// backends and skip UML's where UML does not boot on this CPU.

func TestPopulate(t *testing.T) {
	if _, err := (Config{Kernel: "/nonexistent/linux.uml"}).populate(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("missing kernel: %v, want ErrUnavailable", err)
	}
	if _, err := (Config{Kernel: "/bin/sh", Modules: t.TempDir()}).populate(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("modules without modules.dep: %v, want ErrUnavailable", err)
	}
	if Available() == nil {
		if _, err := (Config{Env: []string{"A B=1"}}).populate(); err == nil {
			t.Error("bad environment key accepted")
		}
		if _, err := Run(t.Context(), Config{}); err == nil {
			t.Error("Run without a command succeeded")
		}
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"":        "''",
		"a b":     "'a b'",
		"it's":    `'it'\''s'`,
		"$HOME;x": "'$HOME;x'",
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestFollow: what is appended to the file reaches the writer while the
// file is still being written (within a few polls), before stop; stop
// copies the rest; a file that appears only later is followed too.
func TestFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out")
	var got syncBuffer
	stop := Follow(path, &got)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	time.Sleep(2 * followEvery) // the file does not exist yet
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("BenchmarkA 1 2 ns/op\n"); err != nil {
		t.Fatal(err)
	}
	// Without streaming nothing arrives before stop.
	testwait.For(t, "the first line, before stop", 20*followEvery, func() bool {
		return got.String() == "BenchmarkA 1 2 ns/op\n"
	})
	big := strings.Repeat("x", 200<<10) + "\n" // more than one read
	if _, err := f.WriteString(big + "last"); err != nil {
		t.Fatal(err)
	}
	stop()
	stopped = true
	if want := "BenchmarkA 1 2 ns/op\n" + big + "last"; got.String() != want {
		t.Errorf("after stop: %d bytes, want %d ending in \"last\"", len(got.String()), len(want))
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer = syncbuf.Buffer
