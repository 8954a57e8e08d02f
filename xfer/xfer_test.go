//go:build unix

package xfer

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-hpc/braid/transport"
)

// pair returns a loopback session over two paths and the receiver's
// side of it.
func pair(t *testing.T) (send, recv *transport.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cfg := &transport.Config{Key: []byte("xfer-test-key-xfer-test-key"), Logger: slog.New(slog.DiscardHandler)}
	ln, err := transport.Listen(ctx, []string{"127.0.0.1:0", "127.0.0.1:0"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var paths []transport.Path
	for _, a := range ln.Addrs() {
		paths = append(paths, transport.Path{Remote: a.String()})
	}
	accepted := make(chan *transport.Session, 1)
	go func() {
		s, err := ln.Accept(ctx)
		if err != nil {
			t.Error(err)
		}
		accepted <- s
	}()
	send, err = transport.Dial(ctx, paths, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { send.Close() })
	recv = <-accepted
	if recv == nil {
		t.FailNow()
	}
	t.Cleanup(func() { recv.Close() })
	return send, recv
}

// counter is a Meter.
type counter struct{ added, grown atomic.Int64 }

func (c *counter) Add(n int64)  { c.added.Add(n) }
func (c *counter) Grow(n int64) { c.grown.Add(n) }

// Files sent at once arrive whole under their names with the sender's
// permission bits, and both sides agree on their SHA-256; a name the
// receiver refuses leaves nothing behind and fails the send with the
// reason.
func TestSendServe(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	sizes := map[string]int{"empty": 0, "small.txt": 1000, "big.bin": 9<<20 + 17} // big: three chunks
	var files []*File
	want := map[string][]byte{}
	for name, n := range sizes {
		b := make([]byte, n)
		rand.Read(b)
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, b, 0o640); err != nil {
			t.Fatal(err)
		}
		want[name] = b
		files = append(files, &File{Path: p, Name: name})
	}
	evil := &File{Path: filepath.Join(src, "small.txt"), Name: "../evil"}

	send, recv := pair(t)
	var mu sync.Mutex
	done := map[string]Result{}
	var failed []error
	var in counter
	r := &Receiver{Dir: dst,
		Done:   func(res Result) { mu.Lock(); done[res.Name] = res; mu.Unlock() },
		Failed: func(peer string, err error) { mu.Lock(); failed = append(failed, err); mu.Unlock() }}
	served := make(chan struct{})
	go func() { r.Serve(t.Context(), recv, &in); close(served) }()

	var out counter
	var wg sync.WaitGroup
	errs := make([]error, len(files))
	for i, f := range files {
		wg.Go(func() { errs[i] = Send(t.Context(), send, f, &out) })
	}
	wg.Wait()
	badErr := Send(t.Context(), send, evil, nil)
	send.Close()
	select {
	case <-served:
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after the sender closed the session")
	}

	var total int64
	for i, f := range files {
		if errs[i] != nil {
			t.Errorf("send %s: %v", f.Name, errs[i])
			continue
		}
		sum := sha256.Sum256(want[f.Name])
		if f.SHA256 != hex.EncodeToString(sum[:]) || f.Size != int64(len(want[f.Name])) {
			t.Errorf("%s: sender reports %d bytes, sha256 %s", f.Name, f.Size, f.SHA256)
		}
		got, err := os.ReadFile(filepath.Join(dst, f.Name))
		if err != nil || !bytes.Equal(got, want[f.Name]) {
			t.Errorf("%s: received %d bytes (%v), want %d", f.Name, len(got), err, len(want[f.Name]))
		}
		if fi, err := os.Stat(filepath.Join(dst, f.Name)); err == nil && fi.Mode().Perm() != 0o640&^umask() {
			t.Errorf("%s: mode %v, want %v", f.Name, fi.Mode().Perm(), 0o640&^umask())
		}
		if res := done[f.Name]; res.SHA256 != f.SHA256 || res.Size != f.Size {
			t.Errorf("%s: receiver reports %+v", f.Name, res)
		}
		total += f.Size
	}
	if out.added.Load() != total || in.added.Load() != total || in.grown.Load() != total {
		t.Errorf("meters: sender added %d, receiver added %d grew %d; want %d", out.added.Load(), in.added.Load(), in.grown.Load(), total)
	}
	if badErr == nil || !strings.Contains(badErr.Error(), "refusing file name") {
		t.Errorf("send ../evil: %v, want a refusal", badErr)
	}
	if len(failed) != 1 || !strings.Contains(failed[0].Error(), "refusing file name") {
		t.Errorf("receiver failures %v", failed)
	}
	entries, _ := os.ReadDir(dst)
	if len(entries) != len(files) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %v, want only the %d files sent", dst, names, len(files))
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dst), "evil")); err == nil {
		t.Error("../evil was written outside the directory")
	}
}

// TestExistingFile: a file whose name is taken in the directory is
// refused, telling the sender why, and the old file is left as it was;
// with Overwrite it is replaced.
func TestExistingFile(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	p := filepath.Join(src, "a.txt")
	if err := os.WriteFile(p, []byte("new bytes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := []byte("old bytes, keep me\n")
	if err := os.WriteFile(filepath.Join(dst, "a.txt"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, overwrite := range []bool{false, true} {
		send, recv := pair(t)
		r := &Receiver{Dir: dst, Overwrite: overwrite}
		served := make(chan struct{})
		go func() { r.Serve(t.Context(), recv, nil); close(served) }()
		err := Send(t.Context(), send, &File{Path: p, Name: "a.txt"}, nil)
		send.Close()
		<-served
		got, _ := os.ReadFile(filepath.Join(dst, "a.txt"))
		if !overwrite {
			if err == nil || !strings.Contains(err.Error(), "already exists") || !strings.Contains(err.Error(), "--force") {
				t.Errorf("send over an existing file: %v, want a refusal naming --force", err)
			}
			if !bytes.Equal(got, old) {
				t.Errorf("the existing file became %q", got)
			}
		} else if err != nil || string(got) != "new bytes\n" {
			t.Errorf("with Overwrite: %v, file %q", err, got)
		}
		if left, _ := filepath.Glob(filepath.Join(dst, ".braid-recv-*")); len(left) != 0 {
			t.Errorf("temporary files left: %v", left)
		}
	}
}
