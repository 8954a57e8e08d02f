package api

import (
	"crypto/sha256"
	"fmt"
)

// Limits of a ParamCache. They are part of the wire protocol: the server
// and the worker apply the same ones, so that their caches for a stream
// hold the same values at every message.
const (
	// ParamCacheMin is the shortest parameter value a cache keeps; shorter
	// values always travel whole.
	ParamCacheMin = 4 << 10
	// ParamCacheBytes bounds the values one stream's cache holds, in
	// bytes; a longer value always travels whole.
	ParamCacheBytes = 16 << 20
	// ParamCacheEntries bounds the values one stream's cache holds.
	ParamCacheEntries = 32
)

// A ParamCache holds the long parameter values sent on one stream of a
// session, so that each travels once per stream rather than once per
// unit: a job's parameters are copied into each of its units, and a
// 900 KB parameter over 200 units would otherwise cost 175 MiB.
//
// The server encodes units with AppendCached and the worker decodes
// them with DecodeCached, each with its own cache for the stream. A value
// the cache does not hold travels whole, marked to be kept; a value it
// holds travels as its SHA-256. Both caches apply the same operations in
// the same order (the stream is ordered, and values are visited in key
// order), and evict the least recently used value beyond
// ParamCacheEntries values or ParamCacheBytes bytes, so they agree
// without any acknowledgement. A worker that restarts opens new streams
// with empty caches: the values travel again. Messages encoded without a
// cache (the server's requests on stream 0) leave both caches alone.
//
// A ParamCache is not safe for concurrent use: it belongs to the one
// goroutine that writes or reads its stream.
type ParamCache struct {
	tick    uint64
	bytes   int
	byHash  map[[sha256.Size]byte]*paramEntry
	byValue map[string]*paramEntry
}

type paramEntry struct {
	v    string
	h    [sha256.Size]byte
	used uint64
}

// NewParamCache returns an empty cache.
func NewParamCache() *ParamCache {
	return &ParamCache{byHash: map[[sha256.Size]byte]*paramEntry{}, byValue: map[string]*paramEntry{}}
}

// Len returns how many values c holds and their total bytes.
func (c *ParamCache) Len() (values, bytes int) { return len(c.byHash), c.bytes }

// cacheable reports whether a value of n bytes goes through a cache.
func cacheable(n int) bool { return n >= ParamCacheMin && n <= ParamCacheBytes }

// keep adds v, with hash h, and evicts the least recently used values
// beyond the limits (never v).
func (c *ParamCache) keep(v string, h [sha256.Size]byte) {
	if e := c.byHash[h]; e != nil {
		c.touch(e)
		return
	}
	c.tick++
	e := &paramEntry{v: v, h: h, used: c.tick}
	c.byHash[h] = e
	c.byValue[v] = e
	c.bytes += len(v)
	for len(c.byHash) > ParamCacheEntries || c.bytes > ParamCacheBytes {
		var old *paramEntry
		for _, o := range c.byHash {
			if o != e && (old == nil || o.used < old.used) {
				old = o
			}
		}
		if old == nil {
			return
		}
		delete(c.byHash, old.h)
		delete(c.byValue, old.v)
		c.bytes -= len(old.v)
	}
}

func (c *ParamCache) touch(e *paramEntry) {
	c.tick++
	e.used = c.tick
}

// Parameter value tags of unit encoding version 2.
const (
	paramPlain = 0 // the value follows; no cache keeps it
	paramKeep  = 1 // the value follows; the stream's caches keep it
	paramRef   = 2 // the SHA-256 of a value the stream's caches hold follows
)

// appendParam appends one parameter value of encoding version 2.
func (c *ParamCache) appendParam(b []byte, v string) []byte {
	if !cacheable(len(v)) {
		b = append(b, paramPlain)
		return appendString(b, v)
	}
	if e := c.byValue[v]; e != nil {
		c.touch(e)
		b = append(b, paramRef)
		return append(b, e.h[:]...)
	}
	c.keep(v, sha256.Sum256([]byte(v)))
	b = append(b, paramKeep)
	return appendString(b, v)
}

// param reads one parameter value of encoding version 2.
func (d *decoder) param(c *ParamCache) string {
	if d.err != nil {
		return ""
	}
	if d.off >= len(d.b) {
		d.fail("param value: truncated")
		return ""
	}
	tag := d.b[d.off]
	d.off++
	switch tag {
	case paramPlain:
		v := d.string("param value")
		if d.err == nil && cacheable(len(v)) {
			d.fail("param value of %d bytes sent whole, not through the stream's cache", len(v))
		}
		return v
	case paramKeep:
		v := d.string("param value")
		switch {
		case d.err != nil:
		case !cacheable(len(v)):
			d.fail("param value of %d bytes marked to keep; the cache keeps %d to %d bytes", len(v), ParamCacheMin, ParamCacheBytes)
		case c == nil:
			d.fail("param value marked to keep, and the stream has no cache")
		default:
			c.keep(v, sha256.Sum256([]byte(v)))
		}
		return v
	case paramRef:
		if len(d.b)-d.off < sha256.Size {
			d.fail("param reference: truncated")
			return ""
		}
		var h [sha256.Size]byte
		copy(h[:], d.b[d.off:])
		d.off += sha256.Size
		if c == nil {
			d.fail("param refers to a cached value, and the stream has no cache")
			return ""
		}
		e := c.byHash[h]
		if e == nil {
			d.fail("param refers to value %x, which the stream's cache does not hold (%d values held)", h[:8], len(c.byHash))
			return ""
		}
		c.touch(e)
		return e.v
	}
	d.fail("param value: unknown tag %d", tag)
	return ""
}

// String describes the cache's contents, for logs and tests.
func (c *ParamCache) String() string {
	return fmt.Sprintf("%d values, %d bytes", len(c.byHash), c.bytes)
}
