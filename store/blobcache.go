package store

import (
	"container/list"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// blobCache is a bounded read-through cache of an S3 store's blobs on
// local disk: blob ID of the object with ETag E is the file DIR/ID.E,
// written only with bytes that hashed to ID, and dropped least recently
// used first when the cache would pass its bound. Fills in progress live
// in DIR/tmp and count only once in place. Readers keep an evicted
// file open until they close it (its bytes stay on disk until then).
//
// A nil *blobCache is a cache that holds nothing. It is safe for
// concurrent use.
type blobCache struct {
	dir string
	max int64

	mu      sync.Mutex
	used    int64
	entries map[string]*list.Element // by blob ID; values are *cacheEntry
	lru     list.List                // front: most recently used
}

type cacheEntry struct {
	id, etag string
	size     int64
}

// openBlobCache opens, creating if needed, the cache in dir, keeping the
// entries a previous run left (oldest first out) up to max bytes.
func openBlobCache(dir string, max int64) (*blobCache, error) {
	c := &blobCache{dir: dir, max: max, entries: map[string]*list.Element{}}
	tmp := filepath.Join(dir, "tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("store: blob cache: clear %s: %w", tmp, err)
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("store: blob cache: %w", err)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("store: blob cache: %w", err)
	}
	type old struct {
		e   cacheEntry
		mod time.Time
	}
	var olds []old
	for _, de := range des {
		if de.IsDir() {
			continue
		}
		id, etag, ok := strings.Cut(de.Name(), ".")
		fi, err := de.Info()
		if !ok || !ValidID(id) || err != nil {
			os.Remove(filepath.Join(dir, de.Name()))
			continue
		}
		olds = append(olds, old{cacheEntry{id: id, etag: etag, size: fi.Size()}, fi.ModTime()})
	}
	slices.SortFunc(olds, func(a, b old) int { return a.mod.Compare(b.mod) })
	for _, o := range olds {
		c.insert(o.e)
	}
	return c, nil
}

// safeETag turns an ETag into a file name part.
func safeETag(etag string) string {
	return strings.Map(func(r rune) rune {
		if '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || r == '-' {
			return r
		}
		return '_'
	}, etag)
}

func (c *blobCache) path(e *cacheEntry) string { return filepath.Join(c.dir, e.id+"."+e.etag) }

// open returns the cached copy of blob id if it is that of the object
// with etag and size, and its path.
func (c *blobCache) open(id, etag string, size int64) (*os.File, string, bool) {
	if c == nil {
		return nil, "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.entries[id]
	if el == nil {
		return nil, "", false
	}
	e := el.Value.(*cacheEntry)
	if e.etag != safeETag(etag) || e.size != size {
		c.drop(el) // the object changed behind our back
		return nil, "", false
	}
	p := c.path(e)
	f, err := os.Open(p)
	if err != nil {
		c.drop(el)
		return nil, "", false
	}
	c.lru.MoveToFront(el)
	return f, p, true
}

// evict drops blob id from the cache.
func (c *blobCache) evict(id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.entries[id]; el != nil {
		c.drop(el)
	}
}

// insert adds e, whose file is in place, dropping the least recently
// used entries to make room. c.mu is held, or c is not shared yet.
func (c *blobCache) insert(e cacheEntry) {
	if el := c.entries[e.id]; el != nil {
		if old := el.Value.(*cacheEntry); old.etag == e.etag {
			c.lru.MoveToFront(el)
			return
		}
		c.drop(el)
	}
	if e.size > c.max {
		os.Remove(c.path(&e))
		return
	}
	for c.used+e.size > c.max && c.lru.Len() > 0 {
		c.drop(c.lru.Back())
	}
	c.entries[e.id] = c.lru.PushFront(&e)
	c.used += e.size
}

func (c *blobCache) drop(el *list.Element) {
	e := c.lru.Remove(el).(*cacheEntry)
	delete(c.entries, e.id)
	c.used -= e.size
	os.Remove(c.path(e))
}

// Used returns the bytes of the blobs in the cache.
func (c *blobCache) Used() int64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// fill starts writing a blob into the cache; nil if there is no cache.
// Its writes never fail: a fill that cannot be written, or grows past
// the cache's bound, gives up silently and caches nothing.
func (c *blobCache) fill() *cacheFill {
	if c == nil {
		return nil
	}
	f, err := os.CreateTemp(filepath.Join(c.dir, "tmp"), "fill-*")
	if err != nil {
		return nil
	}
	return &cacheFill{c: c, f: f}
}

// cacheFill is a blob on its way into the cache. A nil *cacheFill takes
// writes and does nothing.
type cacheFill struct {
	c *blobCache
	f *os.File // nil once given up
	n int64
}

func (w *cacheFill) Write(p []byte) (int, error) {
	if w == nil || w.f == nil {
		return len(p), nil
	}
	if w.n+int64(len(p)) > w.c.max {
		w.abort()
		return len(p), nil
	}
	if _, err := w.f.Write(p); err != nil {
		w.abort()
		return len(p), nil
	}
	w.n += int64(len(p))
	return len(p), nil
}

// abort drops the fill; safe to call more than once.
func (w *cacheFill) abort() {
	if w == nil || w.f == nil {
		return
	}
	w.f.Close()
	os.Remove(w.f.Name())
	w.f = nil
}

// commit puts the fill in place as blob id of the object with etag, if
// it holds the blob's size bytes; the caller checked they hash to id.
func (w *cacheFill) commit(id, etag string, size int64) {
	if w == nil || w.f == nil {
		return
	}
	f := w.f
	w.f = nil
	tmp := f.Name()
	if err := f.Close(); err != nil || w.n != size || etag == "" {
		os.Remove(tmp)
		return
	}
	e := cacheEntry{id: id, etag: safeETag(etag), size: size}
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := os.Rename(tmp, c.path(&e)); err != nil {
		os.Remove(tmp)
		return
	}
	c.insert(e)
}
