package store

import (
	"bytes"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// corrupt changes the stored copy of blob id behind the store's back.
func corrupt(t testing.TB, d *Disk, id string, change func([]byte) []byte) {
	t.Helper()
	p := d.Path(id)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, change(b), 0o444); err != nil {
		t.Fatal(err)
	}
}

func flipLast(b []byte) []byte { b[len(b)-1] ^= 1; return b }

func flipFirst(b []byte) []byte { b[0] ^= 0x80; return b }

func truncate(b []byte) []byte { return b[:len(b)/2] }

func appendByte(b []byte) []byte { return append(b, 'x') }

func TestDiskCorruptBlob(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 5000) // 80000 bytes: several reads
	for _, tc := range []struct {
		name   string
		change func([]byte) []byte
	}{
		{"last byte flipped", flipLast},
		{"first byte flipped", flipFirst},
		{"truncated", truncate},
		{"grown", appendByte},
		{"emptied", func([]byte) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := newDisk(t)
			id, _, err := d.Put(t.Context(), bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			corrupt(t, d, id, tc.change)

			r, size, err := d.Open(id)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("ReadAll: %d bytes, err %v; want a *CorruptError", len(got), err)
			}
			if size > 0 && int64(len(got)) >= size {
				t.Errorf("the reader gave all %d bytes of the corrupt blob; it must withhold the last ones", len(got))
			}
			msg := err.Error()
			for _, want := range []string{id, d.Path(id), "does not match its sha256", "upload the same bytes again"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not say %q", msg, want)
				}
			}
			if err := d.Verify(t.Context(), id); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Verify: %v, want ErrCorrupt", err)
			}

			// Uploading the same bytes again heals it.
			before := d.Used()
			if _, _, err := d.Put(t.Context(), bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
			if err := d.Verify(t.Context(), id); err != nil {
				t.Errorf("Verify after the same bytes were put again: %v", err)
			}
			r, _, err = d.Open(id)
			if err != nil {
				t.Fatal(err)
			}
			got, err = io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("after healing: %d bytes, %v", len(got), err)
			}
			if d.Used() != before-int64(len(tc.change(bytes.Clone(data))))+int64(len(data)) {
				t.Errorf("Used = %d after healing, want %d", d.Used(), before-int64(len(tc.change(bytes.Clone(data))))+int64(len(data)))
			}
		})
	}
}

func TestDiskSoundBlobReads(t *testing.T) {
	d, _ := newDisk(t)
	data := bytes.Repeat([]byte("sound"), 10000)
	id, _, err := d.Put(t.Context(), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := d.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// A range read (as http.ServeContent does) then a whole read.
	if _, err := r.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Seek(100, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	part := make([]byte, 50)
	if _, err := io.ReadFull(r, part); err != nil || !bytes.Equal(part, data[100:150]) {
		t.Fatalf("range read: %v", err)
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("whole read after seeking back: %d bytes, %v", len(got), err)
	}
	if n, err := r.Read(part); n != 0 || err != io.EOF {
		t.Errorf("read past the end: %d, %v", n, err)
	}
}

// TestDiskVerifyStreams checks that verifying a large blob does not hold
// it in memory: the bytes allocated stay far below its size.
func TestDiskVerifyStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 64 MiB")
	}
	d, _ := newDisk(t)
	const size = 64 << 20
	id, _, err := d.Put(t.Context(), io.LimitReader(zeros{}, size))
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err = d.Verify(t.Context(), id)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 2<<20 {
		t.Errorf("Verify of a 64 MiB blob allocated %d KiB; it must stream", grew>>10)
	}
	// A reader through a small buffer verifies too, and a flip in the
	// middle of a large blob is found.
	corrupt(t, d, id, func(b []byte) []byte { b[size/2] = 1; return b })
	r, _, err := d.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	runtime.ReadMemStats(&before)
	n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, make([]byte, 4096))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrCorrupt) || n >= size {
		t.Errorf("copy of the corrupt blob: %d bytes, %v", n, err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 2<<20 {
		t.Errorf("reading a 64 MiB blob through a 4 KiB buffer allocated %d KiB", grew>>10)
	}
}

func TestDiskUsed(t *testing.T) {
	d, dir := newDisk(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, _, err := d.Put(t.Context(), bytes.NewReader(make([]byte, 1000))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	id, _, err := d.Unsynced().Put(t.Context(), bytes.NewReader(make([]byte, 10)))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Used(); got != 1010 {
		t.Errorf("Used = %d after two distinct blobs of 1000 and 10 bytes, want 1010", got)
	}
	if err := d.Delete(id); err != nil {
		t.Fatal(err)
	}
	if got := d.Used(); got != 1000 {
		t.Errorf("Used = %d after Delete, want 1000", got)
	}
	d2, err := OpenDisk(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := d2.Used(); got != 1000 {
		t.Errorf("Used = %d after reopening, want 1000", got)
	}
}
