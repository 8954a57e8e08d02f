package transport

import (
	"bytes"
	"math/bits"
	"sync"
)

// Message buffers of minPooled bytes and more are recycled through pools by
// power-of-two size class, shared by all sessions: a send copy goes back
// when the peer acknowledges it, a receive buffer when the reader calls
// Stream.Release. A recycled buffer is not zeroed, which is safe because
// every byte is written (copied in, or received) before it is read.
const (
	minPooledShift = 12 // 4 KiB: smaller buffers cost less to allocate than to pool
	maxPooledShift = 26 // 64 MiB, above any SegmentSize
	minPooled      = 1 << minPooledShift
)

var bufPools [maxPooledShift - minPooledShift + 1]sync.Pool // *[]byte

// boxes recycles the *[]byte that carry buffers through bufPools, so that
// putting a buffer back allocates nothing.
var boxes = sync.Pool{New: func() any { return new([]byte) }}

// sizeClass returns the pool index for a buffer of n bytes and whether n
// is pooled at all.
func sizeClass(n int) (int, bool) {
	if n < minPooled || n > 1<<maxPooledShift {
		return 0, false
	}
	shift := bits.Len(uint(n - 1)) // smallest power of two >= n
	return shift - minPooledShift, true
}

// getBuf returns a buffer of n bytes, recycled where possible and then not
// zeroed: the caller must overwrite all of it.
func getBuf(n int) []byte {
	c, ok := sizeClass(n)
	if !ok {
		return make([]byte, n)
	}
	if box, ok := bufPools[c].Get().(*[]byte); ok {
		b := (*box)[:n]
		*box = nil
		boxes.Put(box)
		return b
	}
	return make([]byte, n, 1<<(c+minPooledShift))
}

// joinParts returns the concatenation of pooled buffers in a new one and
// recycles them. bytes.Join leaves the new buffer unzeroed before filling
// it. Call it without the session lock: the copy may be large.
func joinParts(parts [][]byte) []byte {
	out := bytes.Join(parts, nil)
	for _, b := range parts {
		putBuf(b)
	}
	return out
}

// putBuf recycles b if its capacity is exactly one of the size classes,
// as getBuf's are; other buffers are left to the garbage collector.
func putBuf(b []byte) {
	c, ok := sizeClass(cap(b))
	if !ok || cap(b) != 1<<(c+minPooledShift) {
		return
	}
	box := boxes.Get().(*[]byte)
	*box = b[:cap(b)]
	bufPools[c].Put(box)
}
