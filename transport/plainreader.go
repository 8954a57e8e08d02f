package transport

import (
	"io"
	"net"
)

// plainReader is the frame source of a plaintext channel: a read buffer
// for headers and small frames, like bufio.Reader, but a payload is read
// from the kernel straight into its destination. Where the channel is a
// socket, the rest of a payload and the frames after it arrive in one
// vectored read (readv) into the destination and the buffer, so a payload
// costs no copy in user space and about one system call (readvInto).
type plainReader struct {
	conn net.Conn
	rv   readvFunc // nil where the channel has no readv
	buf  []byte
	r, w int
	err  error
}

// plainReadBuf is the read buffer's size: headers and small frames.
const plainReadBuf = 64 << 10

// directRead is the smallest rest of a payload read straight into its
// destination rather than through the buffer.
const directRead = 4 << 10

// readAhead is how much of the buffer a vectored payload read also fills:
// the next frames' headers and small frames, while a large payload that
// follows mostly waits for a direct read of its own.
const readAhead = 4 << 10

func newPlainReader(conn net.Conn) *plainReader {
	return &plainReader{conn: conn, rv: readvOf(conn), buf: make([]byte, plainReadBuf)}
}

// Read implements io.Reader.
func (b *plainReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		if b.err != nil {
			return 0, b.readErr()
		}
		if len(p) >= len(b.buf) {
			n, err := b.read(p)
			if n == 0 && err != nil {
				return 0, err
			}
			return n, nil
		}
		if err := b.fill(); err != nil && b.r == b.w {
			return 0, err
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n, nil
}

// readErr returns and clears the sticky error.
func (b *plainReader) readErr() error {
	err := b.err
	b.err = nil
	return err
}

// fill reads into the empty buffer at least one byte, or fails.
func (b *plainReader) fill() error {
	b.r, b.w = 0, 0
	for range 100 {
		n, err := b.read(b.buf)
		b.w = n
		if err != nil {
			b.err = err
		}
		if n > 0 {
			return nil
		}
		if err != nil {
			return b.readErr()
		}
	}
	return io.ErrNoProgress
}

// read reads into p what the channel has, at least one byte: with the
// vectored read where there is one, which keeps the socket's receive
// low-water mark in step (plainreader_linux.go).
func (b *plainReader) read(p []byte) (int, error) {
	if b.rv == nil {
		return b.conn.Read(p)
	}
	_, n, err := b.rv(nil, p)
	if n == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

// readFull fills dst: from the buffer first, then straight from the
// channel, with the next frames' first bytes read into the buffer in the
// same system call where it can.
func (b *plainReader) readFull(dst []byte) error {
	n := copy(dst, b.buf[b.r:b.w])
	b.r += n
	dst = dst[n:]
	for len(dst) > 0 {
		if b.err != nil {
			err := b.readErr()
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(dst) < directRead {
			if _, err := io.ReadFull(b, dst); err != nil {
				return err
			}
			return nil
		}
		// The buffer is empty here.
		b.r, b.w = 0, 0
		var n, extra int
		var err error
		if b.rv != nil {
			n, extra, err = b.rv(dst, b.buf[:readAhead])
		} else {
			n, err = b.conn.Read(dst)
		}
		dst = dst[n:]
		b.w = extra
		if err != nil {
			b.err = err
		} else if n == 0 && extra == 0 {
			b.err = io.EOF
		}
	}
	return nil
}

// Discard skips n bytes.
func (b *plainReader) Discard(n int) (int, error) {
	done := 0
	for done < n {
		if b.r == b.w {
			if b.err != nil {
				return done, b.readErr()
			}
			if err := b.fill(); err != nil && b.r == b.w {
				return done, err
			}
		}
		k := min(n-done, b.w-b.r)
		b.r += k
		done += k
	}
	return done, nil
}

// Buffered reports how many bytes are at hand without reading the channel.
func (b *plainReader) Buffered() int { return b.w - b.r }

// readvFunc reads into a, then into b, in one system call: n bytes went
// into a and extra into b (b only once a is full).
type readvFunc func(a, b []byte) (n, extra int, err error)

// vectorReader is a channel with a vectored read of its own (the fuzz
// test's channel).
type vectorReader interface {
	readv(a, b []byte) (n, extra int, err error)
}

// readvOf returns conn's vectored read, or nil.
func readvOf(conn net.Conn) readvFunc {
	if v, ok := conn.(vectorReader); ok {
		return v.readv
	}
	return sysReadv(conn)
}
