package transport

import "io"

// rawSmall is the size of a channel's own ciphertext buffer: enough for
// the records of control frames and small messages, and the buffer a
// blocked read of an idle channel waits in.
const rawSmall = 4 << 10

// rawBig is the size of the buffer a channel borrows while larger
// records are in flight: room for several records of maxRecord bytes, so
// that a busy channel reads them with few system calls.
const rawBig = 256 << 10

// rawReader buffers a secured channel's ciphertext, as a bufio.Reader
// would, but holds a large buffer only while it has bytes in it. An idle
// channel waits with rawSmall bytes of its own; when a record does not
// fit, it borrows rawBig bytes from the shared pool (getBuf), and gives
// them back once every byte read into them was consumed and the last
// record was small (a ping or control frame, say). So a server
// with 1,000 workers connected and idle holds about 4 KiB a path for
// them, not 256 KiB.
//
// One goroutine uses a rawReader at a time.
type rawReader struct {
	r          io.Reader
	small      []byte
	buf        []byte // small, or a borrowed buffer of rawBig bytes
	head, tail int    // buffered bytes: buf[head:tail]
	borrowed   bool
}

// maxEmptyReads bounds the reads in a row that return nothing and no
// error before Peek gives up with io.ErrNoProgress, as bufio does.
const maxEmptyReads = 100

// Peek returns the next n bytes without consuming them, reading until
// they are buffered (n is at most rawBig). With fewer, it returns what
// it has and the read's error. The bytes are valid until the next Peek
// or Discard.
func (b *rawReader) Peek(n int) ([]byte, error) {
	if b.buf == nil {
		b.buf = b.small
	}
	for empty := 0; b.tail-b.head < n; {
		if n > len(b.buf) || b.head > 0 {
			b.room(n)
		}
		k, err := b.r.Read(b.buf[b.tail:])
		b.tail += k
		if b.tail-b.head >= n {
			break
		}
		if err != nil {
			return b.buf[b.head:b.tail], err
		}
		if k > 0 {
			empty = 0
		} else if empty++; empty >= maxEmptyReads {
			return b.buf[b.head:b.tail], io.ErrNoProgress
		}
	}
	return b.buf[b.head : b.head+n], nil
}

// room moves the buffered bytes to the front of a buffer that can hold
// n: the one in use if it can, else a borrowed one. A read then fills
// all the space after them, as bufio's does.
func (b *rawReader) room(n int) {
	dst := b.buf
	if n > len(b.buf) {
		dst = getBuf(rawBig)
	}
	m := copy(dst, b.buf[b.head:b.tail])
	if n > len(b.buf) {
		b.release()
		b.buf, b.borrowed = dst, true
	}
	b.head, b.tail = 0, m
}

// Discard consumes n buffered bytes (n is at most what Peek returned).
// When that empties the buffer, a borrowed one goes back if these bytes
// would have fitted the small one: a channel whose records stay large
// keeps it, and reads them with few system calls.
func (b *rawReader) Discard(n int) {
	b.head += n
	if b.head == b.tail {
		b.head, b.tail = 0, 0
		if n <= len(b.small) {
			b.release()
			b.buf = b.small
		}
	}
}

// release gives a borrowed buffer back.
func (b *rawReader) release() {
	if b.borrowed {
		putBuf(b.buf)
		b.buf, b.borrowed = nil, false
	}
}

// Buffered reports how many bytes are buffered.
func (b *rawReader) Buffered() int { return b.tail - b.head }
