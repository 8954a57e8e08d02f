package store

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// cacheBytes sums the sizes of the cached files in dir.
func cacheBytes(t testing.TB, dir string) (n int64, files int) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if de.IsDir() {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
		files++
	}
	return n, files
}

func fillCache(t testing.TB, c *blobCache, data []byte, etag string) string {
	t.Helper()
	id := sha(data)
	w := c.fill()
	w.Write(data)
	w.commit(id, etag, int64(len(data)))
	return id
}

// TestBlobCacheBound: the cache keeps the most recently used blobs within
// its bound, on disk and in its count, and comes back with them.
func TestBlobCacheBound(t *testing.T) {
	dir := t.TempDir()
	c, err := openBlobCache(dir, 3000)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 5 {
		ids = append(ids, fillCache(t, c, bytes.Repeat([]byte{byte(i)}, 1000), "e"))
		if i == 2 {
			// A read makes the first the most recently used.
			f, _, ok := c.open(ids[0], "e", 1000)
			if !ok {
				t.Fatal("a cached blob is not found")
			}
			f.Close()
		}
	}
	if n, files := cacheBytes(t, dir); n > 3000 || files != 3 || c.Used() != n {
		t.Errorf("cache holds %d bytes in %d files, counts %d; want 3000 in 3", n, files, c.Used())
	}
	for i, want := range []bool{true, false, false, true, true} {
		f, _, ok := c.open(ids[i], "e", 1000)
		if ok != want {
			t.Errorf("blob %d cached: %v, want %v", i, ok, want)
		}
		if ok {
			f.Close()
		}
	}
	// Another ETag: the object changed, the copy goes.
	if _, _, ok := c.open(ids[0], "other", 1000); ok {
		t.Error("a copy of another version of the object was served")
	}
	if _, files := cacheBytes(t, dir); files != 2 {
		t.Errorf("%d files after dropping a stale copy, want 2", files)
	}
	// Larger than the whole cache: not cached, nothing evicted.
	big := fillCache(t, c, make([]byte, 3001), "e")
	if _, _, ok := c.open(big, "e", 3001); ok {
		t.Error("a blob larger than the cache was cached")
	}
	if _, files := cacheBytes(t, dir); files != 2 {
		t.Errorf("%d files after a too-large fill, want 2", files)
	}
	// A fill that does not reach the blob's size is not kept.
	w := c.fill()
	w.Write([]byte("half"))
	w.commit(sha([]byte("half of it")), "e", 10)
	if _, files := cacheBytes(t, dir); files != 2 {
		t.Errorf("%d files after a short fill, want 2", files)
	}
	// Reopened, the cache keeps its entries and its bound.
	c2, err := openBlobCache(dir, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if n, files := cacheBytes(t, dir); n > 1000 || files != 1 || c2.Used() != 1000 {
		t.Errorf("reopened with a 1000-byte bound: %d bytes in %d files, counts %d", n, files, c2.Used())
	}
	if tmp, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(tmp) != 0 {
		t.Errorf("%d fills left in tmp", len(tmp))
	}
}

// TestS3Cache: blobs put or read whole are served from the cache while
// the object is unchanged, ranged reads included, within its bound.
func TestS3Cache(t *testing.T) {
	const bound = 3 << 20
	s, _ := newS3(t, bound)
	ctx := t.Context()
	var ids []string
	for i := range 5 {
		id, _, err := s.Put(ctx, bytes.NewReader(bytes.Repeat([]byte{byte(i)}, 1<<20)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if n, files := cacheBytes(t, s.cache.dir); n > bound || files != 3 {
		t.Errorf("cache holds %d bytes in %d files; want at most %d in 3", n, files, bound)
	}
	r, _, err := s.Open(ids[4])
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.(*cachedBlob); !ok {
		t.Errorf("a blob just put is read from %T, not the cache", r)
	}
	r.Close()
	// An evicted blob is read from the store; reading it whole caches
	// it again (Verify does), and a reader opened before then reads its
	// ranges from the cache after.
	r, _, err = s.Open(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sr, ok := r.(*s3Reader)
	if !ok {
		t.Fatalf("an evicted blob is read from %T", r)
	}
	p := make([]byte, 100)
	if _, err := r.ReadAt(p, 1000); err != nil || p[0] != 0 {
		t.Fatal(err)
	}
	if sr.cached.Load() != nil {
		t.Error("a ranged read used a cache copy that is not there")
	}
	if err := s.Verify(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(p, 2000); err != nil || p[0] != 0 {
		t.Fatal(err)
	}
	if sr.cached.Load() == nil {
		t.Error("ranged reads do not use the cache once the blob is there")
	}
	if n, _ := cacheBytes(t, s.cache.dir); n > bound {
		t.Errorf("cache holds %d bytes, bound %d", n, bound)
	}
	// A blob larger than the cache is read and verified, not cached.
	big, _, err := s.Put(ctx, io.LimitReader(zeros{}, bound+1))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(ctx, big); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.cache.open(big, "", bound+1); ok {
		t.Error("a blob larger than the cache was cached")
	}
	if n, _ := cacheBytes(t, s.cache.dir); n > bound {
		t.Errorf("cache holds %d bytes, bound %d", n, bound)
	}
}

// TestS3CacheCorruptCopy: a cached copy that rots on local disk is
// dropped, and the store's sound copy is read instead.
func TestS3CacheCorruptCopy(t *testing.T) {
	s, _ := newS3(t, 1<<20)
	data := pattern(100_000)
	id, _, err := s.Put(t.Context(), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	s.cache.mu.Lock()
	path := s.cache.path(s.cache.entries[id].Value.(*cacheEntry))
	s.cache.mu.Unlock()
	if err := os.WriteFile(path, flipLast(bytes.Clone(data)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(t.Context(), id); err != nil {
		t.Errorf("Verify with a rotten cache copy: %v; want the store's sound copy checked", err)
	}
	if got, err := readAll(t, s, id); err != nil || !bytes.Equal(got, data) {
		t.Errorf("read after Verify: %d bytes, %v", len(got), err)
	}
}
