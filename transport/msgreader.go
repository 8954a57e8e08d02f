package transport

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/braid-hpc/braid/transport/internal/wire"
)

// errReaderOpen is returned by reads on a stream whose previous message is
// still being read through a MessageReader.
var errReaderOpen = errors.New("transport: the previous message's MessageReader is still open; read it to io.EOF or close it first")

// MessageReader reads one message of any size as it arrives, segment by
// segment, in memory bounded by the stream's window rather than by the
// message: what ReadMessage cannot do for messages above
// Config.MaxMessageSize. NextMessage returns it.
type MessageReader struct {
	st  *Stream
	ctx context.Context
	cur []byte // unread bytes of the current segment
	buf []byte // the current segment's buffer, released when consumed
	fin bool   // the message's last segment has been taken
	err error  // sticky: io.EOF at the end, or the failure
	n   int64
}

// NextMessage waits for the next message of the stream and returns a
// reader of its bytes, which become readable as the sender's segments
// arrive. ctx bounds every wait of the reader, not only this one. It
// returns io.EOF once the peer has closed the stream.
//
// Read the message to io.EOF, or Close the reader, before reading the
// next message: until then ReadMessage and NextMessage fail.
func (st *Stream) NextMessage(ctx context.Context) (*MessageReader, error) {
	st.readMu.Lock()
	defer st.readMu.Unlock()
	s := st.s
	s.mu.Lock()
	if st.rxReader != nil {
		s.mu.Unlock()
		return nil, errReaderOpen
	}
	m := &MessageReader{st: st, ctx: ctx}
	// Segments that a ReadMessage cut short by its context had already
	// taken come first.
	if len(st.rxPartial) > 0 {
		parts := st.rxPartial
		st.rxPartial, st.rxPartLen = nil, 0
		st.rxReader = m
		s.mu.Unlock()
		m.cur = joinParts(parts) // outside the lock, like ReadMessage
		return m, nil
	}
	s.mu.Unlock()
	// Wait for the first segment, so that the end of the stream is an
	// error of NextMessage rather than an empty message.
	if err := m.next(); err != nil {
		return nil, err
	}
	return m, nil
}

// next makes the next segment of the message current. It returns io.EOF
// when the message (or, before its first segment, the stream) has ended.
func (m *MessageReader) next() error {
	st := m.st
	s := st.s
	if m.buf != nil {
		putBuf(m.buf)
		m.buf, m.cur = nil, nil
	}
	for {
		if m.fin {
			return io.EOF
		}
		s.mu.Lock()
		seg := st.rxSegs[st.rxNext]
		if seg != nil && seg.complete {
			st.consumeLocked(seg)
			if seg.ref.Flags&wire.FlagClose != 0 {
				st.rxEOF = true
				st.maybeForget()
				started := st.rxReader == m
				st.rxReader = nil
				s.mu.Unlock()
				if started {
					return fmt.Errorf("transport: stream %d closed in the middle of a message", st.id)
				}
				return io.EOF
			}
			fin := seg.ref.Flags&wire.FlagFin != 0
			if st.rxSkipping {
				// The rest of a message ReadMessage refused as too large.
				if fin {
					st.rxSkipping = false
				}
				s.mu.Unlock()
				continue
			}
			st.rxReader = m
			if fin {
				m.fin = true
				st.rxReader = nil
			}
			s.mu.Unlock()
			m.buf, m.cur = seg.buf, seg.buf
			return nil
		}
		if st.rxEOF {
			started := st.rxReader == m
			s.mu.Unlock()
			if started {
				return io.ErrUnexpectedEOF
			}
			return io.EOF
		}
		if s.closed {
			err := s.closeErr
			s.mu.Unlock()
			return err
		}
		s.mu.Unlock()
		select {
		case <-st.rxSig:
		case <-s.done:
		case <-m.ctx.Done():
			return m.ctx.Err()
		}
	}
}

// Read implements io.Reader.
func (m *MessageReader) Read(p []byte) (int, error) {
	for len(m.cur) == 0 {
		if m.err != nil {
			return 0, m.err
		}
		if err := m.next(); err != nil {
			m.fail(err)
			return 0, m.err
		}
	}
	n := copy(p, m.cur)
	m.cur = m.cur[n:]
	m.n += int64(n)
	return n, nil
}

// WriteTo implements io.WriterTo: io.Copy hands w the received segments
// themselves, without copying them through a buffer.
func (m *MessageReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if len(m.cur) > 0 {
			n, err := w.Write(m.cur)
			m.cur = m.cur[n:]
			m.n += int64(n)
			total += int64(n)
			if err != nil {
				return total, err
			}
			continue
		}
		if m.err != nil {
			if m.err == io.EOF {
				return total, nil
			}
			return total, m.err
		}
		if err := m.next(); err != nil {
			m.fail(err)
		}
	}
}

// Len returns how many bytes of the message were read so far.
func (m *MessageReader) Len() int64 { return m.n }

// fail records the end of the reader: io.EOF, or an error that also frees
// the stream for the next message.
func (m *MessageReader) fail(err error) {
	m.err = err
	if err == io.EOF {
		return
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// The rest of the message may still come: skip it, so that the
		// next read starts at a message boundary.
		m.Close()
		m.err = err
	}
}

// Close discards the rest of the message, as it arrives, and frees the
// stream for the next message. It does not wait.
func (m *MessageReader) Close() error {
	st := m.st
	s := st.s
	s.mu.Lock()
	if st.rxReader == m {
		st.rxReader = nil
		if !m.fin {
			st.rxSkipping = true
		}
	}
	s.mu.Unlock()
	m.fin = true
	if m.buf != nil {
		putBuf(m.buf)
	}
	m.buf, m.cur = nil, nil
	if m.err == nil {
		m.err = errReaderClosed
	}
	return nil
}

var errReaderClosed = errors.New("transport: read of a closed MessageReader")
