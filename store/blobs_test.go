package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func newDisk(t testing.TB) (*Disk, string) {
	t.Helper()
	dir := t.TempDir()
	d, err := OpenDisk(dir, &DiskConfig{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	return d, dir
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestDiskPutOpenStatListDelete(t *testing.T) {
	ctx := t.Context()
	d, _ := newDisk(t)
	blobs := [][]byte{[]byte("hello"), {}, bytes.Repeat([]byte("x"), 3<<20)}
	for _, b := range blobs {
		id, size, err := d.Put(ctx, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if id != sha(b) || size != int64(len(b)) {
			t.Fatalf("Put = %s, %d; want %s, %d", id, size, sha(b), len(b))
		}
		r, n, err := d.Open(id)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(r)
		if n != int64(len(b)) || !bytes.Equal(got, b) {
			t.Errorf("Open(%s): %d bytes, size %d", id[:8], len(got), n)
		}
		if len(b) > 10 {
			p := make([]byte, 4)
			if _, err := r.ReadAt(p, 5); err != nil || string(p) != "xxxx" {
				t.Errorf("ReadAt: %q, %v", p, err)
			}
		}
		r.Close()
		info, err := d.Stat(id)
		if err != nil || info.Size != int64(len(b)) || info.ID != id {
			t.Errorf("Stat = %+v, %v", info, err)
		}
	}
	// The same bytes again: the same blob.
	id, _, err := d.Put(ctx, bytes.NewReader([]byte("hello")))
	if err != nil || id != sha([]byte("hello")) {
		t.Fatal(id, err)
	}
	list, err := d.List(ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("List = %v, %v", list, err)
	}
	for i := 1; i < len(list); i++ {
		if list[i-1].ID >= list[i].ID {
			t.Error("List not sorted")
		}
	}
	if err := d.Delete(id); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Stat(id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stat after Delete: %v", err)
	}
	if err := d.Delete(id); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: %v", err)
	}
	if _, _, err := d.Open(id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open after Delete: %v", err)
	}
}

func TestDiskInvalidIDs(t *testing.T) {
	d, _ := newDisk(t)
	for _, id := range []string{"", "../../etc/passwd", sha(nil)[:63], "ABCDEF" + sha(nil)[6:], sha(nil) + "0"} {
		if _, _, err := d.Open(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Open(%q): %v", id, err)
		}
		if _, err := d.Stat(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Stat(%q): %v", id, err)
		}
		if err := d.Delete(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Delete(%q): %v", id, err)
		}
	}
}

type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("connection reset")
	}
	n := min(len(p), f.n)
	f.n -= n
	return n, nil
}

func TestDiskPutFailureLeavesNothing(t *testing.T) {
	d, dir := newDisk(t)
	if _, _, err := d.Put(t.Context(), &failingReader{n: 100000}); err == nil {
		t.Fatal("Put of a failing reader succeeded")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := d.Put(ctx, bytes.NewReader([]byte("data"))); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with canceled ctx: %v", err)
	}
	tmp, _ := os.ReadDir(filepath.Join(dir, "tmp"))
	list, _ := d.List(t.Context())
	if len(tmp) != 0 || len(list) != 0 {
		t.Errorf("left %d temp files and %d blobs", len(tmp), len(list))
	}
}

func TestDiskReopenClearsTemp(t *testing.T) {
	d, dir := newDisk(t)
	id, _, err := d.Put(t.Context(), bytes.NewReader([]byte("keep")))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tmp", "put-crashed"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	d2, err := OpenDisk(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tmp, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(tmp) != 0 {
		t.Errorf("temp files survived reopening: %v", tmp)
	}
	if _, err := d2.Stat(id); err != nil {
		t.Errorf("blob lost on reopen: %v", err)
	}
	// The default config syncs; it must work too.
	if _, _, err := d2.Put(t.Context(), bytes.NewReader([]byte("synced"))); err != nil {
		t.Fatal(err)
	}
}

func TestDiskConcurrentPuts(t *testing.T) {
	d, _ := newDisk(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			data := []byte{byte(i % 2), 1, 2, 3}
			id, _, err := d.Put(t.Context(), bytes.NewReader(data))
			if err != nil || id != sha(data) {
				t.Errorf("Put: %s, %v", id, err)
			}
		})
	}
	wg.Wait()
	if list, _ := d.List(t.Context()); len(list) != 2 {
		t.Errorf("%d blobs, want 2", len(list))
	}
}

// TestDiskPutStreams checks that Put does not hold the content in memory.
func TestDiskPutStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 256 MiB")
	}
	d, _ := newDisk(t)
	const size = 256 << 20
	var before, after runtimeMem
	before.read()
	id, n, err := d.Put(t.Context(), io.LimitReader(zeros{}, size))
	after.read()
	if err != nil || n != size {
		t.Fatal(n, err)
	}
	if grew := after.total - before.total; grew > 32<<20 {
		t.Errorf("Put of 256 MiB allocated %d MiB", grew>>20)
	}
	r, _, _ := d.Open(id)
	defer r.Close()
	h := sha256.New()
	io.Copy(h, r)
	if hex.EncodeToString(h.Sum(nil)) != id {
		t.Error("stored content does not hash to its id")
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
