package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/braid-hpc/braid/internal/s3test"
	"github.com/minio/minio-go/v7"
)

// The conformance suite: every BlobStore passes the same tests, on local
// disk and in a real S3-compatible store (BRAID_TEST_S3, see
// internal/s3test).

// behind changes a store's blobs behind its back, as a disk fault, an
// operator or another program would.
type behind interface {
	// rewrite replaces the stored bytes of blob id by change(bytes).
	rewrite(t testing.TB, id string, change func([]byte) []byte)
	// remove deletes blob id.
	remove(t testing.TB, id string)
	// temps counts the leftovers of uploads.
	temps(t testing.TB) int
}

// storeOpts adjusts the store a conformance test gets.
type storeOpts struct {
	cache int64 // an S3 store's cache bound; 0: none
}

type storeKind struct {
	name string
	open func(t *testing.T, o storeOpts) (BlobStore, behind)
}

var storeKinds = []storeKind{
	{"disk", func(t *testing.T, _ storeOpts) (BlobStore, behind) {
		d, _ := newDisk(t)
		return d, diskBehind{d}
	}},
	{"s3", func(t *testing.T, o storeOpts) (BlobStore, behind) {
		s, b := newS3(t, o.cache)
		return s, s3Behind{s, b}
	}},
}

// forEachStore runs test against a fresh store of every kind.
func forEachStore(t *testing.T, o storeOpts, test func(t *testing.T, bs BlobStore, bh behind)) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			bs, bh := k.open(t, o)
			test(t, bs, bh)
		})
	}
}

