package transport

import (
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

// joinParts returns the concatenation of pooled buffers in one buffer,
// pooled too (a reader who releases it gets it back for the next large
// message), and recycles the parts. Call it without the session lock: the
// copy may be large.
//
// The copy goes a part at a time through copyPart, which is not inlined:
// its call is a point where the scheduler can take the goroutine off its
// P. A 64 MB message copied in one loop of memmoves cannot be preempted
// for tens of milliseconds, and when a garbage collection starts
// meanwhile, every goroutine that allocates waits for it.
func joinParts(parts [][]byte) []byte {
	n := 0
	for _, b := range parts {
		n += len(b)
	}
	out := getBuf(n)
	off := 0
	for _, b := range parts {
		off += copyPart(out[off:], b)
		putBuf(b)
	}
	return out
}

//go:noinline
func copyPart(dst, src []byte) int { return copy(dst, src) }

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