// newS3 opens an S3 store in a fresh bucket, with small parts so that a
// few MiB make a multipart upload and a multipart copy.
func newS3(t testing.TB, cache int64) (*S3, *s3test.Bucket) {
	t.Helper()
	b := s3test.New(t)
	cfg := s3Config(b, "blobs")
	if cache > 0 {
		cfg.CacheDir, cfg.CacheSize = t.TempDir(), cache
	}
	s, err := OpenS3(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, b
}

func s3Config(b *s3test.Bucket, prefix string) *S3Config {
	return &S3Config{
		Endpoint: b.Endpoint, Secure: b.Secure, Bucket: b.Name, Prefix: prefix, Region: b.Region,
		AccessKey: b.AccessKey, SecretKey: b.SecretKey,
		PartSize: 5 << 20, copyPart: 6 << 20,
		Logger: discardLog(),
	}
}

type diskBehind struct{ d *Disk }

func (b diskBehind) rewrite(t testing.TB, id string, change func([]byte) []byte) {
	corrupt(t, b.d, id, change)
}

func (b diskBehind) remove(t testing.TB, id string) {
	if err := os.Remove(b.d.Path(id)); err != nil {
		t.Fatal(err)
	}
}

func (b diskBehind) temps(t testing.TB) int {
	tmp, err := os.ReadDir(filepath.Join(b.d.dir, "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	return len(tmp)
}

type s3Behind struct {
	s *S3
	b *s3test.Bucket
}

func (b s3Behind) rewrite(t testing.TB, id string, change func([]byte) []byte) {
	t.Helper()
	ctx := t.Context()
	obj, err := b.b.Client.GetObject(ctx, b.b.Name, b.s.key(id), minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(obj)
	obj.Close()
	if err != nil {
		t.Fatal(err)
	}
	data = change(data)
	if _, err := b.b.Client.PutObject(ctx, b.b.Name, b.s.key(id), bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (b s3Behind) remove(t testing.TB, id string) {
	if err := b.b.Client.RemoveObject(t.Context(), b.b.Name, b.s.key(id), minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (b s3Behind) temps(t testing.TB) int { return len(b.b.Keys(t, b.s.prefix+"tmp/")) }

func readAll(t testing.TB, bs Blobs, id string) ([]byte, error) {
	t.Helper()
	r, _, err := bs.Open(id)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func TestBlobStorePutOpenStatListDelete(t *testing.T) {
	forEachStore(t, storeOpts{}, func(t *testing.T, bs BlobStore, _ behind) {
		ctx := t.Context()
		blobs := [][]byte{[]byte("hello"), {}, bytes.Repeat([]byte("x"), 3<<20)}
		var total int64
		for _, b := range blobs {
			id, size, err := bs.Put(ctx, bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			total += size
			if id != sha(b) || size != int64(len(b)) {
				t.Fatalf("Put = %s, %d; want %s, %d", id, size, sha(b), len(b))
			}
			r, n, err := bs.Open(id)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			if err != nil || n != int64(len(b)) || !bytes.Equal(got, b) {
				t.Errorf("Open(%s): %d bytes, size %d, %v", id[:8], len(got), n, err)
			}
			r.Close()
			info, err := bs.Stat(id)
			if err != nil || info.Size != int64(len(b)) || info.ID != id || info.ModTime.IsZero() {
				t.Errorf("Stat = %+v, %v", info, err)
			}
			if err := bs.Verify(ctx, id); err != nil {
				t.Errorf("Verify: %v", err)
			}
		}
		// The same bytes again: the same blob, counted once.
		id, _, err := bs.Put(ctx, bytes.NewReader([]byte("hello")))
		if err != nil || id != sha([]byte("hello")) {
			t.Fatal(id, err)
		}
		if bs.Used() != total {
			t.Errorf("Used = %d, want %d", bs.Used(), total)
		}
		list, err := bs.List(ctx)
		if err != nil || len(list) != 3 {
			t.Fatalf("List = %v, %v", list, err)
		}
		for i := 1; i < len(list); i++ {
			if list[i-1].ID >= list[i].ID {
				t.Error("List not sorted")
			}
		}
		if err := bs.Delete(id); err != nil {
			t.Fatal(err)
		}
		if bs.Used() != total-5 {
			t.Errorf("Used after Delete = %d, want %d", bs.Used(), total-5)
		}
		if _, err := bs.Stat(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Stat after Delete: %v", err)
		}
		if err := bs.Delete(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("second Delete: %v", err)
		}
		if _, _, err := bs.Open(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Open after Delete: %v", err)
		}
		if err := bs.Verify(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Verify after Delete: %v", err)
		}
		for _, bad := range []string{"", "../../etc/passwd", sha(nil)[:63], "ABCDEF" + sha(nil)[6:]} {
			if _, _, err := bs.Open(bad); !errors.Is(err, ErrInvalidID) {
				t.Errorf("Open(%q): %v", bad, err)
			}
			if err := bs.Delete(bad); !errors.Is(err, ErrInvalidID) {
				t.Errorf("Delete(%q): %v", bad, err)
			}
		}
	})
}

// TestBlobStoreStaged checks the two steps of an upload: nothing is a
// blob before Commit, and Discard leaves nothing behind.
func TestBlobStoreStaged(t *testing.T) {
	forEachStore(t, storeOpts{}, func(t *testing.T, bs BlobStore, bh behind) {
		ctx := t.Context()
		for _, size := range []int{1000, 12 << 20} { // one part; several
			data := pattern(size)
			st, err := bs.Stage(ctx, bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if st.ID != sha(data) || st.Size != int64(size) {
				t.Fatalf("Stage = %s, %d", st.ID, st.Size)
			}
			if _, err := bs.Stat(st.ID); !errors.Is(err, ErrNotFound) {
				t.Errorf("a staged blob is visible before Commit: %v", err)
			}
			st.Discard()
			if _, err := bs.Stat(st.ID); !errors.Is(err, ErrNotFound) {
				t.Errorf("a discarded blob is visible: %v", err)
			}
			if err := st.Commit(ctx); err == nil {
				t.Error("Commit after Discard succeeded")
			}
			st, err = bs.Stage(ctx, bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			st.Discard() // after Commit: a no-op
			if got, err := readAll(t, bs, st.ID); err != nil || !bytes.Equal(got, data) {
				t.Errorf("committed blob: %d bytes, %v", len(got), err)
			}
		}
		if n := bh.temps(t); n != 0 {
			t.Errorf("%d uploads left behind", n)
		}
		if bs.Used() != 1000+12<<20 {
			t.Errorf("Used = %d", bs.Used())
		}
	})
}

// pattern returns n bytes that differ from part to part.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>20)
	}
	return b
}

func TestBlobStoreLargeUpload(t *testing.T) {
	if testing.Short() {
		t.Skip("uploads 48 MiB")
	}
	forEachStore(t, storeOpts{}, func(t *testing.T, bs BlobStore, bh behind) {
		const size = 48 << 20 // S3: ten 5 MiB parts, copied in place in eight
		var before, after runtimeMem
		before.read()
		id, n, err := bs.Put(t.Context(), io.LimitReader(zeros{}, size))
		after.read()
		if err != nil || n != size {
			t.Fatal(n, err)
		}
		// Two parts (5 MiB) in memory, the requests' own costs (under
		// the race detector, pooled buffers are allocated again for
		// every part), but not the content.
		if grew := after.total - before.total; grew > size/2 {
			t.Errorf("Put of %d MiB allocated %d MiB", size>>20, grew>>20)
		}
		r, _, err := bs.Open(id)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		h := sha256.New()
		if _, err := io.Copy(h, r); err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(h.Sum(nil)) != id || id != sha(make([]byte, size)) {
			t.Error("stored content does not hash to its id")
		}
		if n := bh.temps(t); n != 0 {
			t.Errorf("%d uploads left behind", n)
		}
	})
}

func TestBlobStoreRangeReads(t *testing.T) {
	forEachStore(t, storeOpts{}, func(t *testing.T, bs BlobStore, _ behind) {
		data := pattern(1<<20 + 17)
		id, _, err := bs.Put(t.Context(), bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		r, size, err := bs.Open(id)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if size != int64(len(data)) {
			t.Fatalf("size %d", size)
		}
		for _, tc := range []struct {
			off, n int64
			want   int64 // bytes read
			eof    bool
		}{
			{0, 10, 10, false},
			{500_000, 4096, 4096, false},
			{size - 5, 5, 5, false},
			{size - 5, 10, 5, true},
			{size, 1, 0, true},
		} {
			p := make([]byte, tc.n)
			n, err := r.ReadAt(p, tc.off)
			if int64(n) != tc.want || (err == io.EOF) != tc.eof || (err != nil && err != io.EOF) {
				t.Errorf("ReadAt(%d bytes at %d) = %d, %v; want %d, eof %v", tc.n, tc.off, n, err, tc.want, tc.eof)
			}
			if !bytes.Equal(p[:n], data[tc.off:tc.off+int64(n)]) {
				t.Errorf("ReadAt at %d: wrong bytes", tc.off)
			}
		}
		// As http.ServeContent reads: the size by seeking to the end,
		// then a range.
		if end, err := r.Seek(0, io.SeekEnd); err != nil || end != size {
			t.Fatalf("Seek to end = %d, %v", end, err)
		}
		if _, err := r.Seek(1000, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 3000)
		if _, err := io.ReadFull(r, p); err != nil || !bytes.Equal(p, data[1000:4000]) {
			t.Errorf("read after Seek: %v", err)
		}
		// Back to the start: the whole blob, verified.
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, data) {
			t.Errorf("read from the start after seeking: %d bytes, %v", len(got), err)
		}
		// Units read at offsets from several streams at once.
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 8 {
					off := int64(g*100_000 + i*1000)
					p := make([]byte, 777)
					if n, err := r.ReadAt(p, off); err != nil || !bytes.Equal(p[:n], data[off:off+777]) {
						t.Errorf("concurrent ReadAt at %d: %d, %v", off, n, err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
}

func TestBlobStoreCorruptBlob(t *testing.T) {
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
			// The S3 store caches what it puts: a change behind its back
			// must still be seen.
			forEachStore(t, storeOpts{cache: 1 << 20}, func(t *testing.T, bs BlobStore, bh behind) {
				ctx := t.Context()
				id, _, err := bs.Put(ctx, bytes.NewReader(data))
				if err != nil {
					t.Fatal(err)
				}
				bh.rewrite(t, id, tc.change)
				r, size, err := bs.Open(id)
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
				for _, want := range []string{id, ce.Path, "does not match its sha256", "upload the same bytes again"} {
					if !strings.Contains(msg, want) {
						t.Errorf("error %q does not say %q", msg, want)
					}
				}
				if err := bs.Verify(ctx, id); !errors.Is(err, ErrCorrupt) {
					t.Errorf("Verify: %v, want ErrCorrupt", err)
				}
				// The same bytes again heal it.
				if _, _, err := bs.Put(ctx, bytes.NewReader(data)); err != nil {
					t.Fatal(err)
				}
				if got, err := readAll(t, bs, id); err != nil || !bytes.Equal(got, data) {
					t.Errorf("after healing: %d bytes, %v", len(got), err)
				}
				if err := bs.Verify(ctx, id); err != nil {
					t.Errorf("Verify after healing: %v", err)
				}
				if used, err := bs.Recount(ctx); err != nil || used != int64(len(data)) {
					t.Errorf("Recount = %d, %v; want %d", used, err, len(data))
				}
			})
		})
	}
}

// TestBlobStoreDeletedBehindBack: a blob removed by someone else is not
// found, whatever was cached, and Recount sees it gone.
func TestBlobStoreDeletedBehindBack(t *testing.T) {
	forEachStore(t, storeOpts{cache: 1 << 20}, func(t *testing.T, bs BlobStore, bh behind) {
		ctx := t.Context()
		data := []byte("here today")
		id, _, err := bs.Put(ctx, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if err := bs.Verify(ctx, id); err != nil {
			t.Fatal(err)
		}
		bh.remove(t, id)
		if _, _, err := bs.Open(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Open: %v, want ErrNotFound", err)
		}
		if _, err := bs.Stat(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Stat: %v, want ErrNotFound", err)
		}
		if err := bs.Verify(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Verify: %v, want ErrNotFound", err)
		}
		if err := bs.Delete(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Delete: %v, want ErrNotFound", err)
		}
		if bs.Used() != int64(len(data)) {
			t.Errorf("Used = %d before Recount, want the %d counted", bs.Used(), len(data))
		}
		if used, err := bs.Recount(ctx); err != nil || used != 0 || bs.Used() != 0 {
			t.Errorf("Recount = %d, %v; Used %d; want 0", used, err, bs.Used())
		}
		if list, err := bs.List(ctx); err != nil || len(list) != 0 {
			t.Errorf("List = %v, %v", list, err)
		}
	})
}

func TestBlobStorePutFailureLeavesNothing(t *testing.T) {
	forEachStore(t, storeOpts{}, func(t *testing.T, bs BlobStore, bh behind) {
		for _, n := range []int{100_000, 7 << 20} { // in one part; after a part went up
			_, _, err := bs.Put(t.Context(), &failingReader{n: n})
			if err == nil || !strings.Contains(err.Error(), "connection reset") {
				t.Errorf("Put of a failing reader after %d bytes: %v; want the reader's error", n, err)
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, _, err := bs.Put(ctx, bytes.NewReader([]byte("data"))); !errors.Is(err, context.Canceled) {
			t.Fatalf("Put with canceled ctx: %v", err)
		}
		list, _ := bs.List(t.Context())
		if n := bh.temps(t); n != 0 || len(list) != 0 || bs.Used() != 0 {
			t.Errorf("left %d uploads, %d blobs, %d bytes counted", n, len(list), bs.Used())
		}
	})
}

func TestBlobStoreConcurrentPuts(t *testing.T) {
	forEachStore(t, storeOpts{}, func(t *testing.T, bs BlobStore, _ behind) {
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				data := []byte{byte(i % 2), 1, 2, 3}
				id, _, err := bs.Put(t.Context(), bytes.NewReader(data))
				if err != nil || id != sha(data) {
					t.Errorf("Put: %s, %v", id, err)
				}
			})
		}
		wg.Wait()
		if list, _ := bs.List(t.Context()); len(list) != 2 {
			t.Errorf("%d blobs, want 2", len(list))
		}
		if used, err := bs.Recount(t.Context()); err != nil || used != 8 {
			t.Errorf("Recount = %d, %v; want 8", used, err)
		}
	})
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
